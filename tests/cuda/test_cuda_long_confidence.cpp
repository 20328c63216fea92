// `align` of a long recording on the GPU with confidences (one utterance over
// model::kWindowFrames frames, its transcript over the per-utterance limit):
// the GPU executor with the cuda CRF backend scores the transcript windows as
// batches on the device (crf::batched_window_confidence); the oracle is the
// same GPU executor with the cpu CRF backend (the same encoder scores and
// alignment, the windows one at a time on the host, without a band:
// TIMITSEG_CONFIDENCE_BAND=0, and with the default band). The spans must be
// identical; the confidences within the tolerance of docs/align.md (the
// float32 rounding of the folded edge transitions). And the encoder's windows
// forwarded as batches (the default) against one window at a time
// (TIMITSEG_LONG_WINDOW_BATCH=1). Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/progress.h"
#include "model/long_input.h"
#include "model/model.h"
#include "tests/support/gpu.h"
#include "tests/support/model_problems.h"

using namespace timitseg;
using namespace timitseg::model;

namespace {

TEST(CudaLong, AlignConfidencesOnTheDeviceMatchTheHostWindows) {
  REQUIRE_GPU();
  Progress::set_enabled(false);
  ModelDims d = testsupport::small_dims();
  d.onset = true;
  const std::vector<float> params = testsupport::random_model_params(d, 81, 0.5f);
  const int T = static_cast<int>(kWindowFrames) + 1500;  // two encoder windows
  const Batch batch = testsupport::random_model_batch(d, 1, T, 82);
  ASSERT_GT(batch.input.lengths[0], kWindowFrames);
  // The transcript: the decoded labels (consecutive repeats merged), so that the alignment follows the scores.
  const auto decoded = testsupport::executor_with("cuda", d, params, "cuda")->decode(batch, nullptr);
  ASSERT_EQ(decoded.size(), 1u);
  std::vector<int32_t> phones;
  for (const crf::Segment& s : decoded[0])
    if (phones.empty() || phones.back() != s.label) phones.push_back(s.label);
  const int64_t N = static_cast<int64_t>(phones.size());
  ASSERT_GT(N, 200);  // several transcript windows
  const std::vector<int32_t> nph{static_cast<int32_t>(N)};
  std::vector<int32_t> optional(N, 0);
  for (int64_t n = 5; n < N; n += 17) optional[n] = 1;  // some phones may be skipped
  ::setenv("TIMITSEG_CONFIDENCE_UTTERANCE_MIB", "16", 1);  // windows for this length (the limit of an hour's)
  crf::AlignConfidence dev, host, host_band;
  const crf::AlignResult rd = testsupport::executor_with("cuda", d, params, "cuda")->align(batch, N, phones, nph, optional, &dev);
  const crf::AlignResult rb = testsupport::executor_with("cuda", d, params, "cpu")->align(batch, N, phones, nph, optional, &host_band);
  ::setenv("TIMITSEG_CONFIDENCE_BAND", "0", 1);
  const crf::AlignResult rh = testsupport::executor_with("cuda", d, params, "cpu")->align(batch, N, phones, nph, optional, &host);
  ::unsetenv("TIMITSEG_CONFIDENCE_BAND");
  ::unsetenv("TIMITSEG_CONFIDENCE_UTTERANCE_MIB");
  ASSERT_TRUE(std::isfinite(rd.score[0]));
  EXPECT_EQ(rd.spans, rh.spans);
  EXPECT_EQ(rb.spans, rh.spans);
  ASSERT_EQ(dev.windowed[0], 1);
  ASSERT_EQ(host.windowed[0], 1);
  double err = 0.0, err_label = 0.0, err_band = 0.0, mean_b = 0.0, mean_l = 0.0;
  for (int64_t i = 0; i < N; ++i) {
    err = std::max({err, std::fabs(dev.boundary[i] - host.boundary[i]), std::fabs(dev.start[i] - host.start[i]),
                    std::fabs(dev.end[i] - host.end[i])});
    err_label = std::max(err_label, std::fabs(dev.label[i] - host.label[i]));
    err_band = std::max({err_band, std::fabs(dev.boundary[i] - host_band.boundary[i]),
                         std::fabs(dev.label[i] - host_band.label[i])});
    mean_b += dev.boundary[i] / N;
    mean_l += dev.label[i] / N;
  }
  std::printf("[ long ] T=%d, %lld phones: device windows against the host windows: max |error| boundary/start/end "
              "%.3g, label %.3g; against the banded host path %.3g; means boundary %.3f, label %.3f\n",
              T, static_cast<long long>(N), err, err_label, err_band, mean_b, mean_l);
  EXPECT_LT(err, 1e-5);
  EXPECT_LT(err_label, 1e-5);
  EXPECT_GT(mean_b + mean_l, 0.05);  // not all zeros
  Progress::set_enabled(true);
}

// Four encoder windows: in one batch (the default, 4 a batch; the last window
// shorter, so padded), in batches of 3 and 1, and one at a time (the previous
// path): the same scores within float32 rounding (cuDNN may pick other
// kernels for another batch size), and decode's segments on them agree on
// >= 99.9 % of the frames.
TEST(CudaLong, EncoderWindowsInBatchesMatchOneAtATime) {
  REQUIRE_GPU();
  Progress::set_enabled(false);
  ModelDims d = testsupport::small_dims();
  d.onset = true;
  const std::vector<float> params = testsupport::random_model_params(d, 91, 0.5f);
  const int T = 3 * static_cast<int>(kWindowFrames) + 700;
  const Batch batch = testsupport::random_model_batch(d, 1, T, 92);
  ASSERT_EQ(windows_of(batch.input.lengths[0]).size(), 4u);
  auto run = [&](const char* per_batch, std::vector<float>* scores) {
    ::setenv("TIMITSEG_LONG_WINDOW_BATCH", per_batch, 1);
    auto segs = testsupport::executor_with("cuda", d, params, "cuda")->decode(batch, scores);
    ::unsetenv("TIMITSEG_LONG_WINDOW_BATCH");
    return segs;
  };
  std::vector<float> s1, s3, s4;
  const auto one = run("1", &s1), three = run("3", &s3), four = run("4", &s4);
  ASSERT_EQ(s1.size(), static_cast<size_t>(T) * d.num_classes);
  double scale = 0.0, e3 = 0.0, e4 = 0.0;
  for (size_t i = 0; i < s1.size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::fabs(s1[i])));
    e3 = std::max(e3, static_cast<double>(std::fabs(s3[i] - s1[i])));
    e4 = std::max(e4, static_cast<double>(std::fabs(s4[i] - s1[i])));
  }
  auto agree = [&](const std::vector<crf::Segment>& a, const std::vector<crf::Segment>& b) {
    std::vector<int32_t> fa(T, -1), fb(T, -1);
    for (const crf::Segment& s : a) std::fill(fa.begin() + s.start, fa.begin() + s.start + s.duration, s.label);
    for (const crf::Segment& s : b) std::fill(fb.begin() + s.start, fb.begin() + s.start + s.duration, s.label);
    int64_t same = 0;
    for (int t = 0; t < T; ++t) same += fa[t] == fb[t] && fa[t] >= 0;
    return static_cast<double>(same) / T;
  };
  const double a3 = agree(three[0], one[0]), a4 = agree(four[0], one[0]);
  std::printf("[ long ] 4 windows: scores max |diff| against one at a time: batches of 3 %.3g, of 4 %.3g (max |score| "
              "%.3g); frame labels agree %.4f / %.4f\n", e3, e4, scale, a3, a4);
  EXPECT_GT(scale, 0.1);
  EXPECT_LE(e3, 1e-5 * scale);
  EXPECT_LE(e4, 1e-5 * scale);
  EXPECT_GE(a3, 0.999);
  EXPECT_GE(a4, 0.999);
  Progress::set_enabled(true);
}

}  // namespace
