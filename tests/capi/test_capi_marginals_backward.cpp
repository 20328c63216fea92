// timitseg_crf_marginals_backward (docs/crf.md "Gradient of the marginals")
// against central differences of the C API's own forward calls
// (timitseg_crf_marginals and timitseg_crf_segment_posteriors) on F64 scores,
// reference and cpu handles, a padded batch with a row of length 0, K < T and
// K > a row's length, onset, the log-normal duration model; F32 scores; the
// errors (one line naming the argument); on a GPU the cuda handle's F32 result
// against the reference handle's and its refusal of F64 scores.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/cuda.h"
#include "tests/capi/capi_helpers.h"

namespace {

using namespace timitseg::capi::testing;

struct Case {
  int B = 3, T = 6, C = 3, K = 4;
  bool lognormal = false;
  std::vector<double> x, o, A, D, s, e, ln;
  std::vector<int32_t> len{6, 0, 3};
  std::vector<double> gb, gf, gs;  // upstream [B][T+1], [B][T][C], [B][T][K][C]
};

Case make_case(unsigned seed, bool lognormal) {
  Case k;
  k.lognormal = lognormal;
  std::mt19937 rng(seed);
  std::normal_distribution<double> n(0.0, 0.7);
  auto fill = [&](std::vector<double>& v, size_t size) {
    v.resize(size);
    for (double& x : v) x = n(rng);
  };
  fill(k.x, k.B * k.T * k.C);
  fill(k.o, k.B * k.T * k.C);
  fill(k.A, k.C * k.C);
  fill(k.D, k.K * k.C);
  fill(k.s, k.C);
  fill(k.e, k.C);
  fill(k.ln, 3 * k.C);
  for (int c = 0; c < k.C; ++c) k.ln[c] = 0.8 + 0.1 * c;  // mu ~ log 2.2 frames
  fill(k.gb, k.B * (k.T + 1));
  fill(k.gf, k.B * k.T * k.C);
  fill(k.gs, k.B * k.T * k.K * k.C);
  return k;
}

timitseg_crf* handle(int backend, Case& k) {
  timitseg_crf_params prm = timitseg_crf_default_params();
  prm.num_labels = k.C;
  prm.max_duration = k.K;
  prm.backend = backend;
  prm.threads = 1;
  prm.duration_model = k.lognormal ? TIMITSEG_DURATION_LOGNORMAL : TIMITSEG_DURATION_TABLE;
  timitseg_crf* h = nullptr;
  EXPECT_EQ(timitseg_crf_create(&prm, &h), TIMITSEG_OK) << timitseg_last_error();
  return h;
}

void set_params(timitseg_crf* h, Case& k) {
  timitseg_tensor tA = f64(k.A, {k.C, k.C}), tD = f64(k.D, {k.K, k.C}), ts = f64(k.s, {k.C}), te = f64(k.e, {k.C}),
                  tl = f64(k.ln, {3, k.C});
  ASSERT_EQ(timitseg_crf_set_param(h, "transition", &tA), TIMITSEG_OK);
  if (k.lognormal)
    ASSERT_EQ(timitseg_crf_set_param(h, "duration_lognormal", &tl), TIMITSEG_OK);
  else
    ASSERT_EQ(timitseg_crf_set_param(h, "duration_bias", &tD), TIMITSEG_OK);
  ASSERT_EQ(timitseg_crf_set_param(h, "start", &ts), TIMITSEG_OK);
  ASSERT_EQ(timitseg_crf_set_param(h, "end", &te), TIMITSEG_OK);
}

timitseg_crf_batch batch(Case& k) {
  timitseg_crf_batch b{};
  b.scores = f64(k.x, {k.B, k.T, k.C});
  b.lengths = i32(k.len, {k.B});
  b.onset = f64(k.o, {k.B, k.T, k.C});
  return b;
}

// sum(g * marginals) by the C API's forward calls.
double objective(timitseg_crf* h, Case& k) {
  set_params(h, k);
  timitseg_crf_batch b = batch(k);
  std::vector<double> bo(k.B * (k.T + 1)), fr(k.B * k.T * k.C), sg(k.B * k.T * k.K * k.C);
  timitseg_tensor tb = f64(bo, {k.B, k.T + 1}), tf = f64(fr, {k.B, k.T, k.C}), ts = f64(sg, {k.B, k.T, k.K, k.C});
  EXPECT_EQ(timitseg_crf_marginals(h, &b, &tb, &tf), TIMITSEG_OK) << timitseg_last_error();
  EXPECT_EQ(timitseg_crf_segment_posteriors(h, &b, &ts), TIMITSEG_OK) << timitseg_last_error();
  double f = 0.0;
  for (size_t i = 0; i < bo.size(); ++i) f += k.gb[i] * bo[i];
  for (size_t i = 0; i < fr.size(); ++i) f += k.gf[i] * fr[i];
  for (size_t i = 0; i < sg.size(); ++i) f += k.gs[i] * sg[i];
  return f;
}

struct Grads {
  std::vector<double> x, o, A, D, s, e, ln;
  timitseg_crf_grads t{};
  explicit Grads(Case& k) {
    x.assign(k.x.size(), 7.0), o.assign(k.o.size(), 7.0), A.assign(k.A.size(), 7.0), D.assign(k.D.size(), 7.0);
    s.assign(k.C, 7.0), e.assign(k.C, 7.0), ln.assign(3 * k.C, 7.0);
    t.scores = f64(x, {k.B, k.T, k.C});
    t.onset = f64(o, {k.B, k.T, k.C});
    t.transition = f64(A, {k.C, k.C});
    t.duration_bias = f64(D, {k.K, k.C});
    t.start = f64(s, {k.C});
    t.end = f64(e, {k.C});
    if (k.lognormal) t.duration_lognormal = f64(ln, {3, k.C});
  }
};

int run_backward(timitseg_crf* h, Case& k, Grads& g) {
  set_params(h, k);
  timitseg_crf_batch b = batch(k);
  timitseg_tensor tb = f64(k.gb, {k.B, k.T + 1}), tf = f64(k.gf, {k.B, k.T, k.C}),
                  ts = f64(k.gs, {k.B, k.T, k.K, k.C});
  return timitseg_crf_marginals_backward(h, &b, &tb, &tf, &ts, &g.t);
}

void central_differences(int backend, bool lognormal) {
  Case k = make_case(lognormal ? 12 : 11, lognormal);
  timitseg_crf* h = handle(backend, k);
  ASSERT_NE(h, nullptr);
  Grads g(k);
  ASSERT_EQ(run_backward(h, k, g), TIMITSEG_OK) << timitseg_last_error();
  const double eps = 1e-5;
  auto check = [&](std::vector<double>& v, const std::vector<double>& grad, const std::string& name) {
    for (size_t i = 0; i < v.size(); ++i) {
      const double keep = v[i];
      v[i] = keep + eps;
      const double up = objective(h, k);
      v[i] = keep - eps;
      const double down = objective(h, k);
      v[i] = keep;
      const double fd = (up - down) / (2 * eps);
      EXPECT_NEAR(grad[i], fd, 1e-7 + 1e-6 * std::fabs(fd)) << name << "[" << i << "]";
    }
  };
  check(k.x, g.x, "scores");  // row 1 (length 0) and padding frames: 0 both ways
  check(k.o, g.o, "onset");
  check(k.A, g.A, "transition");
  if (lognormal)
    check(k.ln, g.ln, "duration_lognormal");
  else
    check(k.D, g.D, "duration_bias");
  check(k.s, g.s, "start");
  check(k.e, g.e, "end");
  for (int i = k.T * k.C; i < 2 * k.T * k.C; ++i) EXPECT_EQ(g.x[i], 0.0) << "the row of length 0";
  timitseg_crf_free(h);
}

TEST(CapiMarginalsBackward, CentralDifferencesReference) { central_differences(TIMITSEG_BACKEND_REFERENCE, false); }
TEST(CapiMarginalsBackward, CentralDifferencesCpu) { central_differences(TIMITSEG_BACKEND_CPU, false); }
TEST(CapiMarginalsBackward, CentralDifferencesLognormal) { central_differences(TIMITSEG_BACKEND_CPU, true); }

// F32 scores: the float32 values widened, so the same result as F64 scores holding those values (up to the
// float32 centering), and every output absent but one allowed; absent upstream gradients are zeros.
TEST(CapiMarginalsBackward, Float32ScoresAndAbsentTensors) {
  Case k = make_case(13, false);
  timitseg_crf* h = handle(TIMITSEG_BACKEND_CPU, k);
  ASSERT_NE(h, nullptr);
  set_params(h, k);
  Grads g64(k);
  ASSERT_EQ(run_backward(h, k, g64), TIMITSEG_OK) << timitseg_last_error();
  std::vector<float> x32(k.x.begin(), k.x.end()), o32(k.o.begin(), k.o.end()), gx32(k.x.size());
  timitseg_crf_batch b{};
  b.scores = f32(x32, {k.B, k.T, k.C});
  b.lengths = i32(k.len, {k.B});
  b.onset = f32(o32, {k.B, k.T, k.C});
  timitseg_crf_grads only{};
  only.scores = f32(gx32, {k.B, k.T, k.C});
  timitseg_tensor tb = f64(k.gb, {k.B, k.T + 1}), tf = f64(k.gf, {k.B, k.T, k.C}), ts = f64(k.gs, {k.B, k.T, k.K, k.C});
  ASSERT_EQ(timitseg_crf_marginals_backward(h, &b, &tb, &tf, &ts, &only), TIMITSEG_OK) << timitseg_last_error();
  for (size_t i = 0; i < gx32.size(); ++i) EXPECT_NEAR(gx32[i], g64.x[i], 1e-4 + 1e-4 * std::fabs(g64.x[i])) << i;
  // no upstream at all: every gradient 0
  Grads zero(k);
  timitseg_crf_batch b64 = batch(k);
  ASSERT_EQ(timitseg_crf_marginals_backward(h, &b64, nullptr, nullptr, nullptr, &zero.t), TIMITSEG_OK);
  for (double v : zero.x) EXPECT_EQ(v, 0.0);
  for (double v : zero.A) EXPECT_EQ(v, 0.0);
  timitseg_crf_free(h);
}

TEST(CapiMarginalsBackward, ErrorsAreOneLineNamingTheArgument) {
  Case k = make_case(14, false);
  timitseg_crf* h = handle(TIMITSEG_BACKEND_REFERENCE, k);
  ASSERT_NE(h, nullptr);
  set_params(h, k);
  timitseg_crf_batch b = batch(k);
  Grads g(k);
  auto expect = [](int rc, int status, const std::string& start) {
    EXPECT_EQ(rc, status);
    const std::string msg = timitseg_last_error();
    EXPECT_EQ(msg.rfind("timitseg_crf_marginals_backward: " + start, 0), 0u) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  };
  timitseg_tensor bad = f64(k.gf, {k.B, k.T, k.C + 1});
  expect(timitseg_crf_marginals_backward(h, &b, nullptr, &bad, nullptr, &g.t), TIMITSEG_ERR_SHAPE, "grad_frames");
  std::vector<double> nan_f = k.gf;
  nan_f[0] = NAN;
  timitseg_tensor tn = f64(nan_f, {k.B, k.T, k.C});
  expect(timitseg_crf_marginals_backward(h, &b, nullptr, &tn, nullptr, &g.t), TIMITSEG_ERR_ARGUMENT,
         "crf: reference backend: marginals_backward: grad_frames[0][0][0] = nan is not finite");
  b.onset = timitseg_tensor{};
  expect(timitseg_crf_marginals_backward(h, &b, nullptr, nullptr, nullptr, &g.t), TIMITSEG_ERR_ARGUMENT,
         "grads.onset given, but the batch has no onset");
  expect(timitseg_crf_marginals_backward(h, &b, nullptr, nullptr, nullptr, nullptr), TIMITSEG_ERR_ARGUMENT,
         "grads is NULL");
  timitseg_crf_free(h);
}

// On a GPU: a cuda handle refuses F64 scores (the float64 refusal of every call) and computes F32 scores on the
// host: the reference handle's result for the same F32 inputs (host tensors here; CUDA tensors go through the same
// host copies as timitseg_crf_segment_posteriors').
TEST(CapiMarginalsBackward, CudaRefusesF64AndMatchesTheReferenceOnF32) {
  if (!timitseg_has_cuda() || timitseg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Case k = make_case(15, false);
  k.o.clear();
  timitseg_crf* hc = handle(TIMITSEG_BACKEND_CUDA, k);
  ASSERT_NE(hc, nullptr);
  set_params(hc, k);
  timitseg_crf_batch b{};
  b.scores = f64(k.x, {k.B, k.T, k.C});
  b.lengths = i32(k.len, {k.B});
  std::vector<double> gx(k.x.size());
  timitseg_crf_grads g{};
  g.scores = f64(gx, {k.B, k.T, k.C});
  timitseg_tensor tf = f64(k.gf, {k.B, k.T, k.C});
  EXPECT_EQ(timitseg_crf_marginals_backward(hc, &b, nullptr, &tf, nullptr, &g), TIMITSEG_ERR_DTYPE);
  const std::string msg = timitseg_last_error();
  EXPECT_EQ(msg.rfind("timitseg_crf_marginals_backward: scores are F64: the cuda backend computes in float32", 0), 0u)
      << msg;
  std::vector<float> x32(k.x.begin(), k.x.end());
  b.scores = f32(x32, {k.B, k.T, k.C});
  std::vector<double> want(k.x.size());
  timitseg_crf* hr = handle(TIMITSEG_BACKEND_REFERENCE, k);
  ASSERT_NE(hr, nullptr);
  set_params(hr, k);
  ASSERT_EQ(timitseg_crf_marginals_backward(hc, &b, nullptr, &tf, nullptr, &g), TIMITSEG_OK) << timitseg_last_error();
  g.scores = f64(want, {k.B, k.T, k.C});
  ASSERT_EQ(timitseg_crf_marginals_backward(hr, &b, nullptr, &tf, nullptr, &g), TIMITSEG_OK) << timitseg_last_error();
  EXPECT_EQ(gx, want);  // the same host computation on the same float32 values
  timitseg_crf_free(hr);
  timitseg_crf_free(hc);
}

}  // namespace
