// `timitseg align` with the cuda CRF backend (issue 23): on the CPU executor
// (the same encoder) the cuda backend's .PHN and TextGrid files are byte for
// byte those of the cpu backend, with and without optional silences; the GPU
// executor aligns the same tree (its encoder differs in the last bits, so its
// output is only checked for shape). Skips, saying why, without a CUDA device.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/cuda.h"
#include "tests/support/cli.h"

namespace fs = std::filesystem;
using namespace timitseg;
using testsupport::Cmd;
using testsupport::run;
using testsupport::slurp;

TEST(CudaAlignCli, CudaBackendWritesTheCpuBackendsFiles) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device was found: align with the cuda backend needs one";
  const fs::path dir = testsupport::fresh_temp_dir("timitseg_cuda_align");
  const Cmd corpus = testsupport::make_prepared_corpus(testsupport::binary(), dir, 6, 4, 13);
  ASSERT_EQ(corpus.rc, 0) << corpus.output;
  const std::string config = (dir / "c.yaml").string();
  std::ofstream(config) << "data:\n  workdir: " << (dir / "work").string()
                        << "\nmodel:\n  hidden_dim: 32\n  num_layers: 1\n"
                           "crf:\n  max_duration: 10\n"
                           "train:\n  epochs: 2\n  batch_size: 4\n  seed: 2\n  device: cpu\n  run_dir: "
                        << (dir / "run").string() << "\n";
  const Cmd t = run("train --config " + config);
  ASSERT_EQ(t.rc, 0) << t.output;
  const std::string ck = (dir / "run" / "checkpoints" / "best.safetensors").string();
  const std::string tree = (dir / "synth" / "TEST").string();
  for (const std::string extra : {"", " --batch-size 3"}) {
    const Cmd c = run("align --checkpoint " + ck + " --timit " + tree + " --device cpu --crf-backend cpu --out " +
                      (dir / "cpu").string() + extra);
    ASSERT_EQ(c.rc, 0) << c.output;
    const Cmd g = run("align --checkpoint " + ck + " --timit " + tree + " --device cpu --crf-backend cuda --out " +
                      (dir / "cuda").string() + extra);
    ASSERT_EQ(g.rc, 0) << g.output;
    int n = 0;
    for (const auto& f : fs::recursive_directory_iterator(dir / "cpu")) {
      if (!f.is_regular_file()) continue;
      ++n;
      const fs::path other = dir / "cuda" / fs::relative(f.path(), dir / "cpu");
      EXPECT_EQ(slurp(f.path()), slurp(other)) << other;
    }
    EXPECT_GT(n, 0);
  }
  // The GPU executor (cuDNN encoder, cuda backend): every input aligned.
  const Cmd gpu = run("align --checkpoint " + ck + " --timit " + tree + " --device cuda --out " + (dir / "gpu").string());
  ASSERT_EQ(gpu.rc, 0) << gpu.output;
  int phn = 0;
  for (const auto& f : fs::recursive_directory_iterator(dir / "gpu")) phn += f.path().extension() == ".PHN";
  EXPECT_GT(phn, 0);
  // evaluate --align on the GPU: the "align" block is there.
  const Cmd e = run("evaluate --checkpoint " + ck + " --split test --align --device cuda --json " +
                    (dir / "e.json").string());
  ASSERT_EQ(e.rc, 0) << e.output;
  EXPECT_NE(slurp(dir / "e.json").find("\"align\""), std::string::npos);
  fs::remove_all(dir);
}
