// Shared helpers of the crf tests: random problems and a brute-force oracle
// that enumerates every segmentation (tiny cases only).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <algorithm>
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

// Independent gold segmentation: runs of equal labels, each cut into pieces of K then the remainder.
inline std::vector<Segment> gold_by_hand(const int32_t* lab, int64_t L, int64_t K, int32_t b) {
  std::vector<Segment> out;
  int64_t t = 0;
  while (t < L) {
    int64_t e = t;
    while (e < L && lab[e] == lab[t]) ++e;
    const int64_t r = e - t;
    for (int64_t i = 0; i < r / K; ++i)
      out.push_back(Segment{b, static_cast<int32_t>(t + i * K), static_cast<int32_t>(K), lab[t]});
    if (r % K)
      out.push_back(Segment{b, static_cast<int32_t>(t + (r / K) * K), static_cast<int32_t>(r % K), lab[t]});
    t = e;
  }
  return out;
}

struct Expected {
  std::vector<double> log_z, gold, vscore, bpost;  // [B], [B], [B], [B][T+1]
  std::vector<Segment> vsegs;
  std::vector<double> g_cum, g_A, g_D, g_s, g_e;
};

// Everything by enumeration. with_labels = false: gradients of sum_b scale *
// log Z_b and no gold. Paths of score -inf (forbidden entries) have P = 0.
inline Expected brute_force(const Problem& pb, double scale, bool with_labels = true) {
  const int64_t B = pb.dims.B, T = pb.dims.T, K = pb.dims.K, C = pb.dims.C;
  Expected ex;
  ex.g_cum.assign(B * (T + 1) * C, 0.0);
  ex.g_A.assign(C * C, 0.0);
  ex.g_D.assign(K * C, 0.0);
  ex.g_s.assign(C, 0.0);
  ex.g_e.assign(C, 0.0);
  ex.bpost.assign(B * (T + 1), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<Path> paths = enumerate_paths(pb, b);
    double m = -INFINITY;
    for (const Path& p : paths) m = std::max(m, p.score);
    double z = 0.0;
    for (const Path& p : paths) z += std::exp(p.score - m);
    const double lz = m + std::log(z);
    ex.log_z.push_back(lz);
    // Viterbi: the max score (exact: inputs are multiples of 1/16, see
    // tiny_problems); among tied paths the traceback rule "smallest d, then
    // smallest label" read from the end: key (c_n, d_n, c_{n-1}, d_{n-1}, ...).
    auto key = [](const Path& p) {
      std::vector<int32_t> k;
      for (size_t i = p.segs.size(); i-- > 0;) k.push_back(p.segs[i].label), k.push_back(p.segs[i].duration);
      return k;
    };
    const Path* best = &paths[0];
    for (const Path& p : paths)
      if (p.score > best->score || (p.score == best->score && key(p) < key(*best))) best = &p;
    ex.vscore.push_back(best->score);
    ex.vsegs.insert(ex.vsegs.end(), best->segs.begin(), best->segs.end());
    const std::vector<Segment> gold = gold_by_hand(pb.labels.data() + b * T, pb.lengths[b], K, static_cast<int32_t>(b));
    double gold_score = NAN;
    for (const Path& p : paths) {
      const double P = std::exp(p.score - lz);
      if (p.segs == gold) gold_score = p.score;
      if (P == 0.0) continue;
      for (size_t i = 0; i < p.segs.size(); ++i) {
        const Segment& g = p.segs[i];
        ex.g_cum[(b * (T + 1) + g.start + g.duration) * C + g.label] += scale * P;
        ex.g_cum[(b * (T + 1) + g.start) * C + g.label] -= scale * P;
        ex.g_D[(g.duration - 1) * C + g.label] += scale * P;
        if (i > 0) ex.g_A[p.segs[i - 1].label * C + g.label] += scale * P;
        ex.bpost[b * (T + 1) + g.start + g.duration] += P;
      }
      ex.g_s[p.segs.front().label] += scale * P;
      ex.g_e[p.segs.back().label] += scale * P;
    }
    if (!with_labels) continue;
    EXPECT_FALSE(std::isnan(gold_score)) << "gold segmentation not among the enumerated paths";
    ex.gold.push_back(gold_score);
    for (size_t i = 0; i < gold.size(); ++i) {
      const Segment& g = gold[i];
      ex.g_cum[(b * (T + 1) + g.start + g.duration) * C + g.label] -= scale;
      ex.g_cum[(b * (T + 1) + g.start) * C + g.label] += scale;
      ex.g_D[(g.duration - 1) * C + g.label] -= scale;
      if (i > 0) ex.g_A[gold[i - 1].label * C + g.label] -= scale;
    }
    ex.g_s[gold.front().label] -= scale;
    ex.g_e[gold.back().label] -= scale;
  }
  return ex;
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
