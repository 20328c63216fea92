// Helpers of the crf tests: comparisons. The random problems and the
// brute-force oracle are shared with tests/cuda (tests/support/).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "crf/host_run.h"
#include "tests/support/crf_bruteforce.h"
#include "tests/support/crf_problems.h"
#include "tests/support/transcript_bruteforce.h"

namespace timitseg::crf::testing {

// |a - b| <= rtol * |b| + atol, elementwise, with a message naming the element.
template <class A, class B>
void expect_close(const std::vector<A>& a, const std::vector<B>& b, double rtol, double atol, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = static_cast<double>(a[i]), y = static_cast<double>(b[i]);
    if (!(std::fabs(x - y) <= rtol * std::fabs(y) + atol)) {
      ADD_FAILURE() << what << "[" << i << "]: " << x << " vs " << y << " (diff " << x - y << ")";
      if (++failures > 10) return;
    }
  }
}

template <class T>
bool all_finite(const std::vector<T>& v) {
  for (const T& x : v)
    if (!std::isfinite(static_cast<double>(x))) return false;
  return true;
}

// A transcript NLL result against the brute-force oracle: log Z, log Z_c within
// 1e-9, every gradient within tol (onset's when onset).
inline void expect_matches(const TranscriptResult& r, const TranscriptExpected& ex, bool onset, double tol,
                           const std::string& what) {
  expect_close(r.log_z, ex.log_z, 1e-9, 1e-9, what + " log_z");
  expect_close(r.log_z_c, ex.log_z_c, 1e-9, 1e-9, what + " log_z_c");
  expect_close(r.grad_cum_scores, ex.g_cum, tol, tol, what + " grad cum");
  expect_close(r.grad_transition, ex.g_A, tol, tol, what + " grad A");
  expect_close(r.grad_duration_bias, ex.g_D, tol, tol, what + " grad D");
  expect_close(r.grad_start, ex.g_s, tol, tol, what + " grad start");
  expect_close(r.grad_end, ex.g_e, tol, tol, what + " grad end");
  if (onset) expect_close(r.grad_onset, ex.g_o, tol, tol, what + " grad onset");
}

}  // namespace timitseg::crf::testing
