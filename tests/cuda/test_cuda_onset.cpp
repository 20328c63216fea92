// Onset scores o[b][t][c] (docs/crf.md) on the cuda backend: against the
// brute-force enumeration on tiny problems and against the float64 reference
// on random problems (shared-memory and global-memory rings, -inf parameter
// entries, NaN padding that must never be read), zero onset bitwise equal to
// no onset, determinism of grad onset, and the device validation message.
// Every test skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>

#include "crf/backend.h"
#include "crf/backend_kind.h"
#include "crf/host_run.h"
#include "crf/segments.h"
#include "crf/session.h"
#include "tests/cuda/cuda_harness.h"
#include "tests/cuda/oracle.h"
#include "tests/support/crf_bruteforce.h"

namespace timitseg::crf::testing {
namespace {

constexpr float kNegInfF = -std::numeric_limits<float>::infinity();

// Score of a segmentation of utterance b with onset, float64.
double onset_path_score(const Problem& p, int64_t b, const std::vector<Segment>& segs) {
  const int64_t T = p.dims.T, C = p.dims.C;
  const float* cum = p.cum.data() + b * (T + 1) * C;
  double sc = (p.s.empty() ? 0.0 : p.s[segs.front().label]) + (p.e.empty() ? 0.0 : p.e[segs.back().label]);
  for (size_t i = 0; i < segs.size(); ++i) {
    const Segment& g = segs[i];
    sc += static_cast<double>(cum[(g.start + g.duration) * C + g.label]) - static_cast<double>(cum[g.start * C + g.label]) +
          static_cast<double>(p.D[(g.duration - 1) * C + g.label]);
    if (i > 0) sc += p.A[segs[i - 1].label * C + g.label];
    if (!p.o.empty()) sc += p.o[(b * T + g.start) * C + g.label];
  }
  return sc;
}

// Viterbi output equal to the expected one up to genuine ties (then the cuda
// path must score the optimum).
void expect_viterbi(const Problem& p, const std::vector<Segment>& got, const std::vector<Segment>& want,
                    const std::vector<double>& want_score) {
  std::map<int, std::vector<Segment>> g, w;
  for (const Segment& s : got) g[s.batch].push_back(s);
  for (const Segment& s : want) w[s.batch].push_back(s);
  for (int64_t b = 0; b < p.dims.B; ++b) {
    if (g[b] == w[b]) continue;
    EXPECT_NEAR(onset_path_score(p, b, g[b]), want_score[b], 1e-9 * std::max(1.0, std::abs(want_score[b])))
        << "utterance " << b;
  }
}

void expect_matches(const HostResult& g, const HostResult& r, const Problem& p, double tol) {
  EXPECT_LT(rel_err(g.log_z, r.log_z), tol);
  if (!r.gold.empty()) EXPECT_LT(rel_err(g.gold, r.gold), 1e-9);
  EXPECT_LT(rel_err(g.grad_cum_scores, r.grad_cum_scores), tol);
  EXPECT_LT(rel_err(g.grad_transition, r.grad_transition), tol);
  EXPECT_LT(rel_err(g.grad_duration_bias, r.grad_duration_bias), tol);
  EXPECT_LT(rel_err(g.grad_start, r.grad_start), tol);
  EXPECT_LT(rel_err(g.grad_end, r.grad_end), tol);
  ASSERT_EQ(g.grad_onset.size(), r.grad_onset.size());
  EXPECT_LT(rel_err(g.grad_onset, r.grad_onset), tol);
  EXPECT_LT(rel_err(g.boundary_posteriors, r.boundary_posteriors), tol);
  EXPECT_LT(rel_err(g.viterbi_score, r.viterbi_score), 1e-10);
  expect_viterbi(p, g.segments, r.segments, r.viterbi_score);
  for (float v : g.grad_onset) ASSERT_TRUE(std::isfinite(v));
}

TEST(CudaOnset, MatchesBruteForceEnumeration) {
  SKIP_WITHOUT_GPU();
  auto gpu = make_backend(BackendKind::cuda);
  const double scale = 0.75;
  for (const Problem& pb : tiny_exact_problems({1, 2, 3, 5, 6}, {1, 2, 3}, {1, 2, 3}, 101, true)) {
    SCOPED_TRACE(::testing::Message() << "T=" << pb.dims.T << " C=" << pb.dims.C << " K=" << pb.dims.K);
    const Expected ex = brute_force(pb, scale);
    HostRunOptions opt;
    opt.scale = scale;
    opt.boundary_posteriors = true;
    const HostResult g = run_host(*gpu, pb.dims, pb.params(), pb.labels.data(), opt);
    EXPECT_LT(rel_err(g.log_z, ex.log_z), 1e-9);
    EXPECT_LT(rel_err(g.gold, ex.gold), 1e-9);
    EXPECT_LT(rel_err(g.grad_cum_scores, ex.g_cum), 1e-6);
    EXPECT_LT(rel_err(g.grad_transition, ex.g_A), 1e-6);
    EXPECT_LT(rel_err(g.grad_duration_bias, ex.g_D), 1e-6);
    EXPECT_LT(rel_err(g.grad_start, ex.g_s), 1e-6);
    EXPECT_LT(rel_err(g.grad_end, ex.g_e), 1e-6);
    EXPECT_LT(rel_err(g.grad_onset, ex.g_o), 1e-6);
    EXPECT_LT(rel_err(g.boundary_posteriors, ex.bpost), 1e-9);
    EXPECT_LT(rel_err(g.viterbi_score, ex.vscore), 1e-12);
    expect_viterbi(pb, g.segments, ex.vsegs, ex.vscore);
  }
}

Problem onset_problem(int64_t B, int64_t T, int64_t K, int64_t C, uint64_t seed) {
  Problem p = make_problem(B, T, K, C, seed);  // NaN padding in cum and labels -7
  add_onset(p, static_cast<uint32_t>(seed), 2.0, false, /*poison_padding=*/true);
  return p;
}

TEST(CudaOnset, AgreesWithReferenceOnBothRings) {
  SKIP_WITHOUT_GPU();
  auto ref = make_backend(BackendKind::reference);
  struct Cfg {
    int64_t B, T, K, C;
  };
  for (const char* ring : {"shared", "global"}) {
    setenv("TIMITSEG_CUDA_RING", ring, 1);
    auto gpu = make_backend(BackendKind::cuda);  // reads TIMITSEG_CUDA_RING when constructed
    uint64_t seed = 900;
    for (const Cfg& c : std::vector<Cfg>{{4, 60, 10, 7}, {8, 200, 30, 39}, {3, 40, 64, 33}, {2, 3, 9, 2}}) {
      SCOPED_TRACE(::testing::Message() << ring << " B=" << c.B << " T=" << c.T << " K=" << c.K << " C=" << c.C);
      const Problem p = onset_problem(c.B, c.T, c.K, c.C, ++seed);
      HostRunOptions opt;
      opt.boundary_posteriors = true;
      opt.scale = 1.0 / static_cast<double>(c.B);
      for (const bool labels : {true, false}) {
        const int32_t* lab = labels ? p.labels.data() : nullptr;
        const HostResult r = run_host(*ref, p.dims, p.params(), lab, opt);
        const HostResult g = run_host(*gpu, p.dims, p.params(), lab, opt);
        expect_matches(g, r, p, 1e-5);
      }
    }
  }
  unsetenv("TIMITSEG_CUDA_RING");
}

TEST(CudaOnset, MinusInfParameterEntries) {
  SKIP_WITHOUT_GPU();
  auto ref = make_backend(BackendKind::reference);
  auto gpu = make_backend(BackendKind::cuda);
  Problem p = onset_problem(3, 120, 12, 7, 950);
  // Forbid half of the transitions and durations the gold segmentation does not use.
  const int64_t T = p.dims.T, K = p.dims.K, C = p.dims.C;
  std::set<int64_t> usedA, usedD;
  for (int64_t b = 0; b < p.dims.B; ++b) {
    const std::vector<Segment> g = crf::gold_segments(p.labels.data() + b * T, p.lengths[b], K);
    for (size_t i = 0; i < g.size(); ++i) {
      usedD.insert((g[i].duration - 1) * C + g[i].label);
      if (i > 0) usedA.insert(g[i - 1].label * C + g[i].label);
    }
  }
  for (int64_t i = 0; i < C * C; i += 2)
    if (!usedA.count(i)) p.A[i] = kNegInfF;
  for (int64_t i = 1; i < K * C; i += 2)
    if (!usedD.count(i)) p.D[i] = kNegInfF;
  HostRunOptions opt;
  opt.boundary_posteriors = true;
  const HostResult r = run_host(*ref, p.dims, p.params(), p.labels.data(), opt);
  const HostResult g = run_host(*gpu, p.dims, p.params(), p.labels.data(), opt);
  expect_matches(g, r, p, 1e-5);
  for (size_t i = 0; i < p.A.size(); ++i)
    if (p.A[i] == kNegInfF) EXPECT_EQ(g.grad_transition[i], 0.0f);
}

template <class T>
bool bitwise_equal(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

TEST(CudaOnset, ZeroOnsetIsBitwiseNoOnsetAndRunsAreDeterministic) {
  SKIP_WITHOUT_GPU();
  auto gpu = make_backend(BackendKind::cuda);
  const Problem plain = make_problem(4, 150, 20, 39, 960);
  Problem zero = plain;
  zero.o.assign(4 * 150 * 39, 0.0f);
  HostRunOptions opt;
  opt.boundary_posteriors = true;
  const HostResult a = run_host(*gpu, plain.dims, plain.params(), plain.labels.data(), opt);
  const HostResult b = run_host(*gpu, zero.dims, zero.params(), zero.labels.data(), opt);
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
  const Problem p = onset_problem(4, 150, 20, 39, 961);
  const HostResult r1 = run_host(*gpu, p.dims, p.params(), p.labels.data(), opt);
  const HostResult r2 = run_host(*gpu, p.dims, p.params(), p.labels.data(), opt);
  EXPECT_TRUE(bitwise_equal(r1.grad_onset, r2.grad_onset));
  EXPECT_TRUE(bitwise_equal(r1.grad_duration_bias, r2.grad_duration_bias));
  EXPECT_TRUE(bitwise_equal(r1.log_z, r2.log_z));
}

TEST(CudaOnset, DeviceValidationNamesOnsetEntry) {
  SKIP_WITHOUT_GPU();
  auto gpu = make_backend(BackendKind::cuda);
  Problem p = make_problem(2, 6, 3, 3, 970);
  add_onset(p, 970);
  std::fill(p.o.begin() + (1 * 6 + p.lengths[1]) * 3, p.o.end(), std::numeric_limits<float>::quiet_NaN());
  const int64_t bad_t = p.lengths[1] - 1;
  p.o[(1 * 6 + bad_t) * 3 + 2] = std::numeric_limits<float>::infinity();
  DevProblem dp(p);
  Buffer on = to_device(p.o);
  Params q = dp.params();
  q.onset = on.as<float>();
  Session session(*gpu);
  Buffer lz(Memory::device, 2 * 8);
  try {
    session.log_partition(p.dims, q, lz.as<double>());
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "cuda backend: onset[1][" + std::to_string(bad_t) +
                                         "][2] = inf is not finite (every valid frame t < lengths[b] must be finite)");
  }
  // NaN on padding frames only: accepted.
  p.o[(1 * 6 + bad_t) * 3 + 2] = 0.5f;
  Buffer on2 = to_device(p.o);
  q.onset = on2.as<float>();
  EXPECT_NO_THROW(session.log_partition(p.dims, q, lz.as<double>()));
}

}  // namespace
}  // namespace timitseg::crf::testing
