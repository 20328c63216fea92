#include "app/report/significance.h"

#include <boost/math/distributions/binomial.hpp>
#include <boost/math/distributions/students_t.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>

namespace timitseg::app::report {

double t_two_sided_p(double t, int df) {
  if (df < 1) throw std::invalid_argument("t-test: degrees of freedom must be >= 1");
  if (std::isinf(t)) return 0.0;
  const boost::math::students_t dist(df);
  // the upper tail directly (cdf(complement)): no cancellation in 1 - cdf for large |t|
  return std::min(1.0, 2.0 * boost::math::cdf(boost::math::complement(dist, std::fabs(t))));
}

double sign_test_p(int k, int n) {
  if (k < 0 || k > n) throw std::invalid_argument("sign test: k must be in [0, n]");
  if (n == 0) return 1.0;
  const int m = std::min(k, n - k);
  const boost::math::binomial_distribution<double> dist(n, 0.5);
  return std::min(1.0, 2.0 * boost::math::cdf(dist, m));
}

PairedTest paired_test(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) throw std::invalid_argument("paired test: the two samples differ in size");
  PairedTest r;
  r.n = static_cast<int>(a.size());
  if (r.n == 0) return r;
  std::vector<double> d(a.size());
  for (size_t i = 0; i < d.size(); ++i) d[i] = b[i] - a[i];
  double sum = 0;
  for (double x : d) sum += x;
  r.mean = sum / r.n;
  for (double x : d) {
    if (x > 0) ++r.positive;
    else if (x < 0) ++r.negative;
    else ++r.zero;
  }
  r.p_sign = sign_test_p(r.positive, r.positive + r.negative);
  if (r.n < 2) return r;
  double ss = 0;
  for (double x : d) ss += (x - r.mean) * (x - r.mean);
  r.std = std::sqrt(ss / (r.n - 1));
  r.df = r.n - 1;
  if (r.std > 0) {
    r.t_valid = true;
    r.t = r.mean / (r.std / std::sqrt(static_cast<double>(r.n)));
    r.p_t = t_two_sided_p(r.t, r.df);
  }
  return r;
}

nlohmann::json to_json(const PairedTest& t) {
  nlohmann::json j = {{"n", t.n}, {"mean_difference", t.mean}};
  if (t.n < 2) {
    j["note"] = "n/a (1 seed)";
    return j;
  }
  j["std"] = t.std;
  if (t.t_valid)
    j["t_test"] = {{"t", t.t}, {"df", t.df}, {"p", t.p_t}};
  else
    j["t_test"] = {{"df", t.df}, {"note", "zero spread: every seed gives the same difference"}};
  j["sign_test"] = {{"positive", t.positive}, {"negative", t.negative}, {"zero", t.zero}, {"p", t.p_sign}};
  return j;
}

namespace {
std::string printf_text(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}
// p-values: 3 significant digits, small ones in exponent form
std::string p_text(double p) { return p < 1e-3 ? printf_text("%.1e", p) : printf_text("%.3g", p); }
}  // namespace

std::string mean_text(const PairedTest& t, double scale, const char* format) {
  if (t.n == 0) return "n/a";
  std::string s = (t.mean > 0 ? "+" : "") + printf_text(format, t.mean * scale);
  if (t.n > 1) s += " ± " + printf_text(format, t.std * scale);
  return s;
}

std::string t_text(const PairedTest& t) {
  if (t.n < 2) return "n/a (1 seed)";
  if (!t.t_valid) return "n/a (no spread)";
  return printf_text("%.2f", t.t) + " (" + std::to_string(t.df) + ")";
}

std::string p_t_text(const PairedTest& t) {
  if (t.n < 2) return "n/a (1 seed)";
  if (!t.t_valid) return "n/a";
  return p_text(t.p_t);
}

std::string p_sign_text(const PairedTest& t) {
  if (t.n < 2) return "n/a (1 seed)";
  return p_text(t.p_sign) + " (" + std::to_string(t.positive) + "+/" + std::to_string(t.negative) + "-)";
}

}  // namespace timitseg::app::report
