// The cuda backend against the project's float64 reference backend
// (crf/reference/), both driven through the host runner run_host() exactly as
// `crf replay` and training drive them.
#include <gtest/gtest.h>

#include <map>

#include "crf/backend.h"
#include "crf/backend_kind.h"
#include "crf/host_run.h"
#include "tests/cuda/cuda_harness.h"
#include "tests/cuda/oracle.h"

namespace timitseg::crf::testing {
namespace {

TEST(CudaVsReference, RunHostAgreement) {
  SKIP_WITHOUT_GPU();
  auto ref = make_backend(BackendKind::reference);
  auto gpu = make_backend(BackendKind::cuda);
  struct Cfg {
    int64_t B, T, K, C;
  };
  uint64_t seed = 500;
  for (const Cfg& c : std::vector<Cfg>{{4, 60, 10, 7}, {8, 200, 30, 39}, {3, 40, 64, 33}, {2, 3, 9, 2}}) {
    SCOPED_TRACE(::testing::Message() << "B=" << c.B << " T=" << c.T << " K=" << c.K << " C=" << c.C);
    Problem p = make_problem(c.B, c.T, c.K, c.C, ++seed);
    Params hp;
    hp.cum_scores = p.cum.data();
    hp.transition = p.A.data();
    hp.duration_bias = p.D.data();
    hp.start = p.s.data();
    hp.end = p.e.data();
    hp.lengths = p.lengths.data();
    HostRunOptions opt;
    opt.boundary_posteriors = true;
    opt.scale = 1.0 / static_cast<double>(c.B);
    const HostResult r = run_host(*ref, p.dims, hp, p.labels.data(), opt);
    const HostResult g = run_host(*gpu, p.dims, hp, p.labels.data(), opt);
    const double tol = 1e-5;
    EXPECT_LT(rel_err(g.log_z, r.log_z), tol);
    EXPECT_LT(rel_err(g.gold, r.gold), 1e-9);
    EXPECT_LT(rel_err(g.grad_cum_scores, r.grad_cum_scores), tol);
    EXPECT_LT(rel_err(g.grad_transition, r.grad_transition), tol);
    EXPECT_LT(rel_err(g.grad_duration_bias, r.grad_duration_bias), tol);
    EXPECT_LT(rel_err(g.grad_start, r.grad_start), tol);
    EXPECT_LT(rel_err(g.grad_end, r.grad_end), tol);
    EXPECT_LT(rel_err(g.boundary_posteriors, r.boundary_posteriors), tol);
    EXPECT_LT(rel_err(g.viterbi_score, r.viterbi_score), 1e-10);
    // Segments identical up to genuine ties (then the cuda path scores the optimum).
    std::map<int, std::vector<Seg>> gs, rs;
    for (const Segment& s : g.segments) gs[s.batch].push_back({s.start, s.duration, s.label});
    for (const Segment& s : r.segments) rs[s.batch].push_back({s.start, s.duration, s.label});
    for (int64_t b = 0; b < c.B; ++b) {
      if (gs[b] == rs[b]) continue;
      EXPECT_NEAR(score_of(p, b, gs[b]), r.viterbi_score[b], 1e-10 * std::max(1.0, std::abs(r.viterbi_score[b])))
          << "utterance " << b;
    }
  }
}

}  // namespace
}  // namespace timitseg::crf::testing
