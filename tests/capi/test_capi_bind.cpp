// timitseg_crf_bind_params: parameters read in place from the caller's memory.
// The oracle is a handle whose parameters were copied in with set_param: with
// the same values, every output must have the same bits, on the zero-copy path
// (int32 lengths and labels) and on the general path (int64, a row of length
// 0); a write into the bound memory between calls is what the next call
// reads; set_param and an empty bind end the binding with the bound values
// kept; bad bindings are refused by code and change nothing. The CUDA half
// (skipped without a GPU) binds device memory.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "capi/crf_batch.h"
#include "common/cuda.h"
#include "tests/capi/capi_helpers.h"

using namespace timitseg::capi::testing;
namespace cuda = timitseg::cuda;

namespace {

constexpr int kB = 4, kT = 11, kK = 4, kC = 5;

// The four parameters as the caller holds them (host vectors).
struct Params4 {
  std::vector<float> A, D, s, e;
};

Params4 random_params(unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> n(0.f, 0.5f);
  Params4 p;
  for (auto* v : {&p.A, &p.D, &p.s, &p.e}) v->resize(v == &p.A ? kC * kC : (v == &p.D ? kK * kC : kC));
  for (auto* v : {&p.A, &p.D, &p.s, &p.e})
    for (float& f : *v) f = n(g);
  return p;
}

timitseg_crf* create(int backend, double reg = 0.01, int duration_model = TIMITSEG_DURATION_TABLE) {
  timitseg_crf_params p = timitseg_crf_default_params();
  p.num_labels = kC, p.max_duration = kK, p.backend = backend, p.threads = 2, p.reg = reg;
  p.duration_model = duration_model;
  timitseg_crf* h = nullptr;
  EXPECT_EQ(timitseg_crf_create(&p, &h), TIMITSEG_OK) << timitseg_last_error();
  return h;
}

// A handle holding copies of p (set_param): the oracle.
timitseg_crf* copied(int backend, Params4 p) {
  timitseg_crf* h = create(backend);
  timitseg_tensor t[4] = {f32(p.A, {kC, kC}), f32(p.D, {kK, kC}), f32(p.s, {kC}), f32(p.e, {kC})};
  const char* names[4] = {"transition", "duration_bias", "start", "end"};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(timitseg_crf_set_param(h, names[i], &t[i]), TIMITSEG_OK);
  return h;
}

// Descriptors of the four (host memory, or the device copies at dev[0..3]).
struct Bind {
  timitseg_tensor t[4];
  Bind(Params4& p, void* const* dev = nullptr) {
    t[0] = f32(p.A, {kC, kC}), t[1] = f32(p.D, {kK, kC}), t[2] = f32(p.s, {kC}), t[3] = f32(p.e, {kC});
    if (dev)
      for (int i = 0; i < 4; ++i) t[i].data = dev[i], t[i].device = TIMITSEG_DEVICE_CUDA;
  }
  int operator()(timitseg_crf* h) { return timitseg_crf_bind_params(h, &t[0], &t[1], &t[2], &t[3]); }
};

struct Outputs {
  std::vector<double> nll, lz;
  std::vector<float> gx, gA, gD, gs, ge;
  double penalty = 0;
  int status = TIMITSEG_OK;
  std::string error;
};

// nll with every gradient, log_partition and the penalty of one batch
// (lengths {11, 6, 1, 9}, or with a row of length 0 when zero_row). wide:
// int64 lengths and labels (the general path). dev: device tensors (cuda).
Outputs call(timitseg_crf* h, unsigned seed, bool wide, bool dev, bool zero_row = false) {
  std::mt19937 g(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  std::uniform_int_distribution<int> u(0, kC - 1);
  std::vector<float> x(kB * kT * kC);
  for (float& f : x) f = n(g);
  std::vector<int32_t> len = {11, 6, zero_row ? 0 : 1, 9}, lab(kB * kT);
  for (int32_t& l : lab) l = u(g);
  std::vector<int64_t> len64(len.begin(), len.end()), lab64(lab.begin(), lab.end());
  Outputs o;
  o.nll.assign(kB, 0), o.lz.assign(kB, 0), o.gx.assign(x.size(), 0), o.gA.assign(kC * kC, 0);
  o.gD.assign(kK * kC, 0), o.gs.assign(kC, 0), o.ge.assign(kC, 0);
  std::vector<void*> mem;
  auto put = [&](auto& v, int dtype, std::vector<int64_t> shape) {
    timitseg_tensor t = tensor(v.data(), dtype, shape);
    if (!dev) return t;
    const size_t bytes = v.size() * sizeof(v[0]);
    mem.push_back(cuda::device_alloc(bytes));
    cuda::copy_to_device(mem.back(), v.data(), bytes);
    t.data = mem.back(), t.device = TIMITSEG_DEVICE_CUDA;
    return t;
  };
  timitseg_crf_batch in{};
  in.scores = put(x, TIMITSEG_F32, {kB, kT, kC});
  in.lengths = wide ? put(len64, TIMITSEG_I64, {kB}) : put(len, TIMITSEG_I32, {kB});
  timitseg_crf_gold gold{};
  gold.labels = wide ? put(lab64, TIMITSEG_I64, {kB, kT}) : put(lab, TIMITSEG_I32, {kB, kT});
  timitseg_crf_grads gr{};
  gr.scores = put(o.gx, TIMITSEG_F32, {kB, kT, kC});
  gr.transition = put(o.gA, TIMITSEG_F32, {kC, kC});
  gr.duration_bias = put(o.gD, TIMITSEG_F32, {kK, kC});
  gr.start = put(o.gs, TIMITSEG_F32, {kC});
  gr.end = put(o.ge, TIMITSEG_F32, {kC});
  timitseg_tensor nll = put(o.nll, TIMITSEG_F64, {kB}), lz = put(o.lz, TIMITSEG_F64, {kB});
  o.status = timitseg_crf_nll(h, &in, &gold, 0.5, &nll, &gr);
  if (o.status == TIMITSEG_OK) o.status = timitseg_crf_log_partition(h, &in, &lz);
  if (o.status == TIMITSEG_OK) o.status = timitseg_crf_penalty(h, &o.penalty);
  if (o.status != TIMITSEG_OK) o.error = timitseg_last_error();
  if (dev) {
    auto back = [&](const timitseg_tensor& t, auto& v) { cuda::copy_to_host(v.data(), t.data, v.size() * sizeof(v[0])); };
    back(nll, o.nll), back(lz, o.lz), back(gr.scores, o.gx), back(gr.transition, o.gA);
    back(gr.duration_bias, o.gD), back(gr.start, o.gs), back(gr.end, o.ge);
    for (void* p : mem) cuda::device_free(p);
  }
  return o;
}

template <class V>
void expect_bits(const V& a, const V& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])), 0) << what << " differs bitwise";
}

void expect_same(const Outputs& got, const Outputs& want, const std::string& what) {
  ASSERT_EQ(got.status, TIMITSEG_OK) << what << ": " << got.error;
  ASSERT_EQ(want.status, TIMITSEG_OK) << what << ": " << want.error;
  expect_bits(got.nll, want.nll, what + " nll");
  expect_bits(got.lz, want.lz, what + " log_z");
  expect_bits(got.gx, want.gx, what + " grads.scores");
  expect_bits(got.gA, want.gA, what + " grads.transition");
  expect_bits(got.gD, want.gD, what + " grads.duration_bias");
  expect_bits(got.gs, want.gs, what + " grads.start");
  expect_bits(got.ge, want.ge, what + " grads.end");
  EXPECT_EQ(got.penalty, want.penalty) << what << " penalty";
  EXPECT_GT(want.penalty, 0.0) << what;  // reg 0.01: the penalty's gradient is in grads.transition
}

std::vector<float> get(timitseg_crf* h, const char* name, std::vector<int64_t> shape) {
  std::vector<float> v(static_cast<size_t>(shape.size() == 2 ? shape[0] * shape[1] : shape[0]));
  timitseg_tensor t = f32(v, shape);
  EXPECT_EQ(timitseg_crf_get_param(h, name, &t), TIMITSEG_OK) << timitseg_last_error();
  return v;
}

}  // namespace

// Host backends: bound host memory gives the bits of copied parameters, on both paths, and an
// in-place write between calls is read by the next call (and by get_param).
TEST(CapiBind, BoundParametersEqualCopiedOnesAndInPlaceWritesAreRead) {
  for (int backend : {TIMITSEG_BACKEND_REFERENCE, TIMITSEG_BACKEND_CPU}) {
    Params4 p = random_params(3);
    timitseg_crf* h = create(backend);
    Bind bind(p);
    ASSERT_EQ(bind(h), TIMITSEG_OK) << timitseg_last_error();
    timitseg_crf* want = copied(backend, p);
    const uint64_t fast0 = h->fast_calls;
    expect_same(call(h, 7, false, false), call(want, 7, false, false), "zero-copy");
    EXPECT_GT(h->fast_calls, fast0);
    expect_same(call(h, 8, true, false, true), call(want, 8, true, false, true), "general path, a row of length 0");
    // an optimizer step in place
    for (float& a : p.A) a *= 1.5f;
    for (float& d : p.D) d -= 0.125f;
    timitseg_crf* stepped = copied(backend, p);
    expect_same(call(h, 9, false, false), call(stepped, 9, false, false), "after the in-place write");
    expect_same(call(h, 9, true, false, true), call(stepped, 9, true, false, true), "general path after the write");
    EXPECT_EQ(get(h, "transition", {kC, kC}), p.A);
    EXPECT_EQ(get(h, "duration_bias", {kK, kC}), p.D);
    timitseg_crf_free(stepped);
    timitseg_crf_free(want);
    timitseg_crf_free(h);
  }
}

// set_param, and a bind with four NULLs, end the binding; the bound values are kept.
TEST(CapiBind, SetParamAndAnEmptyBindKeepTheBoundValues) {
  Params4 p = random_params(4);
  const Params4 before = p;
  timitseg_crf* h = create(TIMITSEG_BACKEND_CPU);
  Bind bind(p);
  ASSERT_EQ(bind(h), TIMITSEG_OK);
  std::vector<float> zeros(kC, 0.f);
  timitseg_tensor tz = f32(zeros, {kC});
  ASSERT_EQ(timitseg_crf_set_param(h, "start", &tz), TIMITSEG_OK) << timitseg_last_error();
  p.A[0] += 1.f;  // no longer bound: not read
  Params4 want_p = before;
  want_p.s = zeros;
  timitseg_crf* want = copied(TIMITSEG_BACKEND_CPU, want_p);
  expect_same(call(h, 5, false, false), call(want, 5, false, false), "after set_param");
  EXPECT_EQ(get(h, "transition", {kC, kC}), before.A);

  Params4 q = random_params(5);
  Bind bind_q(q);
  ASSERT_EQ(bind_q(h), TIMITSEG_OK);
  ASSERT_EQ(timitseg_crf_bind_params(h, nullptr, nullptr, nullptr, nullptr), TIMITSEG_OK) << timitseg_last_error();
  const Params4 q_before = q;
  q.D[1] = 7.f;
  timitseg_crf* want_q = copied(TIMITSEG_BACKEND_CPU, q_before);
  expect_same(call(h, 6, false, false), call(want_q, 6, false, false), "after the empty bind");
  timitseg_crf_free(want_q);
  timitseg_crf_free(want);
  timitseg_crf_free(h);
}

// A NaN or +inf written into bound memory is the next call's error, naming the entry; the call after
// the repair runs.
TEST(CapiBind, ABadEntryIsTheNextCallsErrorNamingIt) {
  for (int backend : {TIMITSEG_BACKEND_REFERENCE, TIMITSEG_BACKEND_CPU}) {
    Params4 p = random_params(6);
    timitseg_crf* h = create(backend);
    Bind bind(p);
    ASSERT_EQ(bind(h), TIMITSEG_OK);
    p.A[1 * kC + 2] = std::nanf("");
    for (bool wide : {false, true}) {
      const Outputs bad = call(h, 2, wide, false);
      EXPECT_EQ(bad.status, TIMITSEG_ERR_ARGUMENT) << bad.error;
      EXPECT_NE(bad.error.find("transition[1][2]"), std::string::npos) << bad.error;
    }
    p.A[1 * kC + 2] = 0.25f;
    p.e[3] = std::numeric_limits<float>::infinity();
    const Outputs bad_end = call(h, 2, false, false);
    EXPECT_EQ(bad_end.status, TIMITSEG_ERR_ARGUMENT);
    EXPECT_NE(bad_end.error.find("end[3]"), std::string::npos) << bad_end.error;
    p.e[3] = 0.f;
    EXPECT_EQ(call(h, 2, false, false).status, TIMITSEG_OK);
    timitseg_crf_free(h);
  }
}

// Refused bindings: a status naming the problem, and the handle as it was.
TEST(CapiBind, BadBindingsAreRefusedAndChangeNothing) {
  Params4 p = random_params(7);
  timitseg_crf* h = copied(TIMITSEG_BACKEND_CPU, p);
  const Outputs want = call(h, 3, false, false);
  Params4 q = random_params(8);
  Bind ok(q);
  EXPECT_EQ(timitseg_crf_bind_params(h, &ok.t[0], &ok.t[1], &ok.t[2], nullptr), TIMITSEG_ERR_ARGUMENT);
  EXPECT_NE(std::string(timitseg_last_error()).find("all four"), std::string::npos) << timitseg_last_error();
  std::vector<double> A64(kC * kC, 0.0);
  timitseg_tensor t64 = f64(A64, {kC, kC});
  EXPECT_EQ(timitseg_crf_bind_params(h, &t64, &ok.t[1], &ok.t[2], &ok.t[3]), TIMITSEG_ERR_DTYPE);
  EXPECT_NE(std::string(timitseg_last_error()).find("parameter transition"), std::string::npos);
  timitseg_tensor wrong = f32(q.D, {kC, kK});  // [C][K] instead of [K][C]
  EXPECT_EQ(timitseg_crf_bind_params(h, &ok.t[0], &wrong, &ok.t[2], &ok.t[3]), TIMITSEG_ERR_SHAPE);
  EXPECT_NE(std::string(timitseg_last_error()).find("duration_bias"), std::string::npos);
  timitseg_tensor strided = ok.t[0];
  strided.strides[0] = 2 * kC;  // the rows of a wider array
  EXPECT_EQ(timitseg_crf_bind_params(h, &strided, &ok.t[1], &ok.t[2], &ok.t[3]), TIMITSEG_ERR_SHAPE);
  timitseg_tensor gpu = ok.t[2];
  gpu.device = TIMITSEG_DEVICE_CUDA;
  EXPECT_EQ(timitseg_crf_bind_params(h, &ok.t[0], &ok.t[1], &gpu, &ok.t[3]), TIMITSEG_ERR_DEVICE);
  EXPECT_NE(std::string(timitseg_last_error()).find("parameter start"), std::string::npos) << timitseg_last_error();
  expect_same(call(h, 3, false, false), want, "after the refused bindings");
  timitseg_crf_free(h);

  timitseg_crf* ln = create(TIMITSEG_BACKEND_CPU, 0.0, TIMITSEG_DURATION_LOGNORMAL);
  EXPECT_EQ(ok(ln), TIMITSEG_ERR_ARGUMENT);
  EXPECT_NE(std::string(timitseg_last_error()).find("LOGNORMAL"), std::string::npos) << timitseg_last_error();
  timitseg_crf_free(ln);
}

// A binding between timitseg_crf_nll_begin and _end drops the begun call (its end is an argument
// error, as for any other call between them); the next call reads the new binding.
TEST(CapiBind, BindingBetweenBeginAndEndDropsTheBegunCall) {
  Params4 p = random_params(10), q = random_params(11);
  timitseg_crf* h = create(TIMITSEG_BACKEND_CPU);
  Bind bind_p(p), bind_q(q);
  ASSERT_EQ(bind_p(h), TIMITSEG_OK);
  std::vector<float> x(kB * kT * kC, 0.5f);
  std::vector<int32_t> len = {kT, 3, 1, 5}, lab(kB * kT, 0);
  std::vector<double> out(kB, 0.0);
  timitseg_crf_batch in{};
  in.scores = f32(x, {kB, kT, kC});
  in.lengths = i32(len, {kB});
  timitseg_crf_gold gold{};
  gold.labels = i32(lab, {kB, kT});
  timitseg_tensor nll = f64(out, {kB});
  uint64_t ticket = 0;
  ASSERT_EQ(timitseg_crf_nll_begin(h, &in, &gold, 1.0, 0, &ticket), TIMITSEG_OK) << timitseg_last_error();
  ASSERT_EQ(bind_q(h), TIMITSEG_OK);
  EXPECT_EQ(timitseg_crf_nll_end(h, ticket, &nll, nullptr, nullptr), TIMITSEG_ERR_ARGUMENT);
  EXPECT_NE(std::string(timitseg_last_error()).find("dropped by a later call"), std::string::npos);
  timitseg_crf* want = copied(TIMITSEG_BACKEND_CPU, q);
  expect_same(call(h, 12, false, false), call(want, 12, false, false), "after the rebinding");
  timitseg_crf_free(want);
  timitseg_crf_free(h);
}

// ---- CUDA (skipped without a GPU) -------------------------------------------------

// Device memory bound: the bits of uploaded parameters on the zero-copy path and the general path;
// a cudaMemcpy into the bound memory is read by the next call; a NaN written there is its error.
TEST(CapiBindCuda, BoundDeviceMemoryEqualsUploadedParameters) {
  if (!timitseg_has_cuda() || cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Params4 p = random_params(9);
  std::vector<float>* host[4] = {&p.A, &p.D, &p.s, &p.e};
  void* dev[4];
  for (int i = 0; i < 4; ++i) {
    dev[i] = cuda::device_alloc(host[i]->size() * sizeof(float));
    cuda::copy_to_device(dev[i], host[i]->data(), host[i]->size() * sizeof(float));
  }
  timitseg_crf* h = create(TIMITSEG_BACKEND_CUDA);
  Bind bind(p, dev);
  ASSERT_EQ(bind(h), TIMITSEG_OK) << timitseg_last_error();
  timitseg_crf* want = copied(TIMITSEG_BACKEND_CUDA, p);
  const uint64_t fast0 = h->fast_calls;
  expect_same(call(h, 1, false, true), call(want, 1, false, true), "cuda zero-copy");
  EXPECT_EQ(h->fast_calls, fast0 + 2);
  expect_same(call(h, 2, true, true, true), call(want, 2, true, true, true), "cuda general path");
  for (float& a : p.A) a = -a;
  cuda::copy_to_device(dev[0], p.A.data(), p.A.size() * sizeof(float));
  timitseg_crf* stepped = copied(TIMITSEG_BACKEND_CUDA, p);
  expect_same(call(h, 3, false, true), call(stepped, 3, false, true), "cuda after the write");
  EXPECT_EQ(get(h, "transition", {kC, kC}), p.A);
  const float nan = std::nanf("");
  cuda::copy_to_device(static_cast<float*>(dev[1]) + 2 * kC + 4, &nan, sizeof(float));
  const Outputs bad = call(h, 3, false, true);
  EXPECT_EQ(bad.status, TIMITSEG_ERR_ARGUMENT);
  EXPECT_NE(bad.error.find("duration_bias[2][4]"), std::string::npos) << bad.error;
  timitseg_crf_free(stepped);
  timitseg_crf_free(want);
  timitseg_crf_free(h);
  for (void* d : dev) cuda::device_free(d);
}
