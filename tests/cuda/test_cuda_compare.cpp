// `timitseg compare` on the GPU (issue 21): runs trained concurrently in one
// process (--jobs 3, and the measured default) give bit for bit the checkpoints
// of one at a time (--jobs 1), with debug.deterministic, the cuda CRF backend
// and the fused LSTM where the GPU has it (else cuDNN's standard algorithm).
// Skips, saying why, without a CUDA device.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/cuda.h"
#include "common/safetensors.h"
#include "model/cuda/lstm_fused.h"
#include "tests/support/cli.h"

namespace fs = std::filesystem;
using namespace timitseg;
using testsupport::Cmd;
using testsupport::run;

namespace {

void expect_same_tensors(const fs::path& a, const fs::path& b) {
  const st::File fa = st::load(a.string()), fb = st::load(b.string());
  ASSERT_EQ(fa.tensors.size(), fb.tensors.size()) << a << " vs " << b;
  for (const auto& [name, t] : fa.tensors) {
    ASSERT_TRUE(fb.has(name)) << name;
    EXPECT_EQ(t.bytes, fb.get(name).bytes) << name << " differs: " << a << " vs " << b;
  }
}

}  // namespace

TEST(CudaCompare, ConcurrentRunsAreBitwiseTheRunsOneAtATime) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device was found: compare --jobs on the GPU needs one";
  const int H = 64;  // per direction; model.hidden_dim is W = 2H
  std::string why;
  const std::string algo = model::fused::supported(H, &why) ? "fused" : "standard";
  if (algo != "fused") std::fprintf(stderr, "fused LSTM not available (%s): testing with cuDNN standard\n", why.c_str());
  const fs::path dir = testsupport::fresh_temp_dir("timitseg_cuda_compare");
  const Cmd corpus = testsupport::make_prepared_corpus(testsupport::binary(), dir, 8, 5, 11);
  ASSERT_EQ(corpus.rc, 0) << corpus.output;
  auto config = [&](const std::string& name) {
    const std::string path = (dir / (name + ".yaml")).string();
    std::ofstream(path) << "data:\n  workdir: " << (dir / "work").string()
                        << "\nmodel:\n  hidden_dim: " << 2 * H
                        << "\n  num_layers: 2\n  dropout: 0.1\n"
                           "crf:\n  max_duration: 12\n  backend: cuda\n"
                           "train:\n  epochs: 3\n  batch_size: 8\n  lr: 0.005\n  seed: 5\n  device: cuda\n"
                           "  rnn_algo: "
                        << algo << "\n  run_dir: " << (dir / name).string() << "\ndebug:\n  deterministic: true\n";
    return path;
  };
  Cmd one = run("compare --config " + config("one") + " --seeds 3 --jobs 1");
  ASSERT_EQ(one.rc, 0) << one.output;
  EXPECT_NE(one.output.find("(--jobs 1)"), std::string::npos) << one.output;
  Cmd three = run("compare --config " + config("three") + " --seeds 3 --jobs 3");
  ASSERT_EQ(three.rc, 0) << three.output;
  EXPECT_NE(three.output.find("6 run(s), 3 at a time (--jobs 3)"), std::string::npos) << three.output;
  Cmd dflt = run("compare --config " + config("default") + " --seeds 3");
  ASSERT_EQ(dflt.rc, 0) << dflt.output;
  EXPECT_NE(dflt.output.find("by default (6 runs to train"), std::string::npos) << dflt.output;
  for (const char* seed : {"seed-5", "seed-6", "seed-7"})
    for (const char* name : {"linear", "semicrf"})
      for (const char* f : {"epoch-3.safetensors", "best.safetensors"}) {
        const fs::path ref = dir / "one" / seed / name / "checkpoints" / f;
        expect_same_tensors(ref, dir / "three" / seed / name / "checkpoints" / f);
        expect_same_tensors(ref, dir / "default" / seed / name / "checkpoints" / f);
      }
  fs::remove_all(dir);
}
