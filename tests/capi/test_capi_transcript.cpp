// timitseg_crf_transcript_nll (docs/crf.md "Training from transcripts"): F64
// scores bit for bit the reference's float64 transcript_backward_f64 on the
// double centered cumsum; F32 cumulative scores against brute-force
// enumeration of the alignments; a row of length 0, the phone checks and an
// infeasible utterance's error; timitseg_crf_transcript_graph_nll over a phone graph.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "crf/cumsum.h"
#include "crf/phone_graph.h"
#include "crf/reference/reference.h"
#include "tests/capi/capi_helpers.h"
#include "tests/support/transcript_bruteforce.h"

namespace {

using namespace timitseg::capi::testing;
namespace crf = timitseg::crf;

timitseg_crf* handle64(int backend, int C, int K, std::vector<double>& A, std::vector<double>& D,
                       std::vector<double>& s, std::vector<double>& e) {
  timitseg_crf_params prm = timitseg_crf_default_params();
  prm.num_labels = C;
  prm.max_duration = K;
  prm.backend = backend;
  prm.threads = 1;
  timitseg_crf* h = nullptr;
  if (timitseg_crf_create(&prm, &h) != TIMITSEG_OK) return nullptr;
  timitseg_tensor tA = f64(A, {C, C}), tD = f64(D, {K, C}), ts = f64(s, {C}), te = f64(e, {C});
  EXPECT_EQ(timitseg_crf_set_param(h, "transition", &tA), TIMITSEG_OK);
  EXPECT_EQ(timitseg_crf_set_param(h, "duration_bias", &tD), TIMITSEG_OK);
  EXPECT_EQ(timitseg_crf_set_param(h, "start", &ts), TIMITSEG_OK);
  EXPECT_EQ(timitseg_crf_set_param(h, "end", &te), TIMITSEG_OK);
  return h;
}

TEST(CapiTranscript, Float64IsTheReferenceFunctionBitwise) {
  const int B = 2, T = 7, C = 3, K = 3, N = 4;
  std::mt19937 rng(5);
  std::normal_distribution<double> n(0.0, 0.7);
  auto fill = [&](size_t size) {
    std::vector<double> v(size);
    for (double& x : v) x = n(rng) + 1e-9 / 3.0;
    return v;
  };
  std::vector<double> x = fill(B * T * C), A = fill(C * C), D = fill(K * C), s = fill(C), e = fill(C);
  std::vector<int32_t> len{7, 5}, phones{0, 2, 1, 2, 1, 0, 2, 0}, nph{4, 3}, opt{0, 1, 0, 0, 0, 0, 1, 0};
  std::vector<double> cum(B * (T + 1) * C);
  crf::centered_cumsum_forward<double>(B, T, C, x.data(), len.data(), cum.data());
  const crf::reference::ParamsF64 rp{cum.data(), A.data(), D.data(), s.data(), e.data(), len.data(), nullptr};
  std::vector<double> lz(B), lzc(B), gcum(cum.size()), gA(C * C), gD(K * C), gs(C), ge(C);
  crf::reference::transcript_backward_f64(crf::Dims{B, T, K, C}, rp, N, phones.data(), nph.data(), opt.data(), nullptr, 0.5,
                                          lz.data(), lzc.data(),
                                          crf::reference::GradsF64{gcum.data(), gA.data(), gD.data(), gs.data(),
                                                                   ge.data(), nullptr});
  std::vector<double> gx(x.size());
  crf::centered_cumsum_backward<double>(B, T, C, gcum.data(), len.data(), gx.data());
  for (int backend : {TIMITSEG_BACKEND_REFERENCE, TIMITSEG_BACKEND_CPU}) {
    timitseg_crf* h = handle64(backend, C, K, A, D, s, e);
    ASSERT_NE(h, nullptr);
    timitseg_crf_batch b{};
    b.scores = f64(x, {B, T, C});
    b.lengths = i32(len, {B});
    std::vector<double> nll(B), ox(x.size()), oA(C * C), oD(K * C), os(C), oe(C);
    timitseg_tensor tn = f64(nll, {B}), tp = i32(phones, {B, N}), tnp = i32(nph, {B}), to = i32(opt, {B, N});
    timitseg_crf_grads gr{};
    gr.scores = f64(ox, {B, T, C});
    gr.transition = f64(oA, {C, C});
    gr.duration_bias = f64(oD, {K, C});
    gr.start = f64(os, {C});
    gr.end = f64(oe, {C});
    ASSERT_EQ(timitseg_crf_transcript_nll(h, &b, &tp, &tnp, &to, 0.5, &tn, &gr), TIMITSEG_OK) << timitseg_last_error();
    for (int i = 0; i < B; ++i) EXPECT_EQ(nll[i], lz[i] - lzc[i]) << i;
    EXPECT_EQ(ox, gx);
    EXPECT_EQ(oA, gA);
    EXPECT_EQ(oD, gD);
    EXPECT_EQ(os, gs);
    EXPECT_EQ(oe, ge);
    timitseg_crf_free(h);
  }
}

TEST(CapiTranscript, Float32CumulativeMatchesBruteForce) {
  for (int backend : {TIMITSEG_BACKEND_REFERENCE, TIMITSEG_BACKEND_CPU}) {
    crf::testing::Problem pb = crf::testing::random_problem(crf::Dims{2, 5, 2, 3}, 31, {5, 3});
    const int64_t B = 2, T = 5, C = 3, K = 2, N = 3;
    std::vector<int32_t> phones{1, 0, 2, 2, 1, 0}, nph{3, 2}, len = pb.lengths;
    const crf::testing::TranscriptExpected ex = crf::testing::transcript_brute_force(pb, N, phones, nph, {}, 1.0);
    timitseg_crf* h = make_crf(backend, C, K, pb.A, pb.D, pb.s, pb.e);
    ASSERT_NE(h, nullptr);
    timitseg_crf_batch b{};
    std::vector<float> cum = pb.cum;
    b.scores = f32(cum, {B, T + 1, C});
    b.cumulative = 1;
    b.lengths = i32(len, {B});
    std::vector<float> nll(B), gc(cum.size()), gA(C * C);
    timitseg_tensor tn = f32(nll, {B}), tp = i32(phones, {B, N}), tnp = i32(nph, {B});
    timitseg_crf_grads gr{};
    gr.scores = f32(gc, {B, T + 1, C});
    gr.transition = f32(gA, {C, C});
    ASSERT_EQ(timitseg_crf_transcript_nll(h, &b, &tp, &tnp, nullptr, 1.0, &tn, &gr), TIMITSEG_OK)
        << timitseg_last_error();
    for (int i = 0; i < B; ++i) EXPECT_NEAR(nll[i], ex.log_z[i] - ex.log_z_c[i], 1e-5) << i;
    for (size_t i = 0; i < gA.size(); ++i) EXPECT_NEAR(gA[i], ex.g_A[i], 1e-5) << i;
    for (int64_t bb = 0; bb < B; ++bb)  // row 0 of each utterance is ignored (taken as 0)
      for (int64_t i = C; i < (len[bb] + 1) * C; ++i)
        EXPECT_NEAR(gc[bb * (T + 1) * C + i], ex.g_cum[bb * (T + 1) * C + i], 1e-5) << bb << " " << i;
    timitseg_crf_free(h);
  }
}

// timitseg_crf_transcript_graph_nll: F32 cumulative scores against brute-force
// enumeration of every path of the graph and every alignment (both host
// backends); F64 bit for bit the reference's transcript_backward_f64 with the
// same links; a bit before phone 0 and missing links are argument errors.
TEST(CapiTranscript, PhoneGraphMatchesBruteForceAndTheReference) {
  const int64_t B = 2, T = 6, C = 3, K = 2, N = 5;
  // row 0: {0 | 1 2} then 0 (two pronunciations of a word, then one); row 1: {2 | 1}
  std::vector<int32_t> phones{0, 1, 2, 0, 0, 2, 1, 0, 0, 0}, nph{4, 2};
  const int32_t S = crf::kLinkStart, E = crf::kLinkEnd;
  std::vector<int32_t> links{S, S, 1, 1 << 0 | 1 << 2 | E, 0, S | E, S | E, 0, 0, 0};
  crf::testing::Problem pb = crf::testing::random_problem(crf::Dims{B, T, K, C}, 41, {6, 4});
  const crf::testing::TranscriptExpected ex =
      crf::testing::transcript_brute_force(pb, N, phones, nph, {}, 1.0, links);
  for (int backend : {TIMITSEG_BACKEND_REFERENCE, TIMITSEG_BACKEND_CPU}) {
    timitseg_crf* h = make_crf(backend, C, K, pb.A, pb.D, pb.s, pb.e);
    ASSERT_NE(h, nullptr);
    timitseg_crf_batch b{};
    std::vector<float> cum = pb.cum;
    std::vector<int32_t> len = pb.lengths;
    b.scores = f32(cum, {B, T + 1, C});
    b.cumulative = 1;
    b.lengths = i32(len, {B});
    std::vector<float> nll(B), gA(C * C);
    timitseg_tensor tn = f32(nll, {B}), tp = i32(phones, {B, N}), tnp = i32(nph, {B}), tl = i32(links, {B, N});
    timitseg_crf_grads gr{};
    gr.transition = f32(gA, {C, C});
    ASSERT_EQ(timitseg_crf_transcript_graph_nll(h, &b, &tp, &tnp, &tl, 1.0, &tn, &gr), TIMITSEG_OK)
        << timitseg_last_error();
    for (int i = 0; i < B; ++i) EXPECT_NEAR(nll[i], ex.log_z[i] - ex.log_z_c[i], 1e-5) << i;
    for (size_t i = 0; i < gA.size(); ++i) EXPECT_NEAR(gA[i], ex.g_A[i], 1e-5) << i;
    std::vector<int32_t> bad = links;
    bad[2] = 1 << 3;  // phone 2 would follow phone -2
    timitseg_tensor tb = i32(bad, {B, N});
    EXPECT_EQ(timitseg_crf_transcript_graph_nll(h, &b, &tp, &tnp, &tb, 1.0, &tn, nullptr), TIMITSEG_ERR_ARGUMENT);
    EXPECT_NE(std::string(timitseg_last_error()).find("before phone 0"), std::string::npos) << timitseg_last_error();
    EXPECT_EQ(timitseg_crf_transcript_graph_nll(h, &b, &tp, &tnp, nullptr, 1.0, &tn, nullptr), TIMITSEG_ERR_ARGUMENT);
    timitseg_crf_free(h);
  }
  // float64: the reference function with the same links, bit for bit
  std::mt19937 rng(9);
  std::normal_distribution<double> n(0.0, 0.7);
  auto fill = [&](size_t size) {
    std::vector<double> v(size);
    for (double& x : v) x = n(rng);
    return v;
  };
  std::vector<double> x = fill(B * T * C), A = fill(C * C), D = fill(K * C), s = fill(C), e = fill(C);
  std::vector<int32_t> len{6, 4};
  std::vector<double> cum(B * (T + 1) * C);
  crf::centered_cumsum_forward<double>(B, T, C, x.data(), len.data(), cum.data());
  const crf::reference::ParamsF64 rp{cum.data(), A.data(), D.data(), s.data(), e.data(), len.data(), nullptr};
  std::vector<double> lz(B), lzc(B);
  crf::reference::transcript_backward_f64(crf::Dims{B, T, K, C}, rp, N, phones.data(), nph.data(), nullptr,
                                          links.data(), 1.0, lz.data(), lzc.data(), crf::reference::GradsF64{});
  timitseg_crf* h = handle64(TIMITSEG_BACKEND_REFERENCE, C, K, A, D, s, e);
  ASSERT_NE(h, nullptr);
  timitseg_crf_batch b{};
  b.scores = f64(x, {B, T, C});
  b.lengths = i32(len, {B});
  std::vector<double> nll(B);
  timitseg_tensor tn = f64(nll, {B}), tp = i32(phones, {B, N}), tnp = i32(nph, {B}), tl = i32(links, {B, N});
  ASSERT_EQ(timitseg_crf_transcript_graph_nll(h, &b, &tp, &tnp, &tl, 1.0, &tn, nullptr), TIMITSEG_OK)
      << timitseg_last_error();
  for (int i = 0; i < B; ++i) EXPECT_EQ(nll[i], lz[i] - lzc[i]) << i;
  timitseg_crf_free(h);
}

TEST(CapiTranscript, LengthZeroRowsPhoneChecksAndInfeasible) {
  std::vector<float> A(4, 0.1f), D(4, 0.0f), x(2 * 3 * 2, 0.25f), nll(2, -1.0f);
  timitseg_crf* h = make_crf(TIMITSEG_BACKEND_CPU, 2, 2, A, D);
  ASSERT_NE(h, nullptr);
  std::vector<int32_t> len{3, 0}, phones{0, 1, 0, 0}, nph{2, 0};
  timitseg_crf_batch b{};
  b.scores = f32(x, {2, 3, 2});
  b.lengths = i32(len, {2});
  timitseg_tensor tn = f32(nll, {2}), tp = i32(phones, {2, 2}), tnp = i32(nph, {2});
  ASSERT_EQ(timitseg_crf_transcript_nll(h, &b, &tp, &tnp, nullptr, 1.0, &tn, nullptr), TIMITSEG_OK)
      << timitseg_last_error();
  EXPECT_GT(nll[0], 0.0f);
  EXPECT_EQ(nll[1], 0.0f);
  nph = {2, 1};  // a phone for the empty row
  EXPECT_EQ(timitseg_crf_transcript_nll(h, &b, &tp, &tnp, nullptr, 1.0, &tn, nullptr), TIMITSEG_ERR_LENGTH);
  EXPECT_NE(std::string(timitseg_last_error()).find("num_phones[1] = 1"), std::string::npos) << timitseg_last_error();
  nph = {2, 0};
  phones[1] = 5;
  EXPECT_EQ(timitseg_crf_transcript_nll(h, &b, &tp, &tnp, nullptr, 1.0, &tn, nullptr), TIMITSEG_ERR_ARGUMENT);
  len = {1, 0};  // two phones in one frame
  phones[1] = 1;
  EXPECT_EQ(timitseg_crf_transcript_nll(h, &b, &tp, &tnp, nullptr, 1.0, &tn, nullptr), TIMITSEG_ERR_RUNTIME);
  EXPECT_NE(std::string(timitseg_last_error()).find("utterance 0"), std::string::npos) << timitseg_last_error();
  timitseg_crf_free(h);
}

}  // namespace
