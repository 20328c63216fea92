// The C API's float64 path (capi/crf_f64.h): F64 scores and F64 parameters on
// the reference and cpu handles give, bit for bit, the reference backend's
// float64 functions on the double centered cumsum (the oracle computed here
// from the same doubles), gradients included; F32 scores are untouched by it
// (their results are those of the float32 path); a cuda handle refuses F64
// scores with one line; timitseg_crf_check_again without a deferred call is OK.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/capi/capi_helpers.h"
#include "common/cuda.h"
#include "crf/cumsum.h"
#include "crf/reference/reference.h"

namespace {

using namespace timitseg::capi::testing;

struct Problem {
  int B = 2, T = 6, C = 3, K = 4;
  std::vector<double> x, A, D, s, e;
  std::vector<int32_t> len{6, 4}, lab;
};

Problem make_problem(unsigned seed) {
  Problem p;
  std::mt19937 rng(seed);
  std::normal_distribution<double> n(0.0, 0.7);
  auto fill = [&](std::vector<double>& v, size_t size) {
    v.resize(size);
    for (double& x : v) x = n(rng) + 1e-9 / 3.0;  // not representable in float32
  };
  fill(p.x, p.B * p.T * p.C);
  fill(p.A, p.C * p.C);
  fill(p.D, p.K * p.C);
  fill(p.s, p.C);
  fill(p.e, p.C);
  for (int i = 0; i < p.B * p.T; ++i) p.lab.push_back(static_cast<int32_t>(rng() % p.C));
  return p;
}

timitseg_crf* handle(int backend, Problem& p) {
  timitseg_crf_params prm = timitseg_crf_default_params();
  prm.num_labels = p.C;
  prm.max_duration = p.K;
  prm.backend = backend;
  prm.threads = 1;
  timitseg_crf* h = nullptr;
  if (timitseg_crf_create(&prm, &h) != TIMITSEG_OK) return nullptr;
  timitseg_tensor tA = f64(p.A, {p.C, p.C}), tD = f64(p.D, {p.K, p.C}), ts = f64(p.s, {p.C}), te = f64(p.e, {p.C});
  EXPECT_EQ(timitseg_crf_set_param(h, "transition", &tA), TIMITSEG_OK);
  EXPECT_EQ(timitseg_crf_set_param(h, "duration_bias", &tD), TIMITSEG_OK);
  EXPECT_EQ(timitseg_crf_set_param(h, "start", &ts), TIMITSEG_OK);
  EXPECT_EQ(timitseg_crf_set_param(h, "end", &te), TIMITSEG_OK);
  return h;
}

TEST(CapiF64, NllAndGradientsAreTheReferenceFloat64FunctionsBitwise) {
  Problem p = make_problem(3);
  const timitseg::crf::Dims d{p.B, p.T, p.K, p.C};
  std::vector<double> cum(static_cast<size_t>(p.B * (p.T + 1) * p.C));
  timitseg::crf::centered_cumsum_forward<double>(p.B, p.T, p.C, p.x.data(), p.len.data(), cum.data());
  const timitseg::crf::reference::ParamsF64 rp{cum.data(), p.A.data(), p.D.data(), p.s.data(), p.e.data(),
                                               p.len.data(), nullptr};
  std::vector<double> lz(p.B), gold(p.B), gcum(cum.size()), gA(p.C * p.C), gD(p.K * p.C), gs(p.C), ge(p.C);
  const timitseg::crf::reference::GradsF64 rg{gcum.data(), gA.data(), gD.data(), gs.data(), ge.data(), nullptr};
  timitseg::crf::reference::backward_f64(d, rp, p.lab.data(), 1.0, lz.data(), gold.data(), rg);
  std::vector<double> gx(p.x.size());
  timitseg::crf::centered_cumsum_backward<double>(p.B, p.T, p.C, gcum.data(), p.len.data(), gx.data());
  for (int backend : {TIMITSEG_BACKEND_REFERENCE, TIMITSEG_BACKEND_CPU}) {
    timitseg_crf* h = handle(backend, p);
    ASSERT_NE(h, nullptr);
    timitseg_crf_batch b{};
    b.scores = f64(p.x, {p.B, p.T, p.C});
    b.lengths = i32(p.len, {p.B});
    timitseg_crf_gold g{};
    g.labels = i32(p.lab, {p.B, p.T});
    std::vector<double> nll(p.B), ox(p.x.size()), oA(gA.size()), oD(gD.size()), os(p.C), oe(p.C);
    timitseg_tensor tn = f64(nll, {p.B});
    timitseg_crf_grads gr{};
    gr.scores = f64(ox, {p.B, p.T, p.C});
    gr.transition = f64(oA, {p.C, p.C});
    gr.duration_bias = f64(oD, {p.K, p.C});
    gr.start = f64(os, {p.C});
    gr.end = f64(oe, {p.C});
    ASSERT_EQ(timitseg_crf_nll(h, &b, &g, 1.0, &tn, &gr), TIMITSEG_OK) << timitseg_last_error();
    for (int i = 0; i < p.B; ++i) EXPECT_EQ(nll[i], lz[i] - gold[i]) << i;
    EXPECT_EQ(std::memcmp(ox.data(), gx.data(), gx.size() * sizeof(double)), 0);
    EXPECT_EQ(oA, gA);
    EXPECT_EQ(oD, gD);
    EXPECT_EQ(os, gs);
    EXPECT_EQ(oe, ge);
    std::vector<double> olz(p.B);
    timitseg_tensor tz = f64(olz, {p.B});
    ASSERT_EQ(timitseg_crf_log_partition(h, &b, &tz), TIMITSEG_OK);
    EXPECT_EQ(olz, lz);
    int rerun = 7;
    EXPECT_EQ(timitseg_crf_check_again(h, &rerun), TIMITSEG_OK);  // no deferred call: OK
    EXPECT_EQ(rerun, 0);
    timitseg_crf_free(h);
  }
}

TEST(CapiF64, Float32ScoresKeepTheFloat32Path) {
  Problem p = make_problem(4);
  timitseg_crf* h = handle(TIMITSEG_BACKEND_CPU, p);
  ASSERT_NE(h, nullptr);
  std::vector<float> x32(p.x.begin(), p.x.end());
  std::vector<float> A32(p.A.begin(), p.A.end()), D32(p.D.begin(), p.D.end()), s32(p.s.begin(), p.s.end()),
      e32(p.e.begin(), p.e.end());
  timitseg_crf* h32 = make_crf(TIMITSEG_BACKEND_CPU, p.C, p.K, A32, D32, s32, e32);  // the float values set as F32
  timitseg_crf_batch b{};
  b.scores = f32(x32, {p.B, p.T, p.C});
  b.lengths = i32(p.len, {p.B});
  std::vector<double> a(p.B), c(p.B);
  timitseg_tensor ta = f64(a, {p.B}), tc = f64(c, {p.B});
  ASSERT_EQ(timitseg_crf_log_partition(h, &b, &ta), TIMITSEG_OK);
  ASSERT_EQ(timitseg_crf_log_partition(h32, &b, &tc), TIMITSEG_OK);
  EXPECT_EQ(a, c);  // F64-set parameters are rounded for F32 scores, as before
  timitseg_crf_free(h);
  timitseg_crf_free(h32);
}

TEST(CapiF64, CudaRefusesFloat64ScoresWithOneLine) {
  if (!timitseg_has_cuda() || timitseg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Problem p = make_problem(5);
  timitseg_crf* h = handle(TIMITSEG_BACKEND_CUDA, p);
  ASSERT_NE(h, nullptr);
  timitseg_crf_batch b{};
  b.scores = f64(p.x, {p.B, p.T, p.C});
  b.lengths = i32(p.len, {p.B});
  std::vector<double> lz(p.B);
  timitseg_tensor tz = f64(lz, {p.B});
  EXPECT_EQ(timitseg_crf_log_partition(h, &b, &tz), TIMITSEG_ERR_DTYPE);
  const std::string msg = timitseg_last_error();
  EXPECT_EQ(msg.rfind("timitseg_crf_log_partition: scores are F64: the cuda backend computes in float32", 0), 0u) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos);
  timitseg_crf_free(h);
}

}  // namespace
