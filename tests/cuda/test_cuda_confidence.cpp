// Confidence on the cuda backend (docs/crf.md "Confidence"): the constrained
// posteriors and the span marginals against brute-force enumeration and the
// float64 reference (1e-6 relative), mixed lengths and optional phones in a
// batch, a kept Session, the input checks. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "crf/backend.h"
#include "crf/backend_kind.h"
#include "crf/host_run.h"
#include "crf/session.h"
#include "tests/cuda/cuda_harness.h"
#include "tests/support/confidence_bruteforce.h"

namespace timitseg::crf::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

void expect_rel(const std::vector<double>& got, const std::vector<double>& want, double rtol, double atol,
                const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i])) {
      EXPECT_EQ(got[i], want[i]) << what << "[" << i << "]";
      continue;
    }
    if (!(std::fabs(got[i] - want[i]) <= rtol * std::fabs(want[i]) + atol)) {
      ADD_FAILURE() << what << "[" << i << "]: " << got[i] << " vs " << want[i];
      if (++bad > 10) return;
    }
  }
}

TEST(CudaConfidence, AlignPosteriorsAgainstEnumeration) {
  SKIP_WITHOUT_GPU();
  auto gpu = make_backend(timitseg::crf::BackendKind::cuda);
  std::mt19937 rng(341);
  for (bool onset : {false, true})
    for (const Problem& pb : tiny_exact_problems({1, 4, 7}, {2, 3}, {1, 3}, 600, onset)) {
      const int64_t N = 4;
      std::vector<int32_t> phones, nph;
      random_phones(rng, pb.dims.B, N, pb.dims.C, phones, nph);
      const std::vector<int32_t> opt = random_optional(rng, pb.dims.B, N, nph, 0.4);
      std::vector<int32_t> spans(pb.dims.B * N * 2, 0);
      for (int64_t b = 0; b < pb.dims.B; ++b)
        for (int64_t n = 0; n < nph[b]; ++n) {
          const int32_t s = std::uniform_int_distribution<int32_t>(0, pb.lengths[b])(rng);
          spans[(b * N + n) * 2] = s;
          spans[(b * N + n) * 2 + 1] = std::uniform_int_distribution<int32_t>(0, pb.lengths[b] - s)(rng);
        }
      const AlignPosteriorResult r =
          align_posteriors_host(*gpu, pb.dims, pb.params(), N, phones.data(), nph.data(), opt.data(), spans.data());
      for (int64_t b = 0; b < pb.dims.B; ++b) {
        const std::vector<int32_t> ph(phones.begin() + b * N, phones.begin() + b * N + nph[b]);
        const std::vector<int32_t> op(opt.begin() + b * N, opt.begin() + b * N + nph[b]);
        const std::vector<int32_t> sp(spans.begin() + b * N * 2, spans.begin() + b * N * 2 + 2 * nph[b]);
        const ExpectedPosteriors ex = brute_align_posteriors(pb, b, ph, op, sp);
        if (ex.log_z_c == -kInf) {
          EXPECT_EQ(r.log_z_c[b], -kInf);
        } else {
          EXPECT_NEAR(r.log_z_c[b], ex.log_z_c, 1e-9 * std::max(1.0, std::fabs(ex.log_z_c)));
        }
        for (int64_t i = 0; i < nph[b] * 3; ++i) EXPECT_NEAR(r.posterior[b * N * 3 + i], ex.out[i], 1e-9) << i;
      }
    }
}

// B = 6 of mixed lengths up to 300 frames, 39 labels, K = 30, 40 phones with
// optional ones, the aligned spans as queries: cuda against the reference.
TEST(CudaConfidence, AgainstReferenceMixedLengths) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(77);
  Problem pb = random_problem(Dims{6, 300, 30, 39}, 93, {300, 41, 177, 9, 250, 120});
  add_onset(pb, 94);
  const int64_t N = 40;
  std::vector<int32_t> phones, nph;
  random_phones(rng, pb.dims.B, N, pb.dims.C, phones, nph, 2);
  nph[3] = 20;  // more phones than frames (at most 10 of them optional, never two in a row): infeasible
  const std::vector<int32_t> opt = random_optional(rng, pb.dims.B, N, nph, 0.2);
  auto ref = make_backend(timitseg::crf::BackendKind::reference);
  auto cpu = make_backend(timitseg::crf::BackendKind::cpu);
  auto gpu = make_backend(timitseg::crf::BackendKind::cuda);
  const AlignResult al = align_host(*cpu, pb.dims, pb.params(), N, phones.data(), nph.data(), opt.data());
  const AlignPosteriorResult r =
      align_posteriors_host(*ref, pb.dims, pb.params(), N, phones.data(), nph.data(), opt.data(), al.spans.data());
  Session session(*gpu);
  const AlignPosteriorResult g =
      session.align_posteriors_host(pb.dims, pb.params(), N, phones.data(), nph.data(), opt.data(), al.spans.data());
  expect_rel(g.log_z_c, r.log_z_c, 1e-9, 0.0, "log_z_c");
  expect_rel(g.posterior, r.posterior, 1e-6, 1e-12, "posterior");
  EXPECT_EQ(g.log_z_c[3], -kInf);
  // A second call through the same session: the same bits.
  const AlignPosteriorResult g2 =
      session.align_posteriors_host(pb.dims, pb.params(), N, phones.data(), nph.data(), opt.data(), al.spans.data());
  EXPECT_EQ(g2.posterior, g.posterior);
  // Span marginals of the aligned phones (spans longer than K included).
  std::vector<int32_t> queries(pb.dims.B * N * 3, 0), nq(nph);
  nq[3] = 0;
  for (int64_t b = 0; b < pb.dims.B; ++b)
    for (int64_t n = 0; n < nq[b]; ++n) {
      queries[(b * N + n) * 3] = al.spans[(b * N + n) * 2];
      queries[(b * N + n) * 3 + 1] = al.spans[(b * N + n) * 2 + 1];
      queries[(b * N + n) * 3 + 2] = phones[b * N + n];
    }
  const SpanMarginalResult mr = span_marginals_host(*ref, pb.dims, pb.params(), N, queries.data(), nq.data());
  const SpanMarginalResult mg = session.span_marginals_host(pb.dims, pb.params(), N, queries.data(), nq.data());
  expect_rel(mg.marginal, mr.marginal, 1e-6, 1e-12, "span marginal");
  expect_rel(mg.log_z, mr.log_z, 1e-9, 0.0, "log_z");
}

TEST(CudaConfidence, SpanMarginalsAgainstEnumeration) {
  SKIP_WITHOUT_GPU();
  auto gpu = make_backend(timitseg::crf::BackendKind::cuda);
  for (const Problem& pb : tiny_exact_problems({1, 5}, {2, 3}, {1, 2}, 700, true)) {
    const int64_t B = pb.dims.B, C = pb.dims.C, T = pb.dims.T, Q = (T + 1) * (T + 1) * C;
    std::vector<int32_t> queries(B * Q * 3, 0), nq(B, 0);
    for (int64_t b = 0; b < B; ++b)
      for (int32_t s = 0; s <= pb.lengths[b]; ++s)
        for (int32_t r = 0; s + r <= pb.lengths[b]; ++r)
          for (int32_t c = 0; c < C; ++c) {
            int32_t* q = queries.data() + (b * Q + nq[b]++) * 3;
            q[0] = s, q[1] = r, q[2] = c;
          }
    const SpanMarginalResult r = span_marginals_host(*gpu, pb.dims, pb.params(), Q, queries.data(), nq.data());
    for (int64_t b = 0; b < B; ++b) {
      const std::vector<Path> paths = enumerate_paths(pb, b);
      std::vector<double> scores;
      for (const Path& p : paths) scores.push_back(p.score);
      const double lz = log_sum_exp_scores(scores);
      for (int64_t i = 0; i < nq[b]; ++i) {
        const int32_t* q = queries.data() + (b * Q + i) * 3;
        EXPECT_NEAR(r.marginal[b * Q + i], brute_span_marginal(pb, paths, lz, q[0], q[1], q[2]), 1e-9);
      }
    }
  }
}

TEST(CudaConfidence, BadQueriesAreOneClearError) {
  SKIP_WITHOUT_GPU();
  const Problem pb = random_problem(Dims{1, 6, 2, 3}, 5, {6});
  auto gpu = make_backend(timitseg::crf::BackendKind::cuda);
  const std::vector<int32_t> phones{0, 1}, nph{2}, spans{0, 3, 4, 3};
  try {
    Session s(*gpu);
    // The session checks on the host first; the device check (span_validate_kernel) has the same words.
    s.align_posteriors_host(pb.dims, pb.params(), 2, phones.data(), nph.data(), nullptr, spans.data());
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("spans[0][1] = (4, 3) is not a span"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace timitseg::crf::testing
