// The one random semi-CRF problem generator of the test suites (tests/crf,
// tests/cuda): frame scores through the project's centered cumsum layer,
// Gaussian parameters, labels as random runs. Header-only, test code only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "crf/backend.h"
#include "crf/cumsum.h"

namespace timitseg::crf::testing {

struct Problem {
  Dims dims;
  std::vector<float> cum, A, D, s, e;    // cum [B][T+1][C], A [C][C], D [K][C], s/e [C] (empty = none)
  std::vector<int32_t> lengths, labels;  // [B], [B][T]
  std::vector<float> o;                  // onset scores [B][T][C] (empty = none; add_onset)
  Params params() const {
    Params p{cum.data(), A.data(), D.data(), s.empty() ? nullptr : s.data(), e.empty() ? nullptr : e.data(),
             lengths.data()};
    if (!o.empty()) p.onset = o.data();
    return p;
  }
  // Offset of row t of utterance b in cum ([B][T+1][C]).
  size_t row(int64_t b, int64_t t) const { return (static_cast<size_t>(b) * (dims.T + 1) + t) * dims.C; }
};

struct ProblemOptions {
  double x_scale = 1.0;            // frame scores x ~ N(0, x_scale^2) before centering
  double p_scale = 0.5;            // A, D, s, e ~ N(0, p_scale^2)
  bool start_end = true;           // false: s and e empty (nullptr = zeros)
  std::vector<int32_t> lengths;    // given lengths; empty: random in [1, T]
  bool first_full = false;         // random lengths, but lengths[0] = T
  int max_run = 0;                 // label runs of 1..max_run frames (0: 1..2K, so runs longer than K occur)
  bool poison_padding = false;     // padding rows of cum NaN, padding labels -7 (a backend must not read them)
};

// Random zero-centered inputs (see ProblemOptions). The draws, in order:
// random lengths, frame scores [B][T][C], A, D, s and e, then the label runs.
inline Problem random_problem_with(Dims dims, uint32_t seed, const ProblemOptions& o) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> nx(0.0, o.x_scale), np(0.0, o.p_scale);
  Problem pb;
  pb.dims = dims;
  const int64_t B = dims.B, T = dims.T, K = dims.K, C = dims.C;
  std::vector<int32_t> lengths = o.lengths;
  if (lengths.empty()) {
    std::uniform_int_distribution<int32_t> ul(1, static_cast<int32_t>(T));
    for (int64_t b = 0; b < B; ++b) lengths.push_back(ul(rng));
    if (o.first_full) lengths[0] = static_cast<int32_t>(T);
  }
  pb.lengths = lengths;
  std::vector<float> x(B * T * C);
  for (auto& v : x) v = static_cast<float>(nx(rng));
  pb.cum.assign(B * (T + 1) * C, 0.0f);
  centered_cumsum_forward<float>(B, T, C, x.data(), pb.lengths.data(), pb.cum.data());
  for (int64_t i = 0; i < C * C; ++i) pb.A.push_back(static_cast<float>(np(rng)));
  for (int64_t i = 0; i < K * C; ++i) pb.D.push_back(static_cast<float>(np(rng)));
  if (o.start_end)
    for (int64_t i = 0; i < C; ++i) pb.s.push_back(static_cast<float>(np(rng))), pb.e.push_back(static_cast<float>(np(rng)));
  std::uniform_int_distribution<int32_t> ulab(0, static_cast<int32_t>(C - 1));
  std::uniform_int_distribution<int32_t> urun(1, o.max_run > 0 ? o.max_run : static_cast<int32_t>(2 * K));
  pb.labels.assign(B * T, 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T;) {
      const int32_t lab = ulab(rng);
      const int32_t r = urun(rng);
      for (int32_t i = 0; i < r && t < T; ++i, ++t) pb.labels[b * T + t] = lab;
    }
  if (o.poison_padding)
    for (int64_t b = 0; b < B; ++b) {
      std::fill(pb.cum.begin() + pb.row(b, pb.lengths[b] + 1), pb.cum.begin() + pb.row(b, T + 1),
                std::numeric_limits<float>::quiet_NaN());
      std::fill(pb.labels.begin() + b * T + pb.lengths[b], pb.labels.begin() + (b + 1) * T, -7);
    }
  return pb;
}

// Gives pb onset scores o ~ N(0, scale^2) [B][T][C] from their own generator
// (seed), so the other inputs stay those of the problem without onset. round16:
// rounded to multiples of 1/16 (exact path scores, see tiny_exact_problems).
// poison_padding: frames t >= lengths[b] hold NaN (a backend must not read them).
inline void add_onset(Problem& pb, uint32_t seed, double scale = 1.0, bool round16 = false,
                      bool poison_padding = false) {
  std::mt19937 rng(seed ^ 0x0a5e7u);
  std::normal_distribution<double> no(0.0, scale);
  const int64_t B = pb.dims.B, T = pb.dims.T, C = pb.dims.C;
  pb.o.assign(B * T * C, 0.0f);
  for (float& v : pb.o) {
    v = static_cast<float>(no(rng));
    if (round16) v = std::round(v * 16.0f) / 16.0f;
  }
  if (poison_padding)
    for (int64_t b = 0; b < B; ++b)
      std::fill(pb.o.begin() + (b * T + pb.lengths[b]) * C, pb.o.begin() + (b + 1) * T * C,
                std::numeric_limits<float>::quiet_NaN());
}

// The short form most tests use.
inline Problem random_problem(Dims dims, uint32_t seed, std::vector<int32_t> lengths = {}, bool start_end = true,
                              double x_scale = 1.0, double p_scale = 0.5) {
  ProblemOptions o;
  o.lengths = std::move(lengths);
  o.start_end = start_end;
  o.x_scale = x_scale;
  o.p_scale = p_scale;
  return random_problem_with(dims, seed, o);
}

}  // namespace timitseg::crf::testing
