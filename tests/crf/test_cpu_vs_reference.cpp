// cpu backend against the float64 reference on random inputs; padding
// invariance; determinism; NLL >= 0; no NaN/Inf on extreme inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "crf/backend_kind.h"
#include "crf/cpu/cpu.h"
#include "crf/host_run.h"
#include "crf/reference/reference.h"
#include "helpers.h"

namespace timitseg::crf::testing {
namespace {

HostResult run(const std::string& name, const Problem& pb, bool labels = true, double scale = 1.0) {
  auto be = name == "cpu1" ? cpu::make_cpu_backend(1) : make_backend(backend_kind(name));
  HostRunOptions opt;
  opt.scale = scale;
  opt.boundary_posteriors = true;
  return run_host(*be, pb.dims, pb.params(), labels ? pb.labels.data() : nullptr, opt);
}

void expect_matches_reference(const HostResult& got, const HostResult& ref, double rtol) {
  expect_close(got.log_z, ref.log_z, rtol, 0.0, "log_z");
  expect_close(got.gold, ref.gold, rtol, 0.0, "gold");
  expect_close(got.grad_cum_scores, ref.grad_cum_scores, rtol, 1e-9, "grad_cum_scores");
  expect_close(got.grad_transition, ref.grad_transition, rtol, 1e-9, "grad_transition");
  expect_close(got.grad_duration_bias, ref.grad_duration_bias, rtol, 1e-9, "grad_duration_bias");
  expect_close(got.grad_start, ref.grad_start, rtol, 1e-9, "grad_start");
  expect_close(got.grad_end, ref.grad_end, rtol, 1e-9, "grad_end");
  expect_close(got.viterbi_score, ref.viterbi_score, rtol, 0.0, "viterbi_score");
  EXPECT_EQ(got.segments, ref.segments);
  expect_close(got.boundary_posteriors, ref.boundary_posteriors, rtol, 1e-9, "boundary_posteriors");
}

template <class T>
bool bitwise_equal(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

TEST(CpuVsReference, RandomB4T300K30C39) {
  const Problem pb = random_problem(Dims{4, 300, 30, 39}, 42, {300, 211, 57, 1});
  const HostResult ref = run("reference", pb);
  const HostResult cpu = run("cpu", pb);
  expect_matches_reference(cpu, ref, 1e-5);
  for (int64_t b = 0; b < 4; ++b) EXPECT_GE(cpu.log_z[b] - cpu.gold[b], 0.0) << "NLL of utterance " << b;
  // Boundary posteriors: P(end at L) = 1 and every entry in [0, 1].
  for (int64_t b = 0; b < 4; ++b) {
    EXPECT_NEAR(cpu.boundary_posteriors[b * 301 + pb.lengths[b]], 1.0, 1e-12);
    for (int64_t t = 0; t <= 300; ++t) {
      EXPECT_GE(cpu.boundary_posteriors[b * 301 + t], 0.0);
      EXPECT_LE(cpu.boundary_posteriors[b * 301 + t], 1.0 + 1e-12);
    }
  }
}

TEST(CpuVsReference, NoLabelsGivesGradOfLogZAndScale) {
  const Problem pb = random_problem(Dims{3, 40, 7, 5}, 7, {40, 13, 29}, false);
  const HostResult ref = run("reference", pb, false, 0.25);
  const HostResult cpu = run("cpu", pb, false, 0.25);
  EXPECT_TRUE(cpu.gold.empty());
  expect_matches_reference(cpu, ref, 1e-5);
  // Without labels the cum gradient rows are posteriors minus posteriors: each
  // column sum over t of d logZ/d cum[t,c] telescopes to 0 (ends - starts of label c).
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t c = 0; c < 5; ++c) {
      double sum = 0.0;
      for (int64_t t = 0; t <= 40; ++t) sum += cpu.grad_cum_scores[(b * 41 + t) * 5 + c];
      EXPECT_NEAR(sum, 0.0, 1e-6);
    }
}

TEST(CpuBackend, PaddingInvarianceIsBitwise) {
  // Utterance U (length 137) alone without padding, alone padded to 300 with NaN
  // in the padding, and in the middle of a batch of 3 padded to 300.
  const int64_t K = 30, C = 39, L = 137;
  const Problem alone = random_problem(Dims{1, L, K, C}, 5, {static_cast<int32_t>(L)});
  Problem padded = random_problem(Dims{1, 300, K, C}, 6, {static_cast<int32_t>(L)});
  padded.A = alone.A, padded.D = alone.D, padded.s = alone.s, padded.e = alone.e;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t i = 0; i < 301 * C; ++i) padded.cum[i] = i < (L + 1) * C ? alone.cum[i] : nan;
  for (int64_t t = 0; t < 300; ++t) padded.labels[t] = t < L ? alone.labels[t] : 12345;
  Problem batch = random_problem(Dims{3, 300, K, C}, 8, {300, static_cast<int32_t>(L), 77});
  batch.A = alone.A, batch.D = alone.D, batch.s = alone.s, batch.e = alone.e;
  for (int64_t i = 0; i < 301 * C; ++i) batch.cum[301 * C + i] = padded.cum[i];
  for (int64_t t = 0; t < 300; ++t) batch.labels[300 + t] = padded.labels[t];

  for (const std::string name : {"cpu", "cpu1"}) {
    SCOPED_TRACE(name);
    const HostResult a = run(name, alone), p = run(name, padded), m = run(name, batch);
    // Alone vs padded: everything identical, parameter gradients included.
    EXPECT_TRUE(bitwise_equal(a.log_z, p.log_z));
    EXPECT_TRUE(bitwise_equal(a.gold, p.gold));
    EXPECT_TRUE(bitwise_equal(a.viterbi_score, p.viterbi_score));
    EXPECT_EQ(a.segments, p.segments);
    EXPECT_TRUE(bitwise_equal(a.grad_transition, p.grad_transition));
    EXPECT_TRUE(bitwise_equal(a.grad_duration_bias, p.grad_duration_bias));
    EXPECT_TRUE(bitwise_equal(a.grad_start, p.grad_start));
    EXPECT_TRUE(bitwise_equal(a.grad_end, p.grad_end));
    EXPECT_EQ(std::memcmp(a.grad_cum_scores.data(), p.grad_cum_scores.data(), (L + 1) * C * sizeof(float)), 0);
    for (int64_t i = (L + 1) * C; i < 301 * C; ++i) ASSERT_EQ(p.grad_cum_scores[i], 0.0f) << "padding gradient " << i;
    // In the middle of a batch: its own outputs identical.
    EXPECT_EQ(std::memcmp(&a.log_z[0], &m.log_z[1], sizeof(double)), 0);
    EXPECT_EQ(std::memcmp(&a.gold[0], &m.gold[1], sizeof(double)), 0);
    EXPECT_EQ(std::memcmp(&a.viterbi_score[0], &m.viterbi_score[1], sizeof(double)), 0);
    std::vector<Segment> mid;
    for (Segment s : m.segments)
      if (s.batch == 1) s.batch = 0, mid.push_back(s);
    EXPECT_EQ(a.segments, mid);
    EXPECT_EQ(std::memcmp(a.grad_cum_scores.data(), m.grad_cum_scores.data() + 301 * C, (L + 1) * C * sizeof(float)), 0);
    for (int64_t i = (L + 1) * C; i < 301 * C; ++i) ASSERT_EQ(m.grad_cum_scores[301 * C + i], 0.0f);
  }
}

TEST(CpuBackend, DeterministicAcrossRunsAndThreadCounts) {
  const Problem pb = random_problem(Dims{9, 120, 20, 17}, 99);
  const HostResult r1 = run("cpu", pb), r2 = run("cpu", pb), r3 = run("cpu1", pb);
  for (const HostResult* r : {&r2, &r3}) {
    EXPECT_TRUE(bitwise_equal(r1.log_z, r->log_z));
    EXPECT_TRUE(bitwise_equal(r1.gold, r->gold));
    EXPECT_TRUE(bitwise_equal(r1.grad_cum_scores, r->grad_cum_scores));
    EXPECT_TRUE(bitwise_equal(r1.grad_transition, r->grad_transition));
    EXPECT_TRUE(bitwise_equal(r1.grad_duration_bias, r->grad_duration_bias));
    EXPECT_TRUE(bitwise_equal(r1.grad_start, r->grad_start));
    EXPECT_TRUE(bitwise_equal(r1.grad_end, r->grad_end));
    EXPECT_TRUE(bitwise_equal(r1.boundary_posteriors, r->boundary_posteriors));
    EXPECT_EQ(r1.segments, r->segments);
  }
}

TEST(CpuBackend, NllIsNonNegativeEvenWhenGoldDominates) {
  // Frame scores strongly favour the gold labels: NLL is tiny but never negative.
  Problem pb = random_problem(Dims{2, 50, 5, 4}, 3, {50, 31}, true, 0.1, 0.1);
  const int64_t T = 50, C = 4;
  std::vector<float> x(2 * T * C, 0.0f);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < T; ++t) x[(b * T + t) * C + pb.labels[b * T + t]] = 60.0f;
  centered_cumsum_forward<float>(2, T, C, x.data(), pb.lengths.data(), pb.cum.data());
  for (const std::string name : {"reference", "cpu"}) {
    const HostResult r = run(name, pb);
    for (int64_t b = 0; b < 2; ++b) {
      EXPECT_GE(r.log_z[b] - r.gold[b], 0.0) << name << " utterance " << b;
      EXPECT_LT(r.log_z[b] - r.gold[b], 50.0) << name;  // sanity: gold dominates
    }
  }
}

TEST(CpuBackend, ExtremeInputsStayFinite) {
  struct Case {
    const char* what;
    Dims dims;
    std::vector<int32_t> lengths;
    double x_scale, p_scale;
    float transition;  // NAN: random; -2: each entry 0 or -1e4 at random
  };
  const std::vector<Case> cases{
      {"scores +-1e4", Dims{3, 60, 10, 6}, {60, 31, 1}, 1e4, 0.5, NAN},
      {"transitions -1e4", Dims{3, 60, 10, 6}, {60, 31, 1}, 1.0, 0.5, -1e4f},
      {"scores 1e4 and transitions -1e4", Dims{2, 40, 8, 5}, {40, 17}, 1e4, 1e3, -1e4f},
      // Mixed 0 / -1e4 transitions with large scores: the linear-domain C x C sums
      // of the cpu backend underflow and take the exact log-domain fallback.
      {"scores 1e3 and transitions 0 or -1e4", Dims{3, 60, 6, 6}, {60, 45, 2}, 1e3, 1.0, -2.0f},
      {"K > T", Dims{2, 5, 30, 4}, {5, 3}, 1.0, 0.5, NAN},
      {"T = 1", Dims{2, 1, 3, 4}, {1, 1}, 1.0, 0.5, NAN},
      {"C = 1", Dims{2, 30, 4, 1}, {30, 9}, 1.0, 0.5, NAN},
  };
  for (const Case& cs : cases) {
    SCOPED_TRACE(cs.what);
    Problem pb = random_problem(cs.dims, 11, cs.lengths, true, cs.x_scale, cs.p_scale);
    std::mt19937 coin(3);
    if (cs.transition == -2.0f)
      for (auto& a : pb.A) a = (coin() % 2) ? 0.0f : -1e4f;
    else if (!std::isnan(cs.transition))
      for (auto& a : pb.A) a = cs.transition;
    const HostResult ref = run("reference", pb), cpu = run("cpu", pb);
    for (const HostResult* r : {&ref, &cpu}) {
      EXPECT_TRUE(all_finite(r->log_z));
      EXPECT_TRUE(all_finite(r->gold));
      EXPECT_TRUE(all_finite(r->viterbi_score));
      EXPECT_TRUE(all_finite(r->grad_cum_scores));
      EXPECT_TRUE(all_finite(r->grad_transition));
      EXPECT_TRUE(all_finite(r->grad_duration_bias));
      EXPECT_TRUE(all_finite(r->grad_start));
      EXPECT_TRUE(all_finite(r->grad_end));
      EXPECT_TRUE(all_finite(r->boundary_posteriors));
      for (size_t b = 0; b < r->log_z.size(); ++b) EXPECT_GE(r->log_z[b] - r->gold[b], 0.0);
    }
    // Gradients are probabilities (differences): compared absolutely; log Z relatively.
    expect_close(cpu.log_z, ref.log_z, 1e-9, 0.0, "log_z");
    expect_close(cpu.grad_cum_scores, ref.grad_cum_scores, 0.0, 1e-5, "grad_cum_scores");
    expect_close(cpu.grad_transition, ref.grad_transition, 0.0, 1e-5, "grad_transition");
    expect_close(cpu.grad_duration_bias, ref.grad_duration_bias, 0.0, 1e-5, "grad_duration_bias");
    expect_close(cpu.viterbi_score, ref.viterbi_score, 1e-12, 0.0, "viterbi_score");
  }
}

}  // namespace
}  // namespace timitseg::crf::testing
