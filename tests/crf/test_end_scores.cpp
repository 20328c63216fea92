// End scores q[b][t][c] (docs/crf.md "End scores (a fold into cum_scores and
// onset)"): added once at the last frame of every segment, folded into
// cum_scores and onset by crf::fold_end_scores. Oracles: a float64
// enumeration written here (every segmentation scored with explicit onset and
// end terms; every alignment of a transcript for log Z_c) against the
// reference and cpu backends run on the folded inputs (log Z, gold score,
// Viterbi, transcript log Z_c); central differences of the enumerated log Z
// against d log Z / d q through the reference backward and
// fold_end_scores_backward; the backward as the fold's adjoint; padding never
// read; validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "crf/backend_kind.h"
#include "crf/cpu/cpu.h"
#include "crf/end_scores.h"
#include "crf/host_run.h"
#include "helpers.h"

namespace timitseg::crf::testing {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A problem with onset (head 0) and end (head 1) scores in one anchored buffer
// [B][T][2][C], frames t >= lengths[b] NaN (never read).
struct EndCase {
  Problem pb;                // cum, A, D, s, e, lengths, labels (pb.o unused)
  std::vector<float> anch;   // [B][T][2][C]
  bool with_onset = true;
  const float* onset() const { return with_onset ? anch.data() : nullptr; }
  const float* end() const { return anch.data() + pb.dims.C; }
  EndFoldShape shape() const { return {pb.dims.B, pb.dims.T, pb.dims.C, 2 * pb.dims.C, 2 * pb.dims.C}; }
  double o(int64_t b, int64_t t, int64_t c) const {
    return with_onset ? anch[((b * pb.dims.T + t) * 2 + 0) * pb.dims.C + c] : 0.0;
  }
  double q(int64_t b, int64_t t, int64_t c) const { return anch[((b * pb.dims.T + t) * 2 + 1) * pb.dims.C + c]; }
};

EndCase make_case(Dims dims, uint32_t seed, std::vector<int32_t> lengths, bool with_onset, bool start_end = true) {
  EndCase ec;
  ec.pb = random_problem(dims, seed, std::move(lengths), start_end, 1.0, 0.7);
  ec.with_onset = with_onset;
  std::mt19937 rng(seed * 7 + 3);
  std::normal_distribution<double> n(0.0, 0.9);
  const int64_t T = dims.T, C = dims.C;
  ec.anch.assign(dims.B * T * 2 * C, 0.0f);
  for (int64_t b = 0; b < dims.B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < 2 * C; ++i)
        ec.anch[(b * T + t) * 2 * C + i] = t < ec.pb.lengths[b] ? static_cast<float>(n(rng)) : kNaN;
  return ec;
}

// The inputs of the backends: cum and onset with q folded in (fold_end_scores).
Problem folded(const EndCase& ec) {
  Problem f = ec.pb;
  f.o.assign(f.dims.B * f.dims.T * f.dims.C, 0.0f);
  fold_end_scores(ec.shape(), f.lengths.data(), ec.pb.cum.data(), ec.onset(), ec.end(), f.cum.data(), f.o.data());
  return f;
}

// Explicit score of a segmentation of utterance b in float64: start, end
// vector, and per segment cum difference, duration, onset at its first frame,
// end score q at its last frame; transitions between segments.
double explicit_score(const EndCase& ec, int64_t b, const std::vector<Segment>& segs) {
  const Problem& pb = ec.pb;
  const int64_t C = pb.dims.C;
  double sc = (pb.s.empty() ? 0.0 : pb.s[segs.front().label]) + (pb.e.empty() ? 0.0 : pb.e[segs.back().label]);
  for (size_t i = 0; i < segs.size(); ++i) {
    const Segment& g = segs[i];
    const int64_t u = g.start, e = g.start + g.duration, c = g.label;
    sc += static_cast<double>(pb.cum[pb.row(b, e) + c]) - static_cast<double>(pb.cum[pb.row(b, u) + c]);
    sc += pb.D[(g.duration - 1) * C + c] + ec.o(b, u, c) + ec.q(b, e - 1, c);
    if (i > 0) sc += pb.A[segs[i - 1].label * C + c];
  }
  return sc;
}

// Every segmentation of utterance b (segments of 1..K frames, any labels).
void for_each_segmentation(const EndCase& ec, int64_t b, const std::function<void(const std::vector<Segment>&)>& f) {
  const int64_t L = ec.pb.lengths[b], K = ec.pb.dims.K, C = ec.pb.dims.C;
  std::vector<Segment> segs;
  std::function<void(int64_t)> rec = [&](int64_t u) {
    if (u == L) return f(segs);
    for (int64_t d = 1; d <= std::min(K, L - u); ++d)
      for (int64_t c = 0; c < C; ++c) {
        segs.push_back(Segment{static_cast<int32_t>(b), static_cast<int32_t>(u), static_cast<int32_t>(d),
                               static_cast<int32_t>(c)});
        rec(u + d);
        segs.pop_back();
      }
  };
  rec(0);
}

double log_sum_exp(const std::vector<double>& v) {
  double m = -INFINITY;
  for (double x : v) m = std::max(m, x);
  double z = 0.0;
  for (double x : v) z += std::exp(x - m);
  return m + std::log(z);
}

struct Oracle {
  std::vector<double> log_z, gold, vscore;
  std::vector<Segment> vsegs;  // batch-major
};

// A run [u, u + r) of label c cut into pieces of K, then the remainder.
void add_pieces(std::vector<Segment>& segs, int64_t b, int64_t u, int64_t r, int64_t K, int32_t c) {
  for (; r > 0; u += std::min(r, K), r -= std::min(r, K))
    segs.push_back(Segment{static_cast<int32_t>(b), static_cast<int32_t>(u), static_cast<int32_t>(std::min(r, K)), c});
}

Oracle oracle(const EndCase& ec) {
  Oracle o;
  const int64_t T = ec.pb.dims.T, K = ec.pb.dims.K;
  for (int64_t b = 0; b < ec.pb.dims.B; ++b) {
    std::vector<double> scores;
    double best = -INFINITY;
    std::vector<Segment> arg;
    for_each_segmentation(ec, b, [&](const std::vector<Segment>& segs) {
      const double s = explicit_score(ec, b, segs);
      scores.push_back(s);
      if (s > best) best = s, arg = segs;
    });
    o.log_z.push_back(log_sum_exp(scores));
    o.vscore.push_back(best);
    o.vsegs.insert(o.vsegs.end(), arg.begin(), arg.end());
    std::vector<Segment> gold;  // runs of the frame labels, cut into pieces of K
    const int32_t* lab = ec.pb.labels.data() + b * T;
    for (int64_t u = 0, L = ec.pb.lengths[b]; u < L;) {
      int64_t e = u + 1;
      while (e < L && lab[e] == lab[u]) ++e;
      add_pieces(gold, b, u, e - u, K, lab[u]);
      u = e;
    }
    o.gold.push_back(explicit_score(ec, b, gold));
  }
  return o;
}

// log Z_c of utterance b's transcript `phones` (no optional phones): every
// composition of its L frames into phone runs of >= 1 frame, each cut into
// pieces of K, scored explicitly.
double oracle_log_z_c(const EndCase& ec, int64_t b, const std::vector<int32_t>& phones) {
  const int64_t L = ec.pb.lengths[b], N = static_cast<int64_t>(phones.size()), K = ec.pb.dims.K;
  std::vector<double> scores;
  std::vector<int64_t> r(N);
  std::function<void(int64_t, int64_t)> rec = [&](int64_t n, int64_t u) {
    if (n == N - 1) {
      r[n] = L - u;
      std::vector<Segment> segs;
      for (int64_t i = 0, v = 0; i < N; v += r[i], ++i) add_pieces(segs, b, v, r[i], K, phones[i]);
      scores.push_back(explicit_score(ec, b, segs));
      return;
    }
    for (int64_t d = 1; u + d + (N - 1 - n) <= L; ++d) r[n] = d, rec(n + 1, u + d);
  };
  rec(0, 0);
  return log_sum_exp(scores);
}

std::string describe(const EndCase& ec) {
  return "T=" + std::to_string(ec.pb.dims.T) + " C=" + std::to_string(ec.pb.dims.C) +
         " K=" + std::to_string(ec.pb.dims.K) + (ec.with_onset ? " onset" : " no onset");
}

std::vector<EndCase> tiny_cases() {
  std::vector<EndCase> out;
  uint32_t seed = 900;
  for (int64_t T : {1, 3, 5, 6})
    for (int64_t C : {1, 2, 3})
      for (int64_t K : {1, 2, 8})  // K = 1, K < T (T >= 3), K > T
        for (bool with_onset : {true, false}) {
          std::vector<int32_t> lengths{static_cast<int32_t>(T), static_cast<int32_t>(std::max<int64_t>(1, T - 2))};
          out.push_back(make_case(Dims{2, T, K, C}, seed++, lengths, with_onset, seed % 2 == 0));
        }
  return out;
}

double tol(double want) { return 1e-4 * std::max(1.0, std::fabs(want)); }

TEST(EndScoresBruteForce, FoldedInputsGiveTheExplicitEndScoreOnBothHostBackends) {
  for (const std::string name : {"reference", "cpu"}) {
    auto be = name == "cpu" ? cpu::make_cpu_backend(2) : make_backend(backend_kind(name));
    for (const EndCase& ec : tiny_cases()) {
      SCOPED_TRACE(name + " " + describe(ec));
      const Oracle ex = oracle(ec);
      const Problem f = folded(ec);
      const HostResult r = run_host(*be, f.dims, f.params(), f.labels.data());
      for (int64_t b = 0; b < f.dims.B; ++b) {
        EXPECT_NEAR(r.log_z[b], ex.log_z[b], tol(ex.log_z[b])) << "log Z of utterance " << b;
        EXPECT_NEAR(r.gold[b], ex.gold[b], tol(ex.gold[b])) << "gold score of utterance " << b;
        EXPECT_NEAR(r.viterbi_score[b], ex.vscore[b], tol(ex.vscore[b])) << "Viterbi score of utterance " << b;
        EXPECT_LE(r.gold[b], r.log_z[b] + 1e-5);
      }
      EXPECT_EQ(r.segments, ex.vsegs);
    }
  }
}

TEST(EndScoresBruteForce, TranscriptLogZcOfTheFoldedInputsIsTheExplicitOne) {
  for (const std::string name : {"reference", "cpu"}) {
    auto be = name == "cpu" ? cpu::make_cpu_backend(2) : make_backend(backend_kind(name));
    for (const EndCase& ec : tiny_cases()) {
      const int64_t C = ec.pb.dims.C, B = ec.pb.dims.B;
      if (C < 2 || ec.pb.lengths[1] < 2) continue;
      SCOPED_TRACE(name + " " + describe(ec));
      // utterance 0: up to three phones alternating labels (merged: no two equal in a row), utterance 1: two
      const int64_t N = 3;
      std::vector<int32_t> phones(B * N, 0), num{static_cast<int32_t>(std::min<int64_t>(3, ec.pb.lengths[0])), 2};
      for (int64_t i = 0; i < N; ++i) phones[i] = static_cast<int32_t>((i + 1) % 2), phones[N + i] = i % 2 ? 0 : C - 1;
      const Problem f = folded(ec);
      const Oracle ex = oracle(ec);
      const TranscriptResult r = transcript_host(*be, f.dims, f.params(), N, phones.data(), num.data(), nullptr);
      for (int64_t b = 0; b < B; ++b) {
        const std::vector<int32_t> ph(phones.begin() + b * N, phones.begin() + b * N + num[b]);
        const double want = oracle_log_z_c(ec, b, ph);
        EXPECT_NEAR(r.log_z_c[b], want, tol(want)) << "log Z_c of utterance " << b;
        EXPECT_NEAR(r.log_z[b], ex.log_z[b], tol(ex.log_z[b])) << "log Z of utterance " << b;
      }
    }
  }
}

// d log Z / d q through the reference backward and fold_end_scores_backward
// against central differences of the enumerated log Z (float64), padding
// frames' gradients exactly 0, the onset head of the strided buffer untouched;
// and sum_c d log Z / d q[t][c] = P(a segment ends at t + 1) (boundary posteriors).
TEST(EndScoresFiniteDifferences, LogZWithRespectToEveryEndScore) {
  for (bool with_onset : {true, false}) {
    SCOPED_TRACE(with_onset ? "onset" : "no onset");
    EndCase ec = make_case(Dims{2, 5, 3, 2}, 77, {5, 3}, with_onset);
    const int64_t B = 2, T = 5, C = 2;
    const Problem f = folded(ec);
    auto be = make_backend(backend_kind("reference"));
    HostRunOptions opt;
    opt.viterbi = false;
    opt.boundary_posteriors = true;
    const HostResult r = run_host(*be, f.dims, f.params(), nullptr, opt);
    std::vector<float> g(B * T * 2 * C, 7.0f);
    fold_end_scores_backward(ec.shape(), f.lengths.data(), r.grad_cum_scores.data(), r.grad_onset.data(),
                             g.data() + C);
    const double h = 1e-4;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        double sum = 0.0;
        for (int64_t c = 0; c < C; ++c) {
          const size_t i = ((b * T + t) * 2 + 1) * C + c;
          EXPECT_EQ(g[i - C], 7.0f) << "the onset head was written at " << i - C;
          if (t >= ec.pb.lengths[b]) {
            EXPECT_EQ(g[i], 0.0f) << "padding b=" << b << " t=" << t;
            continue;
          }
          const float saved = ec.anch[i];
          ec.anch[i] = static_cast<float>(saved + h);
          const double up = oracle(ec).log_z[b];
          ec.anch[i] = static_cast<float>(saved - h);
          const double down = oracle(ec).log_z[b];
          const double step = static_cast<double>(static_cast<float>(saved + h)) -
                              static_cast<double>(static_cast<float>(saved - h));
          ec.anch[i] = saved;
          EXPECT_NEAR(g[i], (up - down) / step, 1e-5) << "b=" << b << " t=" << t << " c=" << c;
          sum += g[i];
        }
        if (t < ec.pb.lengths[b]) EXPECT_NEAR(sum, r.boundary_posteriors[b * (T + 1) + t + 1], 1e-5) << "t=" << t;
      }
  }
}

// The backward is the fold's transpose: with cum = 0 and no onset the fold is
// linear in q, and <g_cum', cum'(q)> + <g_onset', onset'(q)> = <backward(g'), q>.
TEST(EndScoresFold, BackwardIsTheAdjointOfTheFold) {
  const int64_t B = 3, T = 7, C = 4;
  const std::vector<int32_t> lengths{7, 3, 1};
  std::mt19937 rng(5);
  std::normal_distribution<double> n(0.0, 1.0);
  for (int64_t es : {C, 3 * C})
    for (bool with_g_onset : {true, false}) {
      const EndFoldShape s{B, T, C, C, es};
      std::vector<float> q(B * T * es), zero(B * (T + 1) * C, 0.0f), cum(B * (T + 1) * C), on(B * T * C);
      std::vector<float> gc(B * (T + 1) * C), go(B * T * C), ge(B * T * es, 3.0f);
      for (auto* v : {&q, &gc, &go})
        for (float& x : *v) x = static_cast<float>(n(rng));
      fold_end_scores<float>(s, lengths.data(), zero.data(), nullptr, q.data(), cum.data(), on.data());
      fold_end_scores_backward(s, lengths.data(), gc.data(), with_g_onset ? go.data() : nullptr, ge.data());
      double lhs = 0.0, rhs = 0.0, mag = 0.0;
      for (size_t i = 0; i < gc.size(); ++i) lhs += double(gc[i]) * cum[i], mag += std::fabs(double(gc[i]) * cum[i]);
      if (with_g_onset)
        for (size_t i = 0; i < go.size(); ++i) lhs += double(go[i]) * on[i], mag += std::fabs(double(go[i]) * on[i]);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t c = 0; c < es; ++c) {
            const size_t i = (b * T + t) * es + c;
            if (c >= C) {
              EXPECT_EQ(ge[i], 3.0f) << "beyond the C entries of a frame";
              continue;
            }
            if (t >= lengths[b]) EXPECT_EQ(ge[i], 0.0f) << "padding";
            rhs += double(ge[i]) * q[i];
          }
      EXPECT_NEAR(lhs, rhs, 1e-6 * mag) << "end_stride " << es << (with_g_onset ? " with" : " without") << " g_onset";
      EXPECT_GT(mag, 1.0);
    }
}

// Padding: frames t >= lengths[b] of onset and end (NaN here) are never read;
// cum' rows 0 and t > L are the input's bits, onset' is 0 at padding frames.
// Zero end scores leave cum and onset bitwise. In place gives the same bits.
TEST(EndScoresFold, PaddingZeroEndAndInPlace) {
  const EndCase ec = make_case(Dims{3, 6, 2, 3}, 12, {6, 2, 1}, true);
  const int64_t B = 3, T = 6, C = 3;
  const Problem f = folded(ec);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t L = ec.pb.lengths[b];
    for (int64_t t = 0; t <= T; ++t)
      for (int64_t c = 0; c < C; ++c) {
        const float got = f.cum[f.row(b, t) + c], in = ec.pb.cum[f.row(b, t) + c];
        ASSERT_TRUE(std::isfinite(got)) << "cum' b=" << b << " t=" << t;
        if (t == 0 || t > L) EXPECT_EQ(std::memcmp(&got, &in, 4), 0) << "cum' row " << t << " of utterance " << b;
        if (t == T) continue;
        const float o = f.o[(b * T + t) * C + c];
        ASSERT_TRUE(std::isfinite(o)) << "onset' b=" << b << " t=" << t;
        if (t >= L) EXPECT_EQ(o, 0.0f);
        if (t == 0) EXPECT_EQ(o, static_cast<float>(ec.o(b, 0, c)));
      }
  }
  std::vector<float> zero_end(B * T * C, 0.0f), cum(f.cum.size()), on(f.o.size());
  std::vector<float> dense_onset(B * T * C);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < ec.pb.lengths[b]; ++t)
      for (int64_t c = 0; c < C; ++c) dense_onset[(b * T + t) * C + c] = static_cast<float>(ec.o(b, t, c));
  const EndFoldShape dense{B, T, C, C, C};
  fold_end_scores(dense, ec.pb.lengths.data(), ec.pb.cum.data(), dense_onset.data(), zero_end.data(), cum.data(),
                  on.data());
  EXPECT_EQ(std::memcmp(cum.data(), ec.pb.cum.data(), cum.size() * 4), 0) << "q = 0 changed cum";
  EXPECT_EQ(std::memcmp(on.data(), dense_onset.data(), on.size() * 4), 0) << "q = 0 changed onset";
  std::vector<float> in_place = ec.pb.cum, on2(f.o.size());
  fold_end_scores(ec.shape(), ec.pb.lengths.data(), in_place.data(), ec.onset(), ec.end(), in_place.data(),
                  on2.data());
  EXPECT_EQ(std::memcmp(in_place.data(), f.cum.data(), in_place.size() * 4), 0) << "in place";
}

TEST(EndScoresFold, ValidationNamesTheProblem) {
  const EndCase ec = make_case(Dims{2, 4, 2, 3}, 13, {4, 2}, true);
  std::vector<float> cum(ec.pb.cum.size()), on(2 * 4 * 3), g(2 * 4 * 6);
  auto expect_throw = [](const std::function<void()>& f, const std::string& part) {
    try {
      f();
      ADD_FAILURE() << "no throw, expected: " << part;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  const std::vector<int32_t> bad0{0, 2}, bad5{4, 5};
  EndFoldShape s = ec.shape();
  auto fold = [&](const EndFoldShape& sh, const int32_t* len) {
    return [&, sh, len] { fold_end_scores(sh, len, ec.pb.cum.data(), ec.onset(), ec.end(), cum.data(), on.data()); };
  };
  expect_throw(fold(s, bad0.data()), "crf::fold_end_scores: lengths[0] = 0 is outside [1, T=4]");
  expect_throw(fold(s, bad5.data()), "lengths[1] = 5 is outside [1, T=4]");
  expect_throw([&] { fold_end_scores_backward(s, bad5.data(), cum.data(), on.data(), g.data()); },
               "crf::fold_end_scores_backward: lengths[1] = 5");
  EndFoldShape narrow = s;
  narrow.end_stride = 2;
  expect_throw(fold(narrow, ec.pb.lengths.data()), "frame strides must be >= C=3, got onset_stride=6 end_stride=2");
  EndFoldShape empty = s;
  empty.T = 0;
  expect_throw(fold(empty, ec.pb.lengths.data()), "dims must be >= 1, got B=2 T=0 C=3");
  const int32_t* len = ec.pb.lengths.data();
  expect_throw([&] { fold_end_scores<float>(s, len, ec.pb.cum.data(), nullptr, nullptr, cum.data(), on.data()); },
               "must not be null");
}

}  // namespace
}  // namespace timitseg::crf::testing
