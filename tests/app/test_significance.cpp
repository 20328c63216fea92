// The paired significance of `compare` (app/report/significance.h) against
// values computed independently, once, offline with SciPy 1.17.1
// (scipy.stats.ttest_rel(b, a) for the t statistic, its degrees of freedom
// and two-sided p; scipy.stats.binomtest(k, n, 0.5).pvalue for the sign
// test), and against printed t-table values (t 0.975 quantiles).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "app/report/significance.h"

using namespace timitseg::app::report;

TEST(Significance, PairedTTestMatchesScipy) {
  struct Case {
    std::vector<double> a, b;
    double t;
    int df;
    double p;
  };
  // scipy.stats.ttest_rel(b, a): statistic, df, pvalue
  const Case cases[] = {
      {{0.2221, 0.2180, 0.2265}, {0.2229, 0.2195, 0.2301}, 2.3376651126634655, 2, 0.1443882284117776},
      {{10.0, 11.5, 9.8, 12.1, 10.7}, {9.1, 11.9, 9.0, 11.0, 10.2}, -2.2016498922032577, 4, 0.0924824188839437},
      {{0.5, 0.7}, {0.55, 0.71}, 1.5, 1, 0.3743340836219977},  // 2 seeds
  };
  for (const Case& c : cases) {
    const PairedTest r = paired_test(c.a, c.b);
    ASSERT_TRUE(r.t_valid);
    EXPECT_EQ(r.n, static_cast<int>(c.a.size()));
    EXPECT_EQ(r.df, c.df);
    EXPECT_NEAR(r.t, c.t, 1e-9 * std::fabs(c.t));
    EXPECT_NEAR(r.p_t, c.p, 1e-9 * c.p);
  }
  // the mean and sample std of the differences, by hand: 2 seeds, d = 0.05, 0.01
  const PairedTest two = paired_test({0.5, 0.7}, {0.55, 0.71});
  EXPECT_NEAR(two.mean, 0.03, 1e-15);
  EXPECT_NEAR(two.std, 0.04 / std::sqrt(2.0), 1e-15);
  EXPECT_EQ(two.positive, 2);
  EXPECT_EQ(two.negative, 0);
  EXPECT_DOUBLE_EQ(two.p_sign, 0.5);  // binomtest(2, 2) = 0.5
}

TEST(Significance, TwoSidedPAtTableQuantiles) {
  // t-table 0.975 quantiles (to 17 digits): a two-sided p of 0.05
  EXPECT_NEAR(t_two_sided_p(12.706204736174707, 1), 0.05, 1e-10);
  EXPECT_NEAR(t_two_sided_p(2.2281388519649385, 10), 0.05, 1e-10);
  EXPECT_NEAR(t_two_sided_p(-4.302652729749464, 2), 0.05, 1e-10);  // symmetric
  EXPECT_DOUBLE_EQ(t_two_sided_p(0.0, 3), 1.0);
}

TEST(Significance, ExactSignTestMatchesScipyBinomtest) {
  // scipy.stats.binomtest(k, n, 0.5).pvalue
  EXPECT_DOUBLE_EQ(sign_test_p(0, 3), 0.25);
  EXPECT_DOUBLE_EQ(sign_test_p(1, 5), 0.375);
  EXPECT_DOUBLE_EQ(sign_test_p(0, 10), 0.001953125);
  EXPECT_DOUBLE_EQ(sign_test_p(3, 10), 0.34375);
  EXPECT_DOUBLE_EQ(sign_test_p(7, 20), 0.26317596435546875);
  EXPECT_DOUBLE_EQ(sign_test_p(13, 20), 0.26317596435546875);  // symmetric in k <-> n - k
  EXPECT_DOUBLE_EQ(sign_test_p(0, 1), 1.0);
  EXPECT_DOUBLE_EQ(sign_test_p(0, 0), 1.0);
  EXPECT_THROW(sign_test_p(4, 3), std::invalid_argument);
}

TEST(Significance, ZeroSpreadHasNoTTestButASignTest) {
  // every seed 0.25 better (differences exact in binary): the t statistic is
  // undefined (std 0); the sign test says 2 * 0.5^3
  const PairedTest exact = paired_test({0.5, 1.0, 2.0}, {0.75, 1.25, 2.25});
  EXPECT_EQ(exact.std, 0.0);
  EXPECT_FALSE(exact.t_valid);
  EXPECT_EQ(exact.positive, 3);
  EXPECT_DOUBLE_EQ(exact.p_sign, 0.25);
  EXPECT_EQ(t_text(exact), "n/a (no spread)");
  const nlohmann::json j = to_json(exact);
  EXPECT_FALSE(j["t_test"].contains("p"));
  EXPECT_DOUBLE_EQ(j["sign_test"]["p"].get<double>(), 0.25);
  // all differences zero: no sign, p = 1
  const PairedTest same = paired_test({1.0, 2.0}, {1.0, 2.0});
  EXPECT_EQ(same.zero, 2);
  EXPECT_DOUBLE_EQ(same.p_sign, 1.0);
  EXPECT_FALSE(same.t_valid);
  EXPECT_EQ(mean_text(same, 100, "%.2f"), "0.00 ± 0.00");
}

TEST(Significance, OneSeedSaysNotApplicable) {
  const PairedTest r = paired_test({0.2}, {0.25});
  EXPECT_EQ(r.n, 1);
  EXPECT_NEAR(r.mean, 0.05, 1e-15);
  EXPECT_FALSE(r.t_valid);
  EXPECT_EQ(t_text(r), "n/a (1 seed)");
  EXPECT_EQ(p_t_text(r), "n/a (1 seed)");
  EXPECT_EQ(p_sign_text(r), "n/a (1 seed)");
  EXPECT_EQ(mean_text(r, 100, "%.2f"), "+5.00");
  const nlohmann::json j = to_json(r);
  EXPECT_EQ(j["note"], "n/a (1 seed)");
  EXPECT_FALSE(j.contains("t_test"));
  EXPECT_THROW(paired_test({1.0}, {1.0, 2.0}), std::invalid_argument);
}

TEST(Significance, TableCells) {
  const PairedTest r = paired_test({0.2221, 0.2180, 0.2265}, {0.2229, 0.2195, 0.2301});
  EXPECT_EQ(t_text(r), "2.34 (2)");
  EXPECT_EQ(p_t_text(r), "0.144");
  EXPECT_EQ(p_sign_text(r), "0.25 (3+/0-)");
  // mean 0.001967, std 0.001457 (hand: d = 0.0008, 0.0015, 0.0036)
  EXPECT_EQ(mean_text(r, 100, "%.2f"), "+0.20 ± 0.15");
}
