// The one float64 brute-force oracle of the test suites (tests/crf,
// tests/cuda): every segmentation of an utterance enumerated with its score
// (tiny problems only), and from them log Z, gold score, the Viterbi argmax
// under the spec's tie rules, boundary posteriors and every gradient as an
// expectation (docs/crf.md). Independent of every backend: plain loops over
// paths, no recurrences. Header-only, test code only.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "crf/backend.h"
#include "tests/support/crf_problems.h"

namespace timitseg::crf::testing {

// Every segmentation of one utterance (b) with its score, in float64.
struct Path {
  std::vector<Segment> segs;
  double score;
};

// Tiny problems for the enumeration, two utterances each (lengths T and
// max(1, T-2)), one per (T, C, K, with/without start/end) in that loop order,
// seeds first_seed, first_seed+1, ... Every input is rounded to a multiple of
// 1/16, so every path score is exact in float64 and Viterbi ties are exact
// (and frequent), which tests the tie rule.
// with_onset: each problem also gets onset scores (add_onset, rounded to 1/16,
// seeded by the problem's seed), the other inputs unchanged.
inline std::vector<Problem> tiny_exact_problems(const std::vector<int64_t>& Ts, const std::vector<int64_t>& Cs,
                                                const std::vector<int64_t>& Ks, uint32_t first_seed,
                                                bool with_onset = false) {
  std::vector<Problem> out;
  uint32_t seed = first_seed;
  for (int64_t T : Ts)
    for (int64_t C : Cs)
      for (int64_t K : Ks)
        for (bool se : {true, false}) {
          std::vector<int32_t> lengths{static_cast<int32_t>(T), static_cast<int32_t>(std::max<int64_t>(1, T - 2))};
          Problem pb = random_problem(Dims{2, T, K, C}, seed++, lengths, se, 1.0, 0.7);
          for (auto* v : {&pb.cum, &pb.A, &pb.D, &pb.s, &pb.e})
            for (float& x : *v) x = std::round(x * 16.0f) / 16.0f;
          if (with_onset) add_onset(pb, seed - 1, 1.0, true);
          out.push_back(pb);
        }
  return out;
}

// The Viterbi path among `paths` by score, ties broken by the traceback rule
// "smallest d, then smallest label" read from the end: the smallest key
// (c_n, d_n, c_{n-1}, d_{n-1}, ...).
inline const Path& viterbi_path(const std::vector<Path>& paths) {
  auto key = [](const Path& p) {
    std::vector<int32_t> k;
    for (size_t i = p.segs.size(); i-- > 0;) k.push_back(p.segs[i].label), k.push_back(p.segs[i].duration);
    return k;
  };
  const Path* best = &paths[0];
  for (const Path& p : paths)
    if (p.score > best->score || (p.score == best->score && key(p) < key(*best))) best = &p;
  return *best;
}

// Score(y) of a segmentation of utterance b: start, end, segment sums of the
// cumulative scores, duration, onset and transition terms, in float64 (-inf
// when it uses a forbidden entry).
inline double segmentation_score(const Problem& pb, int64_t b, const std::vector<Segment>& segs) {
  const int64_t T = pb.dims.T, C = pb.dims.C;
  const float* cum = pb.cum.data() + b * (T + 1) * C;
  double sc = (pb.s.empty() ? 0.0 : pb.s[segs.front().label]) + (pb.e.empty() ? 0.0 : pb.e[segs.back().label]);
  for (size_t i = 0; i < segs.size(); ++i) {
    const Segment& g = segs[i];
    sc += static_cast<double>(cum[(g.start + g.duration) * C + g.label]) -
          static_cast<double>(cum[g.start * C + g.label]) + static_cast<double>(pb.D[(g.duration - 1) * C + g.label]);
    if (i > 0) sc += pb.A[segs[i - 1].label * C + g.label];
    if (!pb.o.empty()) sc += static_cast<double>(pb.o[(b * T + g.start) * C + g.label]);  // onset o[b_i, c_i]
  }
  return sc;
}

inline std::vector<Path> enumerate_paths(const Problem& pb, int64_t b) {
  const int64_t K = pb.dims.K, C = pb.dims.C, L = pb.lengths[b];
  std::vector<Path> out;
  std::vector<Segment> cur;
  std::function<void(int64_t)> rec = [&](int64_t t) {
    if (t == L) {
      out.push_back(Path{cur, segmentation_score(pb, b, cur)});
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
  std::vector<double> g_o;  // [B][T][C] when the problem has onset scores
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
  if (!pb.o.empty()) ex.g_o.assign(B * T * C, 0.0);
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<Path> paths = enumerate_paths(pb, b);
    double m = -INFINITY;
    for (const Path& p : paths) m = std::max(m, p.score);
    double z = 0.0;
    for (const Path& p : paths) z += std::exp(p.score - m);
    const double lz = m + std::log(z);
    ex.log_z.push_back(lz);
    // Viterbi: the max score (exact for tiny_exact_problems) under the tie rule.
    const Path* best = &viterbi_path(paths);
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
        if (!ex.g_o.empty()) ex.g_o[(b * T + g.start) * C + g.label] += scale * P;
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
      if (!ex.g_o.empty()) ex.g_o[(b * T + g.start) * C + g.label] -= scale;
    }
    ex.g_s[gold.front().label] -= scale;
    ex.g_e[gold.back().label] -= scale;
  }
  return ex;
}

}  // namespace timitseg::crf::testing
