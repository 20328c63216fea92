// The transcript NLL on the cuda backend (docs/crf.md "Training from
// transcripts"): log Z, log Z_c and every gradient against brute-force
// enumeration on tiny problems and against the float64 reference on random
// ones (onset, K = 1, padding, optional phones, repeated labels), a second
// run bitwise equal, the infeasible utterance's error; phone graphs (several
// pronunciations of a word) alike. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "crf/backend.h"
#include "crf/backend_kind.h"
#include "crf/host_run.h"
#include "crf/session.h"
#include "tests/cuda/cuda_harness.h"
#include "tests/support/phone_graph_problems.h"
#include "tests/support/transcript_bruteforce.h"

namespace timitseg::crf::testing {
namespace {

template <class A, class B>
void expect_near_all(const std::vector<A>& got, const std::vector<B>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double x = static_cast<double>(got[i]), y = static_cast<double>(want[i]);
    if (!(std::fabs(x - y) <= tol * (1.0 + std::fabs(y)))) {
      ADD_FAILURE() << what << "[" << i << "]: " << x << " vs " << y;
      if (++bad > 10) return;
    }
  }
}

struct Tr {
  int64_t N;
  std::vector<int32_t> phones, nph, opt;
};

Tr transcript_for(const Problem& pb, int64_t N, uint32_t seed, double p_opt) {
  std::mt19937 rng(seed);
  Tr t{N, {}, {}, {}};
  random_phones(rng, pb.dims.B, N, pb.dims.C, t.phones, t.nph);
  for (int64_t b = 0; b < pb.dims.B; ++b) t.nph[b] = std::max<int32_t>(1, std::min<int32_t>(t.nph[b], pb.lengths[b]));
  if (p_opt > 0) t.opt = random_optional(rng, pb.dims.B, N, t.nph, p_opt);
  return t;
}

TranscriptResult run_on(Backend& be, const Problem& pb, const Tr& t, double scale) {
  return transcript_host(be, pb.dims, pb.params(), t.N, t.phones.data(), t.nph.data(),
                         t.opt.empty() ? nullptr : t.opt.data(), scale);
}

// Every output against the brute-force oracle (log Z, log Z_c within 1e-9, gradients within 1e-5).
void expect_near_oracle(const TranscriptResult& r, const TranscriptExpected& ex, bool onset, const std::string& what) {
  expect_near_all(r.log_z, ex.log_z, 1e-9, what + " log_z");
  expect_near_all(r.log_z_c, ex.log_z_c, 1e-9, what + " log_z_c");
  expect_near_all(r.grad_cum_scores, ex.g_cum, 1e-5, what + " grad cum");
  expect_near_all(r.grad_transition, ex.g_A, 1e-5, what + " grad A");
  expect_near_all(r.grad_duration_bias, ex.g_D, 1e-5, what + " grad D");
  expect_near_all(r.grad_start, ex.g_s, 1e-5, what + " grad start");
  expect_near_all(r.grad_end, ex.g_e, 1e-5, what + " grad end");
  if (onset) expect_near_all(r.grad_onset, ex.g_o, 1e-5, what + " grad onset");
}

// Every output against the reference backend's (log Z, log Z_c within 1e-9, gradients within tol),
// then a second cuda run bitwise equal.
void expect_near_reference(const TranscriptResult& got, const TranscriptResult& want, const TranscriptResult& again,
                           bool onset, double tol, const std::string& what) {
  expect_near_all(got.log_z, want.log_z, 1e-9, what + " log_z");
  expect_near_all(got.log_z_c, want.log_z_c, 1e-9, what + " log_z_c");
  expect_near_all(got.grad_cum_scores, want.grad_cum_scores, tol, what + " grad cum");
  expect_near_all(got.grad_transition, want.grad_transition, tol, what + " grad A");
  expect_near_all(got.grad_duration_bias, want.grad_duration_bias, tol, what + " grad D");
  expect_near_all(got.grad_start, want.grad_start, tol, what + " grad start");
  expect_near_all(got.grad_end, want.grad_end, tol, what + " grad end");
  if (onset) expect_near_all(got.grad_onset, want.grad_onset, tol, what + " grad onset");
  EXPECT_EQ(again.log_z_c, got.log_z_c) << what;
  EXPECT_EQ(again.grad_cum_scores, got.grad_cum_scores) << what;
  EXPECT_EQ(again.grad_transition, got.grad_transition) << what;
}

TEST(CudaTranscript, AgainstEnumeration) {
  SKIP_WITHOUT_GPU();
  auto gpu = make_backend(BackendKind::cuda);
  int cases = 0;
  for (bool onset : {false, true})
    for (const Problem& pb : tiny_exact_problems({1, 4, 6}, {1, 2, 3}, {1, 2, 7}, 1300 + (onset ? 50 : 0), onset))
      for (double p_opt : {0.0, 0.4}) {
        const Tr t = transcript_for(pb, 3, 11 * cases + 1, p_opt);
        const TranscriptExpected ex = transcript_brute_force(pb, t.N, t.phones, t.nph, t.opt, 0.5);
        expect_near_oracle(run_on(*gpu, pb, t, 0.5), ex, onset, "case " + std::to_string(cases));
        ++cases;
      }
  EXPECT_EQ(cases, 2 * 3 * 3 * 3 * 2 * 2);
}

TEST(CudaTranscript, AgainstReferenceAndBitwiseRepeatable) {
  SKIP_WITHOUT_GPU();
  auto gpu = make_backend(BackendKind::cuda);
  auto ref = make_backend(BackendKind::reference);
  for (uint32_t seed : {21u, 22u, 23u, 24u}) {
    const int64_t K = seed == 22 ? 1 : 6;
    Problem pb = random_problem(Dims{5, 50, K, 5}, seed, {50, 33, 9, 50, 21});
    if (seed != 23) add_onset(pb, seed, 0.5);
    const Tr t = transcript_for(pb, 14, seed + 7, seed == 24 ? 0.0 : 0.3);
    const TranscriptResult want = run_on(*ref, pb, t, 0.2);
    const TranscriptResult got = run_on(*gpu, pb, t, 0.2);
    expect_near_reference(got, want, run_on(*gpu, pb, t, 0.2), !pb.o.empty(), 2e-6, "seed " + std::to_string(seed));
  }
}

TEST(CudaTranscript, InfeasibleUtteranceThrowsNamingIt) {
  SKIP_WITHOUT_GPU();
  auto gpu = make_backend(BackendKind::cuda);
  const Problem pb = random_problem(Dims{3, 5, 2, 3}, 8, {5, 2, 5});
  const Tr t{3, {0, 1, 2, 0, 1, 2, 0, 1, 2}, {3, 3, 3}, {}};
  try {
    run_on(*gpu, pb, t, 1.0);
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("utterance 1: no alignment of its transcript"), std::string::npos) << e.what();
  }
}

// Phone graphs (several pronunciations of a word, docs/crf.md "Alternative
// pronunciations: the phone graph"): against enumeration of every path and
// alignment on tiny problems, against the reference on larger ones (phones
// longer than K, onset, padding), and bitwise repeatable.
TranscriptResult run_graph(Backend& be, const Problem& pb, const Graph& g, double scale) {
  return transcript_host(be, pb.dims, pb.params(), g.N, g.phones.data(), g.num_phones.data(), nullptr, scale,
                         g.links.data());
}

TEST(CudaTranscript, PhoneGraphAgainstEnumeration) {
  SKIP_WITHOUT_GPU();
  auto gpu = make_backend(BackendKind::cuda);
  int cases = 0;
  for (bool onset : {false, true})
    for (const Problem& pb : tiny_exact_problems({2, 4, 6}, {1, 2, 3}, {1, 2, 7}, 2300 + (onset ? 50 : 0), onset))
      for (double p_sil : {0.0, 0.6}) {
        const Graph g = random_graph(pb, 9, 13 * cases + 3, p_sil);
        const TranscriptExpected ex = transcript_brute_force(pb, g.N, g.phones, g.num_phones, {}, 0.5, g.links);
        expect_near_oracle(run_graph(*gpu, pb, g, 0.5), ex, onset, "graph case " + std::to_string(cases));
        ++cases;
      }
  EXPECT_EQ(cases, 2 * 3 * 3 * 3 * 2 * 2);
}

TEST(CudaTranscript, PhoneGraphAgainstReferenceAndBitwiseRepeatable) {
  SKIP_WITHOUT_GPU();
  auto gpu = make_backend(BackendKind::cuda);
  auto ref = make_backend(BackendKind::reference);
  for (uint32_t seed : {71u, 72u}) {
    Problem pb = random_problem(Dims{3, 40, 4, 5}, seed, {40, 33, 19});
    if (seed == 72) add_onset(pb, seed, 0.5);
    const Graph g = random_graph(pb, 14, seed + 5, 0.7);
    const TranscriptResult want = run_graph(*ref, pb, g, 0.25);
    const TranscriptResult got = run_graph(*gpu, pb, g, 0.25);
    expect_near_reference(got, want, run_graph(*gpu, pb, g, 0.25), !pb.o.empty(), 1e-5,
                          "graph seed " + std::to_string(seed));
  }
}

}  // namespace
}  // namespace timitseg::crf::testing
