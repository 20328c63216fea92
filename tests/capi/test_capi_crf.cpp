// The CRF calls of the C API (include/timitseg.h) against the float64
// brute-force oracle (tests/support/crf_bruteforce.h) and the backends used
// directly, on the reference and cpu backends.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "crf/backend.h"
#include "crf/backend_kind.h"
#include "crf/cumsum.h"
#include "crf/host_run.h"
#include "crf/segments.h"
#include "tests/capi/capi_helpers.h"
#include "tests/crf/helpers.h"
#include "tests/support/crf_bruteforce.h"

using namespace timitseg::capi::testing;
using timitseg::crf::Dims;
using timitseg::crf::Segment;
namespace tc = timitseg::crf::testing;

namespace {

struct Outputs {
  std::vector<double> nll, log_z, vscore, bpost;
  std::vector<float> g_cum, g_A, g_D, g_s, g_e;
  std::vector<int32_t> segs, nsegs;
};

// Every call of the handle on a Problem's cum_scores (cumulative = 1) and labels.
Outputs run_all(timitseg_crf* h, tc::Problem& pb) {
  const int64_t B = pb.dims.B, T = pb.dims.T, K = pb.dims.K, C = pb.dims.C;
  Outputs o;
  o.nll.resize(B), o.log_z.resize(B), o.vscore.resize(B), o.bpost.resize(B * (T + 1));
  o.g_cum.resize(B * (T + 1) * C), o.g_A.resize(C * C), o.g_D.resize(K * C), o.g_s.resize(C), o.g_e.resize(C);
  o.segs.resize(B * T * 3), o.nsegs.resize(B);
  timitseg_crf_batch in{};
  in.scores = f32(pb.cum, {B, T + 1, C});
  in.cumulative = 1;
  in.lengths = i32(pb.lengths, {B});
  timitseg_crf_gold gold{};
  gold.labels = i32(pb.labels, {B, T});
  timitseg_crf_grads g{};
  g.scores = f32(o.g_cum, {B, T + 1, C});
  g.transition = f32(o.g_A, {C, C});
  g.duration_bias = f32(o.g_D, {K, C});
  g.start = f32(o.g_s, {C});
  g.end = f32(o.g_e, {C});
  timitseg_tensor nll = f64(o.nll, {B}), lz = f64(o.log_z, {B}), vs = f64(o.vscore, {B}),
                  bp = f64(o.bpost, {B, T + 1}), sg = i32(o.segs, {B, T, 3}), ns = i32(o.nsegs, {B});
  EXPECT_EQ(timitseg_crf_nll(h, &in, &gold, 1.0, &nll, &g), TIMITSEG_OK) << timitseg_last_error();
  EXPECT_EQ(timitseg_crf_log_partition(h, &in, &lz), TIMITSEG_OK) << timitseg_last_error();
  EXPECT_EQ(timitseg_crf_viterbi(h, &in, &vs, &sg, &ns), TIMITSEG_OK) << timitseg_last_error();
  EXPECT_EQ(timitseg_crf_marginals(h, &in, &bp, nullptr), TIMITSEG_OK) << timitseg_last_error();
  return o;
}

timitseg_crf* handle_for(int backend, const tc::Problem& pb) {
  return make_crf(backend, static_cast<int>(pb.dims.C), static_cast<int>(pb.dims.K), pb.A, pb.D, pb.s, pb.e);
}

}  // namespace

TEST(CapiCrf, VersionAndBackends) {
  EXPECT_EQ(timitseg_api_version(), TIMITSEG_API_VERSION);
  EXPECT_NE(std::string(timitseg_version_string()).find('.'), std::string::npos);
  tc::Problem pb = tc::random_problem(Dims{1, 3, 2, 2}, 1);
  for (auto [b, name] : {std::pair{TIMITSEG_BACKEND_REFERENCE, "reference"}, std::pair{TIMITSEG_BACKEND_CPU, "cpu"}}) {
    timitseg_crf* h = handle_for(b, pb);
    ASSERT_NE(h, nullptr) << timitseg_last_error();
    EXPECT_EQ(std::string(timitseg_crf_backend_name(h)), name);
    timitseg_crf_free(h);
  }
}

TEST(CapiCrf, EveryCallMatchesBruteForce) {
  for (tc::Problem pb : tc::tiny_exact_problems({1, 2, 4}, {1, 3}, {1, 2, 3}, 700)) {
    const tc::Expected ex = tc::brute_force(pb, 1.0);
    for (int backend : {TIMITSEG_BACKEND_REFERENCE, TIMITSEG_BACKEND_CPU}) {
      timitseg_crf* h = handle_for(backend, pb);
      ASSERT_NE(h, nullptr) << timitseg_last_error();
      const Outputs o = run_all(h, pb);
      const std::string at = std::string(timitseg_crf_backend_name(h)) + " T=" + std::to_string(pb.dims.T) +
                             " C=" + std::to_string(pb.dims.C) + " K=" + std::to_string(pb.dims.K);
      std::vector<double> nll;
      for (size_t b = 0; b < ex.log_z.size(); ++b) nll.push_back(ex.log_z[b] - ex.gold[b]);
      tc::expect_close(o.nll, nll, 1e-5, 1e-5, at + " nll");
      tc::expect_close(o.log_z, ex.log_z, 1e-6, 1e-6, at + " log_z");
      tc::expect_close(o.vscore, ex.vscore, 0, 1e-9, at + " viterbi score");
      tc::expect_close(o.bpost, ex.bpost, 1e-5, 1e-6, at + " boundaries");
      std::vector<double> g_cum(ex.g_cum);
      for (int64_t b = 0; b < pb.dims.B; ++b)  // row 0 (the constant cum[0]) and padding rows are not compared
        for (int64_t t = 0; t <= pb.dims.T; ++t)
          if (t == 0 || t > pb.lengths[b])
            for (int64_t c = 0; c < pb.dims.C; ++c) g_cum[(b * (pb.dims.T + 1) + t) * pb.dims.C + c] = NAN;
      for (size_t i = 0; i < g_cum.size(); ++i)
        if (!std::isnan(g_cum[i])) EXPECT_NEAR(o.g_cum[i], g_cum[i], 1e-5) << at << " grad scores " << i;
      tc::expect_close(o.g_A, ex.g_A, 1e-4, 1e-5, at + " grad transition");
      tc::expect_close(o.g_D, ex.g_D, 1e-4, 1e-5, at + " grad duration_bias");
      tc::expect_close(o.g_s, ex.g_s, 1e-4, 1e-5, at + " grad start");
      tc::expect_close(o.g_e, ex.g_e, 1e-4, 1e-5, at + " grad end");
      std::vector<Segment> segs;
      for (int64_t b = 0; b < pb.dims.B; ++b)
        for (int32_t i = 0; i < o.nsegs[b]; ++i) {
          const int32_t* r = o.segs.data() + (b * pb.dims.T + i) * 3;
          segs.push_back(Segment{static_cast<int32_t>(b), r[0], r[1], r[2]});
        }
      EXPECT_EQ(segs, ex.vsegs) << at;
      timitseg_crf_free(h);
    }
  }
}

// Frame scores x [B][T][C] (cumulative = 0) give what the project's centered
// cumsum + the backend give, to the last bit, and the gradient of x is the
// cumsum's backward of the backend's.
TEST(CapiCrf, FrameScoresAreCenteredAndSummedBitwiseAsTheApp) {
  const Dims d{3, 7, 3, 4};
  tc::Problem pb = tc::random_problem(d, 11, {7, 2, 5});
  std::vector<float> x(d.B * d.T * d.C);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * i) * 2.0f;
  timitseg::crf::centered_cumsum_forward<float>(d.B, d.T, d.C, x.data(), pb.lengths.data(), pb.cum.data());
  auto be = timitseg::crf::make_backend(timitseg::crf::BackendKind::cpu);
  const timitseg::crf::HostResult r = timitseg::crf::run_host(*be, d, pb.params(), pb.labels.data());
  std::vector<float> want_gx(x.size());
  timitseg::crf::centered_cumsum_backward<float>(d.B, d.T, d.C, r.grad_cum_scores.data(), pb.lengths.data(), want_gx.data());

  timitseg_crf* h = handle_for(TIMITSEG_BACKEND_CPU, pb);
  std::vector<double> nll(d.B);
  std::vector<float> gx(x.size());
  timitseg_crf_batch in{};
  in.scores = f32(x, {d.B, d.T, d.C});
  in.lengths = i32(pb.lengths, {d.B});
  timitseg_crf_gold gold{};
  gold.labels = i32(pb.labels, {d.B, d.T});
  timitseg_crf_grads g{};
  g.scores = f32(gx, {d.B, d.T, d.C});
  timitseg_tensor tn = f64(nll, {d.B});
  ASSERT_EQ(timitseg_crf_nll(h, &in, &gold, 1.0, &tn, &g), TIMITSEG_OK) << timitseg_last_error();
  for (int64_t b = 0; b < d.B; ++b) EXPECT_EQ(nll[b], r.log_z[b] - r.gold[b]) << b;
  for (size_t i = 0; i < gx.size(); ++i) ASSERT_EQ(gx[i], want_gx[i]) << i;
  timitseg_crf_free(h);
}

// Gold given as segments (the gold segmentation of the labels) = gold given as labels.
TEST(CapiCrf, GoldSegmentsEqualGoldLabels) {
  const Dims d{2, 9, 3, 3};
  tc::Problem pb = tc::random_problem(d, 5, {9, 6});
  const int64_t B = d.B, T = d.T, K = d.K, C = d.C;
  std::vector<int32_t> segs(B * T * 3, 0), ns(B, 0);
  for (int64_t b = 0; b < B; ++b)
    for (const Segment& s : timitseg::crf::gold_segments(pb.labels.data() + b * T, pb.lengths[b], K)) {
      int32_t* r = segs.data() + (b * T + ns[b]++) * 3;
      r[0] = s.start, r[1] = s.duration, r[2] = s.label;
    }
  timitseg_crf* h = handle_for(TIMITSEG_BACKEND_CPU, pb);
  auto run = [&](bool by_segments, std::vector<double>& nll, std::vector<float>& gc, std::vector<float>& gA) {
    nll.assign(B, 0), gc.assign(B * (T + 1) * C, 0), gA.assign(C * C, 0);
    timitseg_crf_batch in{};
    in.scores = f32(pb.cum, {B, T + 1, C});
    in.cumulative = 1;
    in.lengths = i32(pb.lengths, {B});
    timitseg_crf_gold gold{};
    if (by_segments) {
      gold.segments = i32(segs, {B, T, 3});
      gold.num_segments = i32(ns, {B});
    } else {
      gold.labels = i32(pb.labels, {B, T});
    }
    timitseg_crf_grads g{};
    g.scores = f32(gc, {B, T + 1, C});
    g.transition = f32(gA, {C, C});
    timitseg_tensor tn = f64(nll, {B});
    ASSERT_EQ(timitseg_crf_nll(h, &in, &gold, 0.5, &tn, &g), TIMITSEG_OK) << timitseg_last_error();
  };
  std::vector<double> n1, n2;
  std::vector<float> c1, c2, a1, a2;
  run(false, n1, c1, a1);
  run(true, n2, c2, a2);
  tc::expect_close(n2, n1, 1e-6, 1e-6, "nll");
  tc::expect_close(a2, a1, 1e-6, 1e-6, "grad transition");
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 1; t <= pb.lengths[b]; ++t)
      for (int64_t c = 0; c < C; ++c) {
        const size_t i = (b * (T + 1) + t) * C + c;
        EXPECT_NEAR(c2[i], c1[i], 1e-6) << b << " " << t << " " << c;
      }
  timitseg_crf_free(h);
}
