// settings/limits.h: the ranges' membership at and beyond their ends, and their
// text, against values written here by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "settings/limits.h"

namespace limits = timitseg::limits;

TEST(Limits, ClosedAndOpenEnds) {
  EXPECT_TRUE(limits::kThreads.contains(0));
  EXPECT_TRUE(limits::kThreads.contains(1024));
  EXPECT_FALSE(limits::kThreads.contains(-1));
  EXPECT_FALSE(limits::kThreads.contains(1025));
  EXPECT_TRUE(limits::kBatchSize.contains(1));
  EXPECT_TRUE(limits::kBatchSize.contains(65535));
  EXPECT_FALSE(limits::kBatchSize.contains(0));
  EXPECT_FALSE(limits::kBatchSize.contains(65536));
  EXPECT_FALSE(limits::kLrScale.contains(0.0));
  EXPECT_TRUE(limits::kLrScale.contains(1000.0));
  EXPECT_TRUE(limits::kDropout.contains(0.0));
  EXPECT_FALSE(limits::kDropout.contains(1.0));
  EXPECT_TRUE(limits::kPhoneBonus.contains(-100.0));
  EXPECT_FALSE(limits::kPhoneBonus.contains(std::nextafter(100.0, 200.0)));
  EXPECT_FALSE(limits::kPhoneBonus.contains(std::numeric_limits<double>::quiet_NaN()));
}

TEST(Limits, TextOfARange) {
  EXPECT_EQ(limits::to_string(limits::kThreads), "[0, 1024]");
  EXPECT_EQ(limits::to_string(limits::kPhoneBonus), "[-100, 100]");
  EXPECT_EQ(limits::to_string(limits::kBatchSize), "[1, 65535]");
  EXPECT_EQ(limits::to_string(limits::kLrScale), "(0, 1000]");
  EXPECT_EQ(limits::to_string(limits::kAdamBeta), "[0, 1)");
}

TEST(Limits, FusedLstmUnits) {
  for (int h : {64, 128, 256}) EXPECT_TRUE(limits::fused_lstm_units(h)) << h;
  for (int h : {0, 32, 96, 512}) EXPECT_FALSE(limits::fused_lstm_units(h)) << h;
  EXPECT_EQ(limits::fused_lstm_units_text(), "64, 128 or 256");
}
