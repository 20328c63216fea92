// Paired significance of a difference between two models trained with the
// same seeds (`timitseg compare`, docs/training.md "Reading the significance
// columns"): per seed s the difference d_s = b_s - a_s (semi-CRF minus linear
// CRF), their mean and sample standard deviation, a paired two-sided t-test
// (t = mean / (std / sqrt(n)), n - 1 degrees of freedom, Student's t from
// Boost.Math) and the exact two-sided sign test (zero differences dropped;
// p = min(1, 2 * P[Binomial(n, 1/2) <= min(n+, n-)])).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace timitseg::app::report {

struct PairedTest {
  int n = 0;                  // pairs (seeds)
  double mean = 0;            // mean difference
  double std = 0;             // sample std of the differences (n - 1); 0 for n = 1
  // t-test: valid when n >= 2 and std > 0 (with std = 0 the t statistic is
  // undefined: t_valid is false and only the sign test speaks)
  bool t_valid = false;
  double t = 0;
  int df = 0;
  double p_t = 1;             // two-sided
  int positive = 0, negative = 0, zero = 0;  // signs of the differences
  double p_sign = 1;          // exact two-sided sign test (1 when every difference is 0)
};

// Differences b[i] - a[i]; a and b hold one value per seed, in the same seed order.
PairedTest paired_test(const std::vector<double>& a, const std::vector<double>& b);

// Two-sided p-value of Student's t with df degrees of freedom at statistic t.
double t_two_sided_p(double t, int df);
// Exact two-sided sign test p-value for k positive of n non-zero differences.
double sign_test_p(int k, int n);

// {"n", "mean_difference", and with n >= 2: "std", "sign_test": {"positive",
// "negative", "zero", "p"}, "t_test": {"t", "df", "p"} or {"note": "zero
// spread"}; with n = 1: "note": "n/a (1 seed)"}. scale multiplies the mean and
// std (the table's units, e.g. 100 for %); 1 leaves the metric's own.
nlohmann::json to_json(const PairedTest& t);

// Cells of the printed and HTML tables: "mean ± std" (scaled, printf format),
// "t (df)", the t-test p and the sign test p with its signs, or "n/a (1 seed)".
std::string mean_text(const PairedTest& t, double scale, const char* format);
std::string t_text(const PairedTest& t);
std::string p_t_text(const PairedTest& t);
std::string p_sign_text(const PairedTest& t);

}  // namespace timitseg::app::report
