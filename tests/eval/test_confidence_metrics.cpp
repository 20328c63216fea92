// AUROC and expected calibration error of evaluate --align's confidence
// section (eval/confidence_metrics.h) against values computed by hand, ties
// included, and the corner cases (no positives, empty input).
#include <gtest/gtest.h>

#include <vector>

#include "eval/confidence_metrics.h"

using timitseg::eval::auroc;
using timitseg::eval::reliability;

TEST(ConfidenceMetrics, AurocByHand) {
  // Perfect separation, reversed, and a hand count: positives {0.8, 0.4},
  // negatives {0.1, 0.5, 0.6}: pairs won 0.8>all (3), 0.4>0.1 (1): 4 of 6.
  EXPECT_DOUBLE_EQ(*auroc({0.1, 0.9, 0.2, 0.8}, {0, 1, 0, 1}), 1.0);
  EXPECT_DOUBLE_EQ(*auroc({0.1, 0.9, 0.2, 0.8}, {1, 0, 1, 0}), 0.0);
  EXPECT_DOUBLE_EQ(*auroc({0.8, 0.1, 0.4, 0.5, 0.6}, {1, 0, 1, 0, 0}), 4.0 / 6.0);
}

TEST(ConfidenceMetrics, AurocTiesCountOneHalf) {
  // positives {0.5, 0.7}, negatives {0.5, 0.5, 0.2}: 0.5 vs 0.5 twice (1/2 each),
  // 0.5 > 0.2, 0.7 > all three: (1 + 1 + 3) / 6.
  EXPECT_DOUBLE_EQ(*auroc({0.5, 0.7, 0.5, 0.5, 0.2}, {1, 1, 0, 0, 0}), 5.0 / 6.0);
  // All equal: 1/2.
  EXPECT_DOUBLE_EQ(*auroc({0.3, 0.3, 0.3}, {1, 0, 0}), 0.5);
  EXPECT_FALSE(auroc({0.3, 0.4}, {1, 1}).has_value());
  EXPECT_FALSE(auroc({}, {}).has_value());
}

TEST(ConfidenceMetrics, ExpectedCalibrationErrorByHand) {
  // bin [0.1,0.2): 0.15 (outcome 0), 0.15 (1): mean conf 0.15, acc 0.5 -> |.35| * 2/5
  // bin [0.9,1.0]: 0.95 (1), 1.0 (1), 0.9 (0): conf 0.95, acc 2/3 -> |0.2833..| * 3/5
  const auto r = reliability({0.15, 0.15, 0.95, 1.0, 0.9}, {0, 1, 1, 1, 0});
  ASSERT_EQ(r.count.size(), 10u);
  EXPECT_EQ(r.count[1], 2);
  EXPECT_EQ(r.count[9], 3);
  EXPECT_DOUBLE_EQ(r.confidence[9], (0.95 + 1.0 + 0.9) / 3);
  EXPECT_DOUBLE_EQ(r.accuracy[9], 2.0 / 3);
  EXPECT_NEAR(r.ece, 0.35 * 2 / 5 + (0.95 - 2.0 / 3) * 3 / 5, 1e-15);
  // Perfectly calibrated halves: ece 0; no input: ece 0.
  EXPECT_DOUBLE_EQ(reliability({0.5, 0.5}, {1, 0}).ece, 0.0);
  EXPECT_DOUBLE_EQ(reliability({}, {}).ece, 0.0);
}
