// Shared helpers of the crf tests: random problems and a brute-force oracle
// that enumerates every segmentation (tiny cases only).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "crf/cumsum.h"
#include "crf/semicrf.h"

namespace timitseg::crf::testing {

struct Problem {
  Dims dims;
  std::vector<float> cum, A, D, s, e;  // cum [B][T+1][C], A [C][C], D [K][C], s/e [C] (empty = none)
  std::vector<int32_t> lengths, labels;  // [B], [B][T]
  Params params() const {
    return Params{cum.data(), A.data(), D.data(), s.empty() ? nullptr : s.data(), e.empty() ? nullptr : e.data(),
                  lengths.data()};
  }
};

// Random zero-centered inputs: frame scores x ~ N(0, x_scale) through the
// centered cumsum layer, parameters ~ N(0, p_scale), labels as random runs of
// length 1..2K (so runs longer than K occur). lengths: given or random in [1, T].
inline Problem random_problem(Dims dims, uint32_t seed, std::vector<int32_t> lengths = {}, bool start_end = true,
                              double x_scale = 1.0, double p_scale = 0.5) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> nx(0.0, x_scale), np(0.0, p_scale);
  Problem pb;
  pb.dims = dims;
  const int64_t B = dims.B, T = dims.T, K = dims.K, C = dims.C;
  if (lengths.empty()) {
    std::uniform_int_distribution<int32_t> ul(1, static_cast<int32_t>(T));
    for (int64_t b = 0; b < B; ++b) lengths.push_back(ul(rng));
  }
  pb.lengths = lengths;
  std::vector<float> x(B * T * C);
  for (auto& v : x) v = static_cast<float>(nx(rng));
  pb.cum.assign(B * (T + 1) * C, 0.0f);
  centered_cumsum_forward<float>(B, T, C, x.data(), pb.lengths.data(), pb.cum.data());
  for (int64_t i = 0; i < C * C; ++i) pb.A.push_back(static_cast<float>(np(rng)));
  for (int64_t i = 0; i < K * C; ++i) pb.D.push_back(static_cast<float>(np(rng)));
  if (start_end)
    for (int64_t i = 0; i < C; ++i) pb.s.push_back(static_cast<float>(np(rng))), pb.e.push_back(static_cast<float>(np(rng)));
  std::uniform_int_distribution<int32_t> ulab(0, static_cast<int32_t>(C - 1));
  std::uniform_int_distribution<int32_t> urun(1, static_cast<int32_t>(2 * K));
  pb.labels.assign(B * T, 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T;) {
      const int32_t lab = ulab(rng);
      const int32_t r = urun(rng);
      for (int32_t i = 0; i < r && t < T; ++i, ++t) pb.labels[b * T + t] = lab;
    }
  return pb;
}

// Every segmentation of one utterance (b) with its score, in float64.
struct Path {
  std::vector<Segment> segs;
  double score;
};

inline std::vector<Path> enumerate_paths(const Problem& pb, int64_t b) {
  const int64_t T = pb.dims.T, K = pb.dims.K, C = pb.dims.C, L = pb.lengths[b];
  const float* cum = pb.cum.data() + b * (T + 1) * C;
  std::vector<Path> out;
  std::vector<Segment> cur;
  std::function<void(int64_t)> rec = [&](int64_t t) {
    if (t == L) {
      double sc = (pb.s.empty() ? 0.0 : pb.s[cur.front().label]) + (pb.e.empty() ? 0.0 : pb.e[cur.back().label]);
      for (size_t i = 0; i < cur.size(); ++i) {
        const Segment& g = cur[i];
        sc += static_cast<double>(cum[(g.start + g.duration) * C + g.label]) - static_cast<double>(cum[g.start * C + g.label]) +
              static_cast<double>(pb.D[(g.duration - 1) * C + g.label]);
        if (i > 0) sc += pb.A[cur[i - 1].label * C + g.label];
      }
      out.push_back(Path{cur, sc});
      return;
    }
    for (int64_t d = 1; d <= K && t + d <= L; ++d)
      for (int64_t c = 0; c < C; ++c) {
        cur.push_back(Segment{static_cast<int32_t>(b), static_cast<int32_t>(t), static_cast<int32_t>(d),
                              static_cast<int32_t>(c)});
        rec(t + d);
        cur.pop_back();
      }
  };
  rec(0);
  return out;
}

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
