// Batches with lengths 0, 1 and K > T equal the utterances one by one; the
// error codes and messages of bad shapes, dtypes, devices and lengths;
// strided tensors; align; the log-normal duration model's gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "crf/backend.h"
#include "crf/backend_kind.h"
#include "crf/duration.h"
#include "crf/host_run.h"
#include "tests/capi/capi_helpers.h"
#include "tests/crf/helpers.h"

using namespace timitseg::capi::testing;
using timitseg::crf::Dims;
namespace tc = timitseg::crf::testing;

namespace {

struct Row {
  double nll = 0, log_z = 0, vscore = 0;
  std::vector<float> gx, gA;
  std::vector<int32_t> segs;
};

// nll (+ gradients), log_partition and viterbi of frame scores x [B][T][C].
std::vector<Row> run_rows(timitseg_crf* h, std::vector<float> x, std::vector<int32_t> len, std::vector<int32_t> lab,
                          int64_t B, int64_t T, int64_t C) {
  std::vector<double> nll(B), lz(B), vs(B);
  std::vector<float> gx(B * T * C), gA(C * C);
  std::vector<int32_t> segs(B * T * 3), ns(B);
  timitseg_crf_batch in{};
  in.scores = f32(x, {B, T, C});
  in.lengths = i32(len, {B});
  timitseg_crf_gold gold{};
  gold.labels = i32(lab, {B, T});
  timitseg_crf_grads g{};
  g.scores = f32(gx, {B, T, C});
  g.transition = f32(gA, {C, C});
  timitseg_tensor tn = f64(nll, {B}), tl = f64(lz, {B}), tv = f64(vs, {B}), ts = i32(segs, {B, T, 3}), tns = i32(ns, {B});
  EXPECT_EQ(timitseg_crf_nll(h, &in, &gold, 1.0, &tn, &g), TIMITSEG_OK) << timitseg_last_error();
  EXPECT_EQ(timitseg_crf_log_partition(h, &in, &tl), TIMITSEG_OK) << timitseg_last_error();
  EXPECT_EQ(timitseg_crf_viterbi(h, &in, &tv, &ts, &tns), TIMITSEG_OK) << timitseg_last_error();
  std::vector<Row> rows(B);
  for (int64_t b = 0; b < B; ++b) {
    rows[b].nll = nll[b], rows[b].log_z = lz[b], rows[b].vscore = vs[b];
    rows[b].gx.assign(gx.begin() + b * T * C, gx.begin() + b * T * C + len[b] * C);
    rows[b].gA = gA;
    rows[b].segs.assign(segs.begin() + b * T * 3, segs.begin() + b * T * 3 + ns[b] * 3);
  }
  return rows;
}

timitseg_crf* cpu_crf(int C, int K, uint32_t seed) {
  tc::Problem pb = tc::random_problem(Dims{1, 2, K, C}, seed);
  return make_crf(TIMITSEG_BACKEND_CPU, C, K, pb.A, pb.D, pb.s, pb.e);
}

}  // namespace

TEST(CapiBatches, MixedLengthsEqualOneByOne) {
  const int64_t B = 5, T = 4, C = 3, K = 6;  // K > T
  const std::vector<int32_t> len{0, 1, 4, 0, 3};
  std::vector<float> x(B * T * C);
  std::vector<int32_t> lab(B * T);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(1.3f * i);
  for (size_t i = 0; i < lab.size(); ++i) lab[i] = static_cast<int32_t>((i / 2) % C);
  timitseg_crf* h = cpu_crf(C, K, 3);
  const std::vector<Row> all = run_rows(h, x, len, lab, B, T, C);
  std::vector<double> gA_sum(C * C, 0.0);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t L = len[b];
    if (L == 0) {
      EXPECT_EQ(all[b].nll, 0.0);
      EXPECT_EQ(all[b].log_z, 0.0);
      EXPECT_EQ(all[b].vscore, 0.0);
      EXPECT_TRUE(all[b].segs.empty());
      continue;
    }
    std::vector<float> xb(x.begin() + b * T * C, x.begin() + (b * T + L) * C);
    std::vector<int32_t> lb(lab.begin() + b * T, lab.begin() + b * T + L);
    const Row one = run_rows(h, xb, {static_cast<int32_t>(L)}, lb, 1, L, C)[0];
    EXPECT_EQ(all[b].nll, one.nll) << b;
    EXPECT_EQ(all[b].log_z, one.log_z) << b;
    EXPECT_EQ(all[b].vscore, one.vscore) << b;
    EXPECT_EQ(all[b].gx, one.gx) << b;
    EXPECT_EQ(all[b].segs, one.segs) << b;
    for (int64_t i = 0; i < C * C; ++i) gA_sum[i] += one.gA[i];
  }
  tc::expect_close(all[0].gA, gA_sum, 1e-5, 1e-6, "grad transition (sum over utterances)");
  // All lengths 0: zeros, no backend call.
  const std::vector<Row> none = run_rows(h, x, {0, 0, 0, 0, 0}, lab, B, T, C);
  for (const Row& r : none) EXPECT_EQ(r.nll, 0.0);
  for (float v : none[0].gA) EXPECT_EQ(v, 0.0f);
  timitseg_crf_free(h);
}

// A bad argument is one status and one message naming it; no output is written half.
TEST(CapiBatches, ErrorsNameTheArgument) {
  const int64_t B = 2, T = 3, C = 2;
  timitseg_crf* h = cpu_crf(C, 2, 4);
  std::vector<float> x(B * T * C, 0.5f);
  std::vector<double> xd(B * T * C, 0.5);
  std::vector<int32_t> len{3, 2}, bad_len{3, 4}, ix(B * T * C, 1);
  std::vector<double> lz(B, -7.0);
  timitseg_tensor out = f64(lz, {B});
  auto call = [&](timitseg_crf_batch in) {
    const int rc = timitseg_crf_log_partition(h, &in, &out);
    return std::pair<int, std::string>(rc, timitseg_last_error());
  };
  timitseg_crf_batch good{};
  good.scores = f32(x, {B, T, C});
  good.lengths = i32(len, {B});
  EXPECT_EQ(call(good).first, TIMITSEG_OK);
  EXPECT_EQ(std::string(timitseg_last_error()), "");

  timitseg_crf_batch in = good;
  in.scores = f32(x, {B, C, T});  // C = 3 labels where the handle has 2
  auto [rc, msg] = call(in);
  EXPECT_EQ(rc, TIMITSEG_ERR_SHAPE);
  EXPECT_EQ(msg, "timitseg_crf_log_partition: scores has shape [2, 2, 3], expected [*, *, 2]");
  in = good;
  in.scores = i32(ix, {B, T, C});
  std::tie(rc, msg) = call(in);
  EXPECT_EQ(rc, TIMITSEG_ERR_DTYPE);
  EXPECT_EQ(msg, "timitseg_crf_log_partition: scores has dtype I32, expected F32 or F64");
  in = good;
  in.lengths = i32(bad_len, {B});
  std::tie(rc, msg) = call(in);
  EXPECT_EQ(rc, TIMITSEG_ERR_LENGTH);
  EXPECT_EQ(msg, "timitseg_crf_log_partition: lengths[1] = 4 is outside [0, T = 3]");
  in = good;
  in.lengths = f32(x, {B});
  EXPECT_EQ(call(in).first, TIMITSEG_ERR_DTYPE);
  in = good;
  in.scores.device = TIMITSEG_DEVICE_CUDA;
  std::tie(rc, msg) = call(in);
  EXPECT_EQ(rc, TIMITSEG_ERR_DEVICE);
  EXPECT_NE(msg.find("scores is on CUDA"), std::string::npos) << msg;
  in = good;
  x[1 * T * C + 1 * C + 1] = NAN;  // utterance 1, frame 1 (valid)
  std::tie(rc, msg) = call(in);
  EXPECT_EQ(rc, TIMITSEG_ERR_ARGUMENT);
  EXPECT_EQ(msg, "timitseg_crf_log_partition: scores[1][1][1] = nan is not finite");
  x[1 * T * C + 1 * C + 1] = 0.5f;
  x[1 * T * C + 2 * C + 1] = NAN;  // utterance 1, frame 2: padding, never read
  EXPECT_EQ(call(good).first, TIMITSEG_OK) << timitseg_last_error();
  for (double v : lz) EXPECT_TRUE(std::isfinite(v));
  out = f64(lz, {B + 1});
  std::tie(rc, msg) = call(good);
  EXPECT_EQ(rc, TIMITSEG_ERR_SHAPE);
  EXPECT_EQ(msg, "timitseg_crf_log_partition: log_z has shape [3], expected [2]");
  EXPECT_EQ(timitseg_crf_log_partition(nullptr, &good, &out), TIMITSEG_ERR_ARGUMENT);
  EXPECT_EQ(std::string(timitseg_last_error()), "timitseg_crf_log_partition: crf is NULL");

  // A bad gradient tensor fails before anything is written.
  {
    std::vector<int32_t> lab0(B * T, 0);
    std::vector<double> n(B, -7.0);
    std::vector<float> gx(B * T * C, -7.0f), gA(C * C + 1, -7.0f);
    timitseg_crf_gold g0{};
    g0.labels = i32(lab0, {B, T});
    timitseg_crf_grads gr{};
    gr.scores = f32(gx, {B, T, C});
    gr.transition = f32(gA, {C * C + 1});
    timitseg_tensor tn0 = f64(n, {B});
    x[1 * T * C + 2 * C + 1] = 0.5f;
    EXPECT_EQ(timitseg_crf_nll(h, &good, &g0, 1.0, &tn0, &gr), TIMITSEG_ERR_SHAPE);
    EXPECT_EQ(std::string(timitseg_last_error()), "timitseg_crf_nll: grads.transition has shape [5], expected [2, 2]");
    for (double v : n) EXPECT_EQ(v, -7.0);
    for (float v : gx) EXPECT_EQ(v, -7.0f);
  }
  // A backend's error (here: every path forbidden) names the caller's row when length-0 rows were left out.
  {
    std::vector<float> Aneg(C * C, -INFINITY), Aok(C * C, 0.0f), Dneg(2 * C, -INFINITY), Dok(2 * C, 0.0f);
    timitseg_tensor tD = f32(Dneg, {2, C});
    ASSERT_EQ(timitseg_crf_set_param(h, "duration_bias", &tD), TIMITSEG_OK);
    std::vector<int32_t> len01{0, 2};
    timitseg_crf_batch b01 = good;
    b01.lengths = i32(len01, {B});
    EXPECT_EQ(timitseg_crf_log_partition(h, &b01, &out), TIMITSEG_ERR_RUNTIME);
    const std::string m = timitseg_last_error();
    EXPECT_NE(m.find("utterance k there is the caller's row [1][k]"), std::string::npos) << m;
    tD = f32(Dok, {2, C});
    ASSERT_EQ(timitseg_crf_set_param(h, "duration_bias", &tD), TIMITSEG_OK);
  }
  // Labels out of range, a parameter with NaN, an unknown parameter, bad params.
  out = f64(lz, {B});
  std::vector<int32_t> lab(B * T, 5);
  std::vector<double> nll(B);
  timitseg_tensor tn = f64(nll, {B});
  timitseg_crf_gold gold{};
  gold.labels = i32(lab, {B, T});
  EXPECT_EQ(timitseg_crf_nll(h, &good, &gold, 1.0, &tn, nullptr), TIMITSEG_ERR_ARGUMENT);
  EXPECT_EQ(std::string(timitseg_last_error()), "timitseg_crf_nll: gold.labels[0][0] = 5 is outside [0, C = 2)");
  std::vector<int32_t> len0{0, 2};  // row 0 empty: the bad label is in the caller's row 1
  std::fill(lab.begin(), lab.end(), 1);
  lab[1 * T + 1] = -1;
  timitseg_crf_batch b0 = good;
  b0.lengths = i32(len0, {B});
  EXPECT_EQ(timitseg_crf_nll(h, &b0, &gold, 1.0, &tn, nullptr), TIMITSEG_ERR_ARGUMENT);
  EXPECT_EQ(std::string(timitseg_last_error()), "timitseg_crf_nll: gold.labels[1][1] = -1 is outside [0, C = 2)");
  std::vector<float> A(C * C, NAN);
  timitseg_tensor tA = f32(A, {C, C});
  EXPECT_EQ(timitseg_crf_set_param(h, "transition", &tA), TIMITSEG_ERR_ARGUMENT);
  EXPECT_EQ(std::string(timitseg_last_error()),
            "timitseg_crf_set_param: parameter transition[0] = nan is NaN or +inf (entries must be finite, or -inf to forbid)");
  EXPECT_EQ(timitseg_crf_set_param(h, "transitions", &tA), TIMITSEG_ERR_ARGUMENT);
  EXPECT_EQ(std::string(timitseg_last_error()),
            "timitseg_crf_set_param: no parameter 'transitions' (transition, duration_bias, start, end)");
  timitseg_crf_params p = timitseg_crf_default_params();
  timitseg_crf* h2 = reinterpret_cast<timitseg_crf*>(&p);
  EXPECT_EQ(timitseg_crf_create(&p, &h2), TIMITSEG_ERR_ARGUMENT);
  EXPECT_EQ(h2, nullptr);
  p.num_labels = 2, p.max_duration = 2, p.backend = 9;
  EXPECT_EQ(timitseg_crf_create(&p, &h2), TIMITSEG_ERR_ARGUMENT);
  if (!timitseg_has_cuda()) {
    p.backend = TIMITSEG_BACKEND_CUDA;
    EXPECT_EQ(timitseg_crf_create(&p, &h2), TIMITSEG_ERR_DEVICE);
    EXPECT_NE(std::string(timitseg_last_error()).find("no CUDA support"), std::string::npos) << timitseg_last_error();
  }
  timitseg_crf_free(h);
}

// Strided (non-contiguous) CPU tensors and F64 scores are read in place.
TEST(CapiBatches, StridedAndDoubleInputs) {
  const int64_t B = 2, T = 4, C = 3;
  timitseg_crf* h = cpu_crf(C, 3, 8);
  std::vector<double> x(B * T * C), xt(B * T * C);  // xt: the same values stored [B][C][T]
  for (int64_t i = 0; i < B * T * C; ++i) x[i] = std::sin(0.7 * i);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) xt[(b * C + c) * T + t] = x[(b * T + t) * C + c];
  std::vector<int32_t> len{4, 3};
  std::vector<double> z1(B), z2(B);
  timitseg_crf_batch in{};
  in.scores = f64(x, {B, T, C});
  in.lengths = i32(len, {B});
  timitseg_tensor t1 = f64(z1, {B}), t2 = f64(z2, {B});
  ASSERT_EQ(timitseg_crf_log_partition(h, &in, &t1), TIMITSEG_OK) << timitseg_last_error();
  in.scores = f64(xt, {B, T, C});
  in.scores.strides[0] = T * C, in.scores.strides[1] = 1, in.scores.strides[2] = T;
  ASSERT_EQ(timitseg_crf_log_partition(h, &in, &t2), TIMITSEG_OK) << timitseg_last_error();
  EXPECT_EQ(z1, z2);
  timitseg_crf_free(h);
}

// Align through the handle = crf::align_host on the same backend; a row of length 0 gets score 0.
TEST(CapiBatches, AlignMatchesTheBackend) {
  const Dims d{2, 8, 3, 3};
  tc::Problem pb = tc::random_problem(d, 21, {8, 5});
  std::vector<int32_t> ph{0, 2, 1, 0, 1, 2, 0, 0}, nph{4, 3};  // [B][N=4]
  auto be = timitseg::crf::make_backend(timitseg::crf::BackendKind::cpu);
  const timitseg::crf::AlignResult want = timitseg::crf::align_host(*be, d, pb.params(), 4, ph.data(), nph.data());
  timitseg_crf* h = make_crf(TIMITSEG_BACKEND_CPU, 3, 3, pb.A, pb.D, pb.s, pb.e);
  std::vector<int32_t> len3{8, 5, 0}, ph3(ph), nph3{4, 3, 0};
  ph3.insert(ph3.end(), {0, 0, 0, 0});
  std::vector<float> cum3(pb.cum);
  cum3.resize(3 * (d.T + 1) * d.C, 0.0f);
  std::vector<double> score(3);
  std::vector<int32_t> spans(3 * 4 * 2, -1);
  timitseg_crf_batch in{};
  in.scores = f32(cum3, {3, d.T + 1, d.C});
  in.cumulative = 1;
  in.lengths = i32(len3, {3});
  timitseg_tensor tp = i32(ph3, {3, 4}), tn = i32(nph3, {3}), ts = f64(score, {3}), tsp = i32(spans, {3, 4, 2});
  ASSERT_EQ(timitseg_crf_align(h, &in, &tp, &tn, nullptr, &ts, &tsp), TIMITSEG_OK) << timitseg_last_error();
  EXPECT_EQ(score[0], want.score[0]);
  EXPECT_EQ(score[1], want.score[1]);
  EXPECT_EQ(score[2], 0.0);
  EXPECT_EQ(std::vector<int32_t>(spans.begin(), spans.begin() + 16), want.spans);
  for (int i = 16; i < 24; ++i) EXPECT_EQ(spans[i], 0);
  nph3[1] = 5;
  EXPECT_EQ(timitseg_crf_align(h, &in, &tp, &tn, nullptr, &ts, &tsp), TIMITSEG_ERR_LENGTH);
  EXPECT_EQ(std::string(timitseg_last_error()), "timitseg_crf_align: num_phones[1] = 5 is outside [1, N = 4]");
  timitseg_crf_free(h);
}

// The log-normal model: duration_bias is derived, and the gradient of
// duration_lognormal matches central differences of the NLL.
TEST(CapiBatches, LognormalDurationGradientMatchesFiniteDifferences) {
  const int64_t B = 2, T = 6, C = 2, K = 4;
  timitseg_crf_params p = timitseg_crf_default_params();
  p.num_labels = C, p.max_duration = K, p.backend = TIMITSEG_BACKEND_REFERENCE;
  p.duration_model = TIMITSEG_DURATION_LOGNORMAL;
  timitseg_crf* h = nullptr;
  ASSERT_EQ(timitseg_crf_create(&p, &h), TIMITSEG_OK) << timitseg_last_error();
  std::vector<double> ln{0.8, 1.2, -0.3, 0.1, 0.5, -0.5};  // mu, log_sigma, offset per label
  std::vector<double> x(B * T * C), nll(B), gln(3 * C);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.9 * i);
  std::vector<int32_t> len{6, 4}, lab{0, 0, 1, 1, 1, 0, 1, 1, 0, 0, 0, 0};
  timitseg_crf_batch in{};
  in.scores = f64(x, {B, T, C});
  in.lengths = i32(len, {B});
  timitseg_crf_gold gold{};
  gold.labels = i32(lab, {B, T});
  auto loss = [&](const std::vector<double>& rows, bool grad) {
    std::vector<double> r(rows);
    timitseg_tensor t = f64(r, {3, C}), tn = f64(nll, {B});
    EXPECT_EQ(timitseg_crf_set_param(h, "duration_lognormal", &t), TIMITSEG_OK) << timitseg_last_error();
    timitseg_crf_grads g{};
    g.duration_lognormal = f64(gln, {3, C});
    EXPECT_EQ(timitseg_crf_nll(h, &in, &gold, 1.0, &tn, grad ? &g : nullptr), TIMITSEG_OK) << timitseg_last_error();
    return nll[0] + nll[1];
  };
  std::vector<float> table(K * C), want(K * C), lnf(ln.begin(), ln.end());
  loss(ln, true);
  const std::vector<double> analytic = gln;
  timitseg_tensor tt = f32(table, {K, C});
  ASSERT_EQ(timitseg_crf_get_param(h, "duration_bias", &tt), TIMITSEG_OK) << timitseg_last_error();
  timitseg::crf::lognormal_duration_table(K, C, lnf.data(), want.data());
  EXPECT_EQ(table, want);
  for (size_t i = 0; i < ln.size(); ++i) {
    const double eps = 1e-2;
    std::vector<double> up(ln), dn(ln);
    up[i] += eps, dn[i] -= eps;
    const double fd = (loss(up, false) - loss(dn, false)) / (2 * eps);
    EXPECT_NEAR(analytic[i], fd, 2e-3 + 2e-3 * std::fabs(fd)) << "duration_lognormal[" << i << "]";
  }
  timitseg_crf_free(h);
}
