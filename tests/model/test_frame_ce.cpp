// crf.frame_ce_weight (model/frame_ce.h) against hand-computed values: the
// frame cross-entropy sums and the gradient softmax - onehot on a tiny case
// whose softmaxes are simple fractions, padding never read (NaN there), both
// row layouts (batch-major and the network's time-major), large scores
// without overflow; the config key's range. The gradient through the whole
// network is checked by finite differences in test_network.cpp, the GPU
// kernel against this function in tests/cuda/test_cuda_knobs.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "config/config.h"
#include "model/frame_ce.h"

using namespace timitseg::model;

using namespace timitseg::config;

namespace {

constexpr int B = 2, T = 3, C = 3;
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// x [B][T][C]: utterance 0 has 2 valid frames, utterance 1 has 1; padding NaN.
//   x[0][0] = (0, 0, 0)            label 1: softmax (1/3, 1/3, 1/3), CE = ln 3
//   x[0][1] = (0, ln 2, ln 3)      label 2: softmax (1/6, 1/3, 1/2), CE = ln 2
//   x[1][0] = (5, 5 + ln 3, 5)     label 0: softmax (1/5, 3/5, 1/5), CE = ln 5
std::vector<float> hand_scores() {
  const float l2 = std::log(2.0f), l3 = std::log(3.0f);
  return {0, 0, 0, 0, l2, l3, kNaN, kNaN, kNaN, 5, 5 + l3, 5, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN};
}
const std::vector<int32_t> kLengths{2, 1};
const std::vector<int32_t> kLabels{1, 2, -7, 0, -7, -7};  // padding labels out of range: never read

}  // namespace

TEST(FrameCrossEntropy, HandComputedValuesAndGradient) {
  const std::vector<float> x = hand_scores();
  std::vector<double> per(B);
  std::vector<float> dx(B * T * C, 99.f);
  const double total = frame_cross_entropy<float>(B, T, C, x.data(), T * C, C, kLengths.data(), kLabels.data(), 0.5,
                                                  per.data(), dx.data());
  EXPECT_NEAR(per[0], std::log(3.0) + std::log(2.0), 1e-6);
  EXPECT_NEAR(per[1], std::log(5.0), 1e-6);
  EXPECT_NEAR(total, std::log(30.0), 1e-6);
  const std::vector<double> want = {0.5 / 3, 0.5 * (1.0 / 3 - 1), 0.5 / 3,  // x[0][0], label 1
                                    0.5 / 6, 0.5 / 3, 0.5 * (0.5 - 1),      // x[0][1], label 2
                                    0, 0, 0,                                // padding
                                    0.5 * (0.2 - 1), 0.5 * 0.6, 0.5 * 0.2,  // x[1][0], label 0
                                    0, 0, 0, 0, 0, 0};
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] == 0)
      EXPECT_EQ(dx[i], 0.0f) << i;  // padding: exactly 0
    else
      EXPECT_NEAR(dx[i], want[i], 1e-6) << i;
  }
  // the rows of each valid frame sum to 0 (softmax minus one-hot)
  for (int r : {0, 1, 3}) EXPECT_NEAR(dx[r * C] + dx[r * C + 1] + dx[r * C + 2], 0.0, 1e-7) << r;
}

TEST(FrameCrossEntropy, TimeMajorRowsGiveTheSameResult) {
  const std::vector<float> x = hand_scores();
  std::vector<float> tm(T * B * C);  // row t * B + b
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c) tm[(t * B + b) * C + c] = x[(b * T + t) * C + c];
  std::vector<float> d1(B * T * C), d2(B * T * C);
  const double a = frame_cross_entropy<float>(B, T, C, x.data(), T * C, C, kLengths.data(), kLabels.data(), 1.0,
                                              nullptr, d1.data());
  const double b = frame_cross_entropy<float>(B, T, C, tm.data(), C, B * C, kLengths.data(), kLabels.data(), 1.0,
                                              nullptr, d2.data());
  EXPECT_EQ(a, b);
  EXPECT_EQ(d1, d2);  // the gradient is batch-major [B][T][C] in both cases
}

TEST(FrameCrossEntropy, LargeScoresNeitherOverflowNorUnderflowToNaN) {
  // (1000, 0, -1000): exp(1000) overflows without the max shift
  const std::vector<float> x = {1000, 0, -1000, 1000, 0, -1000};
  const std::vector<int32_t> len{2}, lab{0, 2};
  std::vector<float> dx(6);
  std::vector<double> per(1);
  const double total =
      frame_cross_entropy<float>(1, 2, 3, x.data(), 6, 3, len.data(), lab.data(), 1.0, per.data(), dx.data());
  EXPECT_NEAR(total, 2000.0, 1e-9);  // frame 0: CE = log(1 + e^-1000 + e^-2000) = 0 in float64; frame 1: 2000
  EXPECT_EQ(dx[0], 0.0f);
  EXPECT_EQ(dx[1], 0.0f);
  EXPECT_EQ(dx[2], 0.0f);
  EXPECT_EQ(dx[3], 1.0f);
  EXPECT_EQ(dx[5], -1.0f);
}

TEST(FrameCrossEntropy, ConfigKeyDefaultAndRange) {
  Config cfg;
  EXPECT_EQ(cfg.crf_frame_ce_weight, 0.0);
  for (const double bad : {-0.5, 100.5}) {
    Config c;
    c.crf_frame_ce_weight = bad;
    try {
      c.validate();
      ADD_FAILURE() << bad << " accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("crf.frame_ce_weight"), std::string::npos) << e.what();
    }
  }
  Config ok;
  ok.crf_frame_ce_weight = 100;
  EXPECT_NO_THROW(ok.validate());
  Config dec;
  dec.set("crf.decode=mbr", "test");
  try {
    dec.validate();
    ADD_FAILURE() << "crf.decode=mbr accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("one of viterbi, posterior"), std::string::npos) << e.what();
  }
}
