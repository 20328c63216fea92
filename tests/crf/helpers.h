// Helpers of the crf tests: comparisons. The random problems and the
// brute-force oracle are shared with tests/cuda (tests/support/).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/support/crf_bruteforce.h"
#include "tests/support/crf_problems.h"

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

}  // namespace timitseg::crf::testing
