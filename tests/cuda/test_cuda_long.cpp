// `decode` of a long recording on the GPU (one utterance over
// model::kWindowFrames frames: the encoder in windows, model/long_input.h):
// with the cuda CRF backend the centred cumsum and the Viterbi run on the
// device (CudaExecutor::decode_long). Oracles: the same GPU executor with the
// cpu CRF backend (the same encoder scores, the cumsum and the Viterbi on the
// host: the device cumsum is bitwise the host's, so the segments must be
// identical), and the CPU executor (its own encoder in windows: the NLL within
// 1e-4 relative, the frame labels agreeing on >= 99.9 % of the frames).
// With --centre-frames the same three ways. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "common/progress.h"
#include "model/long_input.h"
#include "model/make_executor.h"
#include "model/model.h"
#include "tests/support/gpu.h"
#include "tests/support/model_problems.h"

using namespace timitseg;
using namespace timitseg::model;
using namespace timitseg::config;

namespace {

// The frame labels [T] of one utterance's segments.
std::vector<int32_t> frame_labels(const std::vector<crf::Segment>& segs, int T) {
  std::vector<int32_t> out(static_cast<size_t>(T), -1);
  for (const crf::Segment& s : segs)
    for (int32_t t = s.start; t < s.start + s.duration && t < T; ++t) out[static_cast<size_t>(t)] = s.label;
  return out;
}

TEST(CudaLong, DecodeOnTheDeviceEqualsTheHostPathAndTracksTheCpu) {
  REQUIRE_GPU();
  Progress::set_enabled(false);
  ModelDims d = testsupport::small_dims();
  d.onset = true;  // the onset scores gathered from the windows too
  const std::vector<float> params = testsupport::random_model_params(d, 61, 0.5f);
  const int T = static_cast<int>(kWindowFrames) + 2500;  // two windows
  const Batch batch = testsupport::random_model_batch(d, 1, T, 62);
  ASSERT_GT(batch.input.lengths[0], kWindowFrames);

  std::vector<float> sdev, shost, scpu;
  std::vector<double> ndev, nhost, ncpu;
  const auto dev = testsupport::executor_with("cuda", d, params, "cuda")->decode(batch, &sdev, &ndev);
  const auto host = testsupport::executor_with("cuda", d, params, "cpu")->decode(batch, &shost, &nhost);
  const auto cpu = testsupport::executor_with("cpu", d, params, "cpu")->decode(batch, &scpu, &ncpu);
  ASSERT_EQ(dev.size(), 1u);
  ASSERT_FALSE(dev[0].empty());
  // the same GPU encoder scores; the device Viterbi equals the host's on them
  EXPECT_EQ(sdev, shost);
  EXPECT_EQ(dev, host);
  ASSERT_EQ(ndev.size(), 1u);
  ASSERT_EQ(nhost.size(), 1u);
  EXPECT_NEAR(ndev[0], nhost[0], 1e-6 * (1 + std::abs(nhost[0])));
  // against the CPU executor (its own encoder): the NLL and the frame labels
  ASSERT_EQ(ncpu.size(), 1u);
  EXPECT_NEAR(ndev[0], ncpu[0], 1e-4 * (1 + std::abs(ncpu[0])));
  const std::vector<int32_t> a = frame_labels(dev[0], T), b = frame_labels(cpu[0], T);
  int64_t same = 0;
  for (int t = 0; t < T; ++t) same += a[t] == b[t] && a[t] >= 0;
  const double agree = static_cast<double>(same) / T;
  std::printf("[ long ] T=%d: %zu segments on the device, %zu on the CPU; frame labels agree on %.4f %%; nll %.6f / %.6f\n",
              T, dev[0].size(), cpu[0].size(), 100.0 * agree, ndev[0], ncpu[0]);
  EXPECT_GE(agree, 0.999);
  Progress::set_enabled(true);
}

// --centre-frames (ExecutorOptions::centre_frames = 200): on the GPU the
// running-mean cumsum is computed on the host (model::long_cumsum) and
// uploaded; the device Viterbi on it equals the host path's, and tracks the
// CPU executor's as above; and its loss differs from the whole-recording centring's.
TEST(CudaLong, DecodeWithCentreFramesEqualsTheHostPathAndTracksTheCpu) {
  REQUIRE_GPU();
  Progress::set_enabled(false);
  ModelDims d = testsupport::small_dims();
  const std::vector<float> params = testsupport::random_model_params(d, 71, 0.5f);
  const int T = static_cast<int>(kWindowFrames) + 1500;
  const Batch batch = testsupport::random_model_batch(d, 1, T, 72);
  auto make = [&](const std::string& device, const std::string& crf, int64_t centre) {
    ExecutorOptions xo;
    xo.threads = 2;
    xo.crf_backend = crf::backend_kind(crf);
    xo.centre_frames = centre;
    auto ex = make_executor(resolve_device(enum_value<DeviceSetting>(device, "device")), d, xo);
    AdamW opt;
    opt.reset(params.size());
    ex->set_state(params, opt);
    return ex;
  };
  std::vector<double> ndev, nhost, ncpu, nwhole;
  const auto dev = make("cuda", "cuda", 200)->decode(batch, nullptr, &ndev);
  const auto host = make("cuda", "cpu", 200)->decode(batch, nullptr, &nhost);
  const auto cpu = make("cpu", "cpu", 200)->decode(batch, nullptr, &ncpu);
  make("cuda", "cuda", 0)->decode(batch, nullptr, &nwhole);
  EXPECT_EQ(dev, host);
  // The centring changes the scores: the loss of the gold labels differs (the
  // decoded segments of these random scores may not: they follow the model's
  // transition and duration parameters).
  EXPECT_GT(std::abs(ndev[0] - nwhole[0]), 1e-6 * (1 + std::abs(nwhole[0])))  // device vs CPU: 4e-5 apart
      << "centre 200: " << ndev[0] << ", whole recording: " << nwhole[0];
  EXPECT_NEAR(ndev[0], nhost[0], 1e-6 * (1 + std::abs(nhost[0])));
  EXPECT_NEAR(ndev[0], ncpu[0], 1e-4 * (1 + std::abs(ncpu[0])));
  const std::vector<int32_t> a = frame_labels(dev[0], T), b = frame_labels(cpu[0], T);
  int64_t same = 0;
  for (int t = 0; t < T; ++t) same += a[t] == b[t] && a[t] >= 0;
  std::printf("[ long ] centre 200, T=%d: frame labels agree on %.4f %%\n", T, 100.0 * same / T);
  EXPECT_GE(static_cast<double>(same) / T, 0.999);
  Progress::set_enabled(true);
}

}  // namespace
