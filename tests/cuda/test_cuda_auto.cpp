// The shipped config's `auto` values on a GPU machine (issue 21): `timitseg
// train --config configs/synth.yaml` (shrunk to two epochs) trains on the GPU
// with the cuda CRF backend and, on compute capability 9.x, the fused LSTM;
// train.log names each pick and run.json records them; the checkpoint keeps
// `auto`; `evaluate` of it runs on the GPU; and `--device cpu` still wins.
// Skips, saying why, without a CUDA device.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "common/cuda.h"
#include "model/cuda/lstm_fused.h"
#include "tests/support/cli.h"

namespace fs = std::filesystem;
using namespace timitseg;
using testsupport::Cmd;
using testsupport::run;
using testsupport::slurp;

TEST(CudaAuto, ShippedConfigTrainsOnTheGpuWithTheFusedKernelOnHopper) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device was found: `auto` picks the CPU here";
  int major = 0, minor = 0;
  cuda::compute_capability(&major, &minor);
  std::string why;
  const bool fused = major == 9 && model::fused::supported(64, &why);  // configs/synth.yaml: 64 units per direction
  const fs::path dir = testsupport::fresh_temp_dir("timitseg_cuda_auto");
  const Cmd corpus = testsupport::make_prepared_corpus(testsupport::binary(), dir, 6, 4, 7);
  ASSERT_EQ(corpus.rc, 0) << corpus.output;
  const std::string cfg = std::string(TIMITSEG_SOURCE_DIR) + "/configs/synth.yaml --set data.workdir=" +
                          (dir / "work").string() + " --set train.epochs=2";
  const fs::path gpu = dir / "gpu", cpu = dir / "cpu";
  const Cmd t = run("train --config " + cfg + " --set train.run_dir=" + gpu.string());
  ASSERT_EQ(t.rc, 0) << t.output;
  const std::string log = slurp(gpu / "train.log");
  EXPECT_NE(log.find("train.device = auto: cuda ("), std::string::npos) << log;
  EXPECT_NE(log.find(std::string("train.rnn_algo = auto: ") + (fused ? "fused" : "standard")), std::string::npos)
      << log;
  EXPECT_NE(log.find("crf.backend = auto: cuda (on the GPU)"), std::string::npos) << log;
  const auto rj = nlohmann::json::parse(slurp(gpu / "run.json"));
  EXPECT_EQ(rj.at("device"), "cuda");
  EXPECT_EQ(rj.at("crf_backend"), "cuda");
  EXPECT_EQ(rj.at("rnn_algo"), fused ? "fused" : "standard");
  EXPECT_EQ(rj.at("config").at("train").at("rnn_algo"), "auto");
  const Cmd e = run("evaluate --checkpoint " + (gpu / "checkpoints" / "best.safetensors").string() + " --split dev");
  EXPECT_EQ(e.rc, 0) << e.output;
  EXPECT_NE(e.output.find("crf cuda"), std::string::npos) << e.output;
  // an explicit --device cpu wins; crf.backend auto follows it
  const Cmd c = run("train --config " + cfg + " --set train.run_dir=" + cpu.string() + " --device cpu");
  ASSERT_EQ(c.rc, 0) << c.output;
  const auto cj = nlohmann::json::parse(slurp(cpu / "run.json"));
  EXPECT_EQ(cj.at("device"), "cpu");
  EXPECT_EQ(cj.at("crf_backend"), "cpu");
  fs::remove_all(dir);
}
