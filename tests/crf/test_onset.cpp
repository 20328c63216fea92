// Onset scores o[b][t][c] (docs/crf.md: added once at the first frame of every
// segment, split pieces of a gold run included) on the reference and cpu
// backends: brute-force enumeration of tiny problems (log Z, gold, every
// gradient including grad onset, Viterbi, boundary posteriors), finite
// differences of log Z and NLL with respect to o (float64 reference), cpu vs
// reference on random larger problems with -inf parameter entries, a gold
// score with a split run computed by hand, zero onset bitwise equal to no
// onset, padding frames never read, and validation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <stdexcept>

#include "crf/backend_kind.h"
#include "crf/cpu/cpu.h"
#include "crf/host_run.h"
#include "crf/reference/reference.h"
#include "crf/segments.h"
#include "crf/validate.h"
#include "helpers.h"

namespace timitseg::crf::testing {
namespace {

constexpr float kNegInfF = -std::numeric_limits<float>::infinity();

std::vector<Problem> tiny_onset_problems() { return tiny_exact_problems({1, 2, 3, 5, 6}, {1, 2, 3}, {1, 2, 3}, 101, true); }

std::string describe(const Problem& pb) {
  return "T=" + std::to_string(pb.dims.T) + " C=" + std::to_string(pb.dims.C) + " K=" + std::to_string(pb.dims.K) +
         (pb.s.empty() ? " (no start/end)" : " (start/end)");
}

template <class T>
bool bitwise_equal(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// float64 copies of a problem's inputs for the reference's f64 entry points.
struct F64 {
  std::vector<double> cum, A, D, s, e, o;
  reference::ParamsF64 p;
  explicit F64(const Problem& pb)
      : cum(pb.cum.begin(), pb.cum.end()), A(pb.A.begin(), pb.A.end()), D(pb.D.begin(), pb.D.end()),
        s(pb.s.begin(), pb.s.end()), e(pb.e.begin(), pb.e.end()), o(pb.o.begin(), pb.o.end()) {
    p = reference::ParamsF64{cum.data(), A.data(), D.data(), s.empty() ? nullptr : s.data(),
                             e.empty() ? nullptr : e.data(), pb.lengths.data()};
    if (!o.empty()) p.onset = o.data();
  }
};

TEST(OnsetBruteForce, EnumerationIncludesOnsetOncePerSegment) {
  // The oracle itself: a path's score with onset minus without is the sum of
  // o at the start of each of its segments.
  Problem pb = tiny_onset_problems()[20];
  Problem plain = pb;
  plain.o.clear();
  const std::vector<Path> with = enumerate_paths(pb, 0), without = enumerate_paths(plain, 0);
  ASSERT_EQ(with.size(), without.size());
  for (size_t i = 0; i < with.size(); ++i) {
    double sum = 0.0;
    for (const Segment& g : with[i].segs) sum += pb.o[(0 * pb.dims.T + g.start) * pb.dims.C + g.label];
    EXPECT_EQ(with[i].score - without[i].score, sum);
  }
}

TEST(OnsetBruteForce, ReferenceFloat64MatchesEnumerationTo1e9) {
  const double scale = 0.75;
  for (const Problem& pb : tiny_onset_problems()) {
    SCOPED_TRACE(describe(pb));
    const Expected ex = brute_force(pb, scale);
    const int64_t B = pb.dims.B, T = pb.dims.T, K = pb.dims.K, C = pb.dims.C;
    const F64 in(pb);
    std::vector<double> lz(B), gold(B), gc(B * (T + 1) * C), ga(C * C), gd(K * C), gs(C), ge(C), go(B * T * C, 7.0);
    reference::GradsF64 g{gc.data(), ga.data(), gd.data(), gs.data(), ge.data()};
    g.onset = go.data();
    reference::backward_f64(pb.dims, in.p, pb.labels.data(), scale, lz.data(), gold.data(), g);
    expect_close(lz, ex.log_z, 1e-9, 1e-12, "log_z");
    expect_close(gold, ex.gold, 1e-9, 1e-12, "gold");
    expect_close(gc, ex.g_cum, 1e-9, 1e-12, "grad_cum");
    expect_close(ga, ex.g_A, 1e-9, 1e-12, "grad_transition");
    expect_close(gd, ex.g_D, 1e-9, 1e-12, "grad_duration_bias");
    expect_close(gs, ex.g_s, 1e-9, 1e-12, "grad_start");
    expect_close(ge, ex.g_e, 1e-9, 1e-12, "grad_end");
    expect_close(go, ex.g_o, 1e-9, 1e-12, "grad_onset");
    std::vector<double> vs(B), bp(B * (T + 1)), g2(B);
    reference::gold_score_f64(pb.dims, in.p, pb.labels.data(), g2.data());
    expect_close(g2, ex.gold, 1e-9, 1e-12, "gold_score");
    std::vector<int32_t> segs(B * T * 3), ns(B);
    reference::viterbi_f64(pb.dims, in.p, vs.data(), segs.data(), ns.data());
    expect_close(vs, ex.vscore, 1e-9, 1e-12, "viterbi_score");
    EXPECT_EQ(collect_segments(pb.dims, segs.data(), ns.data()), ex.vsegs);
    reference::boundary_posteriors_f64(pb.dims, in.p, bp.data());
    expect_close(bp, ex.bpost, 1e-9, 1e-12, "boundary_posteriors");
  }
}

TEST(OnsetBruteForce, ReferenceAndCpuBackendsMatchEnumeration) {
  const double scale = 0.75;
  for (const std::string name : {"reference", "cpu"}) {
    auto be = name == "cpu" ? cpu::make_cpu_backend(2) : make_backend(backend_kind(name));
    for (const Problem& pb : tiny_onset_problems()) {
      SCOPED_TRACE(name + " " + describe(pb));
      const Expected ex = brute_force(pb, scale);
      HostRunOptions opt;
      opt.scale = scale;
      opt.boundary_posteriors = true;
      const HostResult r = run_host(*be, pb.dims, pb.params(), pb.labels.data(), opt);
      expect_close(r.log_z, ex.log_z, 1e-5, 1e-9, "log_z");
      expect_close(r.gold, ex.gold, 1e-5, 1e-9, "gold");
      expect_close(r.grad_cum_scores, ex.g_cum, 1e-5, 1e-7, "grad_cum");
      expect_close(r.grad_transition, ex.g_A, 1e-5, 1e-7, "grad_transition");
      expect_close(r.grad_duration_bias, ex.g_D, 1e-5, 1e-7, "grad_duration_bias");
      expect_close(r.grad_start, ex.g_s, 1e-5, 1e-7, "grad_start");
      expect_close(r.grad_end, ex.g_e, 1e-5, 1e-7, "grad_end");
      expect_close(r.grad_onset, ex.g_o, 1e-5, 1e-7, "grad_onset");
      expect_close(r.viterbi_score, ex.vscore, 1e-5, 1e-9, "viterbi_score");
      EXPECT_EQ(r.segments, ex.vsegs);
      expect_close(r.boundary_posteriors, ex.bpost, 1e-5, 1e-9, "boundary_posteriors");
      // Without labels: grad onset = scale * P(a segment with c starts at t), in [0, scale].
      HostRunOptions nl = opt;
      nl.viterbi = false;
      const HostResult z = run_host(*be, pb.dims, pb.params(), nullptr, nl);
      Expected exz = brute_force(pb, scale, false);
      expect_close(z.grad_onset, exz.g_o, 1e-5, 1e-7, "grad_onset (log Z)");
    }
  }
}

// Central differences of log Z_b and NLL_b with respect to every onset entry
// of the valid frames, float64 reference end to end.
TEST(OnsetFiniteDifferences, LogZAndNllFloat64) {
  Problem pb = random_problem(Dims{3, 9, 3, 3}, 31, {9, 6, 1});
  add_onset(pb, 31, 0.8);
  const int64_t B = 3, T = 9, K = 3, C = 3;
  F64 in(pb);
  for (const bool with_labels : {false, true}) {
    SCOPED_TRACE(with_labels ? "NLL" : "log Z");
    const int32_t* lab = with_labels ? pb.labels.data() : nullptr;
    auto loss = [&]() {
      std::vector<double> lz(B), gold(B);
      reference::log_partition_f64(pb.dims, in.p, lz.data());
      if (with_labels) reference::gold_score_f64(pb.dims, in.p, lab, gold.data());
      double l = 0.0;
      for (int64_t b = 0; b < B; ++b) l += 0.5 * (lz[b] - (with_labels ? gold[b] : 0.0));
      return l;
    };
    std::vector<double> lz(B), gold(B), gc(B * (T + 1) * C), ga(C * C), gd(K * C), gs(C), ge(C), go(B * T * C);
    reference::GradsF64 g{gc.data(), ga.data(), gd.data(), gs.data(), ge.data()};
    g.onset = go.data();
    reference::backward_f64(pb.dims, in.p, lab, 0.5, lz.data(), gold.data(), g);
    const double h = 1e-5;
    double worst = 0.0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < C; ++c) {
          const size_t i = (b * T + t) * C + c;
          if (t >= pb.lengths[b]) {
            EXPECT_EQ(go[i], 0.0) << "padding frame b=" << b << " t=" << t;
            continue;
          }
          const double keep = in.o[i];
          in.o[i] = keep + h;
          const double up = loss();
          in.o[i] = keep - h;
          const double down = loss();
          in.o[i] = keep;
          const double fd = (up - down) / (2 * h);
          EXPECT_NEAR(go[i], fd, 1e-7) << "o[" << b << "][" << t << "][" << c << "]";
          worst = std::max(worst, std::fabs(go[i] - fd));
        }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g", worst);
    RecordProperty(with_labels ? "fd_nll_max_abs_err" : "fd_logz_max_abs_err", buf);
  }
}

// Forbids (-inf) half of the transitions and durations the gold segmentation
// does not use, and the start of a label no utterance starts with.
void forbid_unused(Problem& pb) {
  const int64_t T = pb.dims.T, K = pb.dims.K, C = pb.dims.C;
  std::set<int64_t> usedA, usedD, usedS;
  for (int64_t b = 0; b < pb.dims.B; ++b) {
    const std::vector<Segment> g = gold_segments(pb.labels.data() + b * T, pb.lengths[b], K);
    usedS.insert(g.front().label);
    for (size_t i = 0; i < g.size(); ++i) {
      usedD.insert((g[i].duration - 1) * C + g[i].label);
      if (i > 0) usedA.insert(g[i - 1].label * C + g[i].label);
    }
  }
  for (int64_t i = 0; i < C * C; i += 2)
    if (!usedA.count(i)) pb.A[i] = kNegInfF;
  for (int64_t i = 1; i < K * C; i += 2)
    if (!usedD.count(i)) pb.D[i] = kNegInfF;
  for (int64_t c = 0; c < C; ++c)
    if (!usedS.count(c)) {
      pb.s[c] = kNegInfF;
      break;
    }
}

void expect_cpu_matches_reference(const Problem& pb, bool labels) {
  auto ref = make_backend(BackendKind::reference);
  auto cpu = make_backend(BackendKind::cpu);
  HostRunOptions opt;
  opt.boundary_posteriors = true;
  opt.scale = 0.5;
  const int32_t* lab = labels ? pb.labels.data() : nullptr;
  const HostResult a = run_host(*cpu, pb.dims, pb.params(), lab, opt);
  const HostResult r = run_host(*ref, pb.dims, pb.params(), lab, opt);
  expect_close(a.log_z, r.log_z, 1e-5, 0.0, "log_z");
  expect_close(a.gold, r.gold, 1e-5, 0.0, "gold");
  expect_close(a.grad_cum_scores, r.grad_cum_scores, 1e-5, 1e-9, "grad_cum_scores");
  expect_close(a.grad_transition, r.grad_transition, 1e-5, 1e-9, "grad_transition");
  expect_close(a.grad_duration_bias, r.grad_duration_bias, 1e-5, 1e-9, "grad_duration_bias");
  expect_close(a.grad_start, r.grad_start, 1e-5, 1e-9, "grad_start");
  expect_close(a.grad_end, r.grad_end, 1e-5, 1e-9, "grad_end");
  expect_close(a.grad_onset, r.grad_onset, 1e-5, 1e-9, "grad_onset");
  expect_close(a.viterbi_score, r.viterbi_score, 1e-5, 0.0, "viterbi_score");
  EXPECT_EQ(a.segments, r.segments);
  expect_close(a.boundary_posteriors, r.boundary_posteriors, 1e-5, 1e-9, "boundary_posteriors");
  EXPECT_TRUE(all_finite(a.grad_onset));
  for (size_t i = 0; i < pb.A.size(); ++i)
    if (pb.A[i] == kNegInfF) EXPECT_EQ(a.grad_transition[i], 0.0f);
  if (labels)
    for (int64_t b = 0; b < pb.dims.B; ++b) EXPECT_GE(a.log_z[b] - a.gold[b], -1e-9) << "NLL of utterance " << b;
}

TEST(OnsetCpuVsReference, RandomB4T300K30C39) {
  Problem pb = random_problem(Dims{4, 300, 30, 39}, 43, {300, 211, 57, 1});
  add_onset(pb, 43, 1.5);
  expect_cpu_matches_reference(pb, true);
  expect_cpu_matches_reference(pb, false);
}

TEST(OnsetCpuVsReference, MinusInfParameterEntries) {
  Problem pb = random_problem(Dims{3, 120, 12, 7}, 44, {120, 77, 3});
  add_onset(pb, 44, 2.0);
  forbid_unused(pb);
  expect_cpu_matches_reference(pb, true);
  expect_cpu_matches_reference(pb, false);
}

// A gold run of 5 frames with K = 2 is split into pieces (0,2), (2,2), (4,1):
// each piece gets its own onset score. Everything by hand.
TEST(OnsetGold, SplitRunCountsEveryPieceByHand) {
  Problem pb = random_problem(Dims{1, 7, 2, 2}, 45, {7});
  add_onset(pb, 45, 1.0);
  pb.labels = {0, 0, 0, 0, 0, 1, 1};
  const int64_t C = 2;
  auto cum = [&](int64_t t, int64_t c) { return static_cast<double>(pb.cum[t * C + c]); };
  auto o = [&](int64_t t, int64_t c) { return static_cast<double>(pb.o[t * C + c]); };
  auto D = [&](int64_t d, int64_t c) { return static_cast<double>(pb.D[(d - 1) * C + c]); };
  auto A = [&](int64_t a, int64_t b) { return static_cast<double>(pb.A[a * C + b]); };
  const double want = pb.s[0] + (cum(2, 0) - cum(0, 0) + D(2, 0) + o(0, 0)) + A(0, 0) +
                      (cum(4, 0) - cum(2, 0) + D(2, 0) + o(2, 0)) + A(0, 0) +
                      (cum(5, 0) - cum(4, 0) + D(1, 0) + o(4, 0)) + A(0, 1) +
                      (cum(7, 1) - cum(5, 1) + D(2, 1) + o(5, 1)) + pb.e[1];
  for (const std::string name : {"reference", "cpu"}) {
    auto be = make_backend(backend_kind(name));
    std::vector<double> gold(1);
    std::vector<uint8_t> ws(be->workspace_bytes(pb.dims));
    be->gold_score(pb.dims, pb.params(), pb.labels.data(), gold.data(), ws.data());
    EXPECT_NEAR(gold[0], want, 1e-5) << name;
    // The gold part of grad onset: -1 exactly at the four starts (grad of -gold).
    HostRunOptions opt;
    opt.viterbi = false;
    const HostResult with = run_host(*be, pb.dims, pb.params(), pb.labels.data(), opt);
    const HostResult lz = run_host(*be, pb.dims, pb.params(), nullptr, opt);
    for (int64_t t = 0; t < 7; ++t)
      for (int64_t c = 0; c < C; ++c) {
        const bool start = (c == 0 && (t == 0 || t == 2 || t == 4)) || (c == 1 && t == 5);
        EXPECT_NEAR(with.grad_onset[t * C + c] - lz.grad_onset[t * C + c], start ? -1.0 : 0.0, 1e-6)
            << name << " t=" << t << " c=" << c;
      }
  }
}

// Onset of all zeros gives bitwise the results of no onset (the expressions
// without onset are those of the formulas before the term existed).
TEST(OnsetBitwise, ZeroOnsetEqualsNoOnset) {
  const Problem plain = random_problem(Dims{3, 60, 8, 6}, 46, {60, 31, 2});
  Problem zero = plain;
  zero.o.assign(3 * 60 * 6, 0.0f);
  for (const std::string name : {"reference", "cpu"}) {
    SCOPED_TRACE(name);
    auto be = make_backend(backend_kind(name));
    HostRunOptions opt;
    opt.boundary_posteriors = true;
    const HostResult a = run_host(*be, plain.dims, plain.params(), plain.labels.data(), opt);
    const HostResult b = run_host(*be, zero.dims, zero.params(), zero.labels.data(), opt);
    EXPECT_TRUE(a.grad_onset.empty());
    EXPECT_EQ(b.grad_onset.size(), 3u * 60 * 6);
    EXPECT_TRUE(bitwise_equal(a.log_z, b.log_z));
    EXPECT_TRUE(bitwise_equal(a.gold, b.gold));
    EXPECT_TRUE(bitwise_equal(a.grad_cum_scores, b.grad_cum_scores));
    EXPECT_TRUE(bitwise_equal(a.grad_transition, b.grad_transition));
    EXPECT_TRUE(bitwise_equal(a.grad_duration_bias, b.grad_duration_bias));
    EXPECT_TRUE(bitwise_equal(a.grad_start, b.grad_start));
    EXPECT_TRUE(bitwise_equal(a.grad_end, b.grad_end));
    EXPECT_TRUE(bitwise_equal(a.viterbi_score, b.viterbi_score));
    EXPECT_EQ(a.segments, b.segments);
    EXPECT_TRUE(bitwise_equal(a.boundary_posteriors, b.boundary_posteriors));
  }
}

TEST(OnsetPadding, PaddingFramesAreNeverReadAndGetZeroGradient) {
  Problem clean = random_problem(Dims{3, 40, 6, 4}, 47, {40, 17, 5});
  add_onset(clean, 47, 1.0);
  Problem poisoned = clean;
  add_onset(poisoned, 47, 1.0, false, true);
  ASSERT_TRUE(std::isnan(poisoned.o[(1 * 40 + 17) * 4]));
  for (const std::string name : {"reference", "cpu"}) {
    SCOPED_TRACE(name);
    auto be = make_backend(backend_kind(name));
    HostRunOptions opt;
    opt.boundary_posteriors = true;
    const HostResult a = run_host(*be, clean.dims, clean.params(), clean.labels.data(), opt);
    const HostResult b = run_host(*be, poisoned.dims, poisoned.params(), poisoned.labels.data(), opt);
    EXPECT_TRUE(bitwise_equal(a.log_z, b.log_z));
    EXPECT_TRUE(bitwise_equal(a.grad_onset, b.grad_onset));
    EXPECT_TRUE(bitwise_equal(a.grad_cum_scores, b.grad_cum_scores));
    EXPECT_EQ(a.segments, b.segments);
    for (int64_t bb = 0; bb < 3; ++bb)
      for (int64_t t = clean.lengths[bb]; t < 40; ++t)
        for (int64_t c = 0; c < 4; ++c) EXPECT_EQ(a.grad_onset[(bb * 40 + t) * 4 + c], 0.0f);
  }
}

TEST(OnsetValidate, NonFiniteOnsetOnAValidFrameNamesTensorAndIndex) {
  Problem pb = random_problem(Dims{2, 6, 3, 3}, 48, {6, 4});
  add_onset(pb, 48);
  pb.o[(1 * 6 + 3) * 3 + 2] = std::numeric_limits<float>::infinity();
  for (const std::string name : {"reference", "cpu"}) {
    auto be = make_backend(backend_kind(name));
    try {
      run_host(*be, pb.dims, pb.params(), pb.labels.data());
      ADD_FAILURE() << name << ": no error";
    } catch (const std::invalid_argument& e) {
      EXPECT_STREQ(e.what(), "crf: onset[1][3][2] = inf is not finite") << name;
    }
  }
  pb.o[(1 * 6 + 3) * 3 + 2] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(validate_host(pb.dims, pb.params(), nullptr), std::invalid_argument);
  pb.o[(1 * 6 + 3) * 3 + 2] = 0.0f;
  pb.o[(1 * 6 + 4) * 3 + 0] = std::numeric_limits<float>::quiet_NaN();  // padding of utterance 1: never read
  EXPECT_NO_THROW(validate_host(pb.dims, pb.params(), pb.labels.data()));
}

}  // namespace
}  // namespace timitseg::crf::testing
