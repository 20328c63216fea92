// The zero-copy path of the C API (capi/crf_fast.h): float32 frame scores,
// int32 lengths and labels, contiguous, in the backend's memory space. It must
// give the same bits as the general path (capi/crf_batch.h) on the same
// backend, which these tests reach with the same values as int64 lengths and
// labels; the CUDA half (skipped without a GPU) checks the device pointers and
// the caller's stream against the reference backend's values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "capi/crf_batch.h"
#include "common/cuda.h"
#include "tests/capi/capi_helpers.h"

using namespace timitseg::capi::testing;
namespace cuda = timitseg::cuda;

namespace {

struct Case {
  int B = 4, T = 13, K = 4, C = 5;
  std::vector<float> x, A, D, s, e;
  std::vector<int32_t> len, lab;
};

Case make_case(unsigned seed, float scale = 1.0f, std::vector<int32_t> len = {13, 7, 1, 10}) {
  Case c;
  c.B = static_cast<int>(len.size());
  std::mt19937 g(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  std::uniform_int_distribution<int> lab(0, c.C - 1);
  auto fill = [&](std::vector<float>& v, size_t k, float sc) {
    v.resize(k);
    for (float& f : v) f = n(g) * sc;
  };
  fill(c.x, static_cast<size_t>(c.B * c.T * c.C), scale);
  fill(c.A, c.C * c.C, 0.5f), fill(c.D, c.K * c.C, 0.5f), fill(c.s, c.C, 0.5f), fill(c.e, c.C, 0.5f);
  c.len = len;
  c.lab.resize(static_cast<size_t>(c.B * c.T));
  for (int32_t& l : c.lab) l = lab(g);
  return c;
}

struct Out {
  std::vector<double> nll, lz;
  std::vector<float> gx, gA, gD, gs, ge;
};

// The tensors of a call: host vectors, or device copies when dev (outputs copied back by fetch()).
struct Call {
  bool dev;
  std::vector<void*> mem;
  explicit Call(bool d) : dev(d) {}
  ~Call() {
    for (void* p : mem) cuda::device_free(p);
  }
  template <class V>
  timitseg_tensor put(V& v, int dtype, std::vector<int64_t> shape) {
    timitseg_tensor t = tensor(v.data(), dtype, shape);
    if (!dev) return t;
    const size_t bytes = v.size() * sizeof(v[0]);
    void* p = cuda::device_alloc(bytes);
    mem.push_back(p);
    cuda::copy_to_device(p, v.data(), bytes);
    t.data = p;
    t.device = TIMITSEG_DEVICE_CUDA;
    return t;
  }
  template <class V>
  void fetch(const timitseg_tensor& t, V& v) {
    if (dev) cuda::copy_to_host(v.data(), t.data, v.size() * sizeof(v[0]));
  }
};

// nll (with every gradient) and log_partition; `wide` passes lengths and labels
// as int64 (the general path), else int32 (the zero-copy path).
// With cumulative, c.x holds cum_scores [B][T+1][C].
Out run(timitseg_crf* h, const Case& c, bool wide, bool dev, double scale = 0.5, bool cumulative = false) {
  const int64_t B = c.B, T = c.T, K = c.K, C = c.C, rows = cumulative ? T + 1 : T;
  Call m(dev);
  std::vector<float> x = c.x;
  std::vector<int32_t> len = c.len, lab = c.lab;
  std::vector<int64_t> len64(len.begin(), len.end()), lab64(lab.begin(), lab.end());
  Out o;
  o.nll.assign(B, 0), o.lz.assign(B, 0), o.gx.assign(B * rows * C, 0), o.gA.assign(C * C, 0), o.gD.assign(K * C, 0),
      o.gs.assign(C, 0), o.ge.assign(C, 0);
  timitseg_crf_batch in{};
  in.scores = m.put(x, TIMITSEG_F32, {B, rows, C});
  in.cumulative = cumulative ? 1 : 0;
  in.lengths = wide ? m.put(len64, TIMITSEG_I64, {B}) : m.put(len, TIMITSEG_I32, {B});
  timitseg_crf_gold gold{};
  gold.labels = wide ? m.put(lab64, TIMITSEG_I64, {B, T}) : m.put(lab, TIMITSEG_I32, {B, T});
  timitseg_crf_grads g{};
  g.scores = m.put(o.gx, TIMITSEG_F32, {B, rows, C});
  g.transition = m.put(o.gA, TIMITSEG_F32, {C, C});
  g.duration_bias = m.put(o.gD, TIMITSEG_F32, {K, C});
  g.start = m.put(o.gs, TIMITSEG_F32, {C});
  g.end = m.put(o.ge, TIMITSEG_F32, {C});
  timitseg_tensor nll = m.put(o.nll, TIMITSEG_F64, {B}), lz = m.put(o.lz, TIMITSEG_F64, {B});
  EXPECT_EQ(timitseg_crf_nll(h, &in, &gold, scale, &nll, &g), TIMITSEG_OK) << timitseg_last_error();
  EXPECT_EQ(timitseg_crf_log_partition(h, &in, &lz), TIMITSEG_OK) << timitseg_last_error();
  m.fetch(nll, o.nll), m.fetch(lz, o.lz), m.fetch(g.scores, o.gx), m.fetch(g.transition, o.gA);
  m.fetch(g.duration_bias, o.gD), m.fetch(g.start, o.gs), m.fetch(g.end, o.ge);
  return o;
}

timitseg_crf* handle(int backend, const Case& c, double reg = 0.01) {
  timitseg_crf_params p = timitseg_crf_default_params();
  p.num_labels = c.C, p.max_duration = c.K, p.backend = backend, p.threads = 2, p.reg = reg;
  timitseg_crf* h = nullptr;
  if (timitseg_crf_create(&p, &h) != TIMITSEG_OK) return nullptr;
  std::vector<float> A = c.A, D = c.D, s = c.s, e = c.e;
  timitseg_tensor tA = f32(A, {c.C, c.C}), tD = f32(D, {c.K, c.C}), ts = f32(s, {c.C}), te = f32(e, {c.C});
  EXPECT_EQ(timitseg_crf_set_param(h, "transition", &tA), TIMITSEG_OK);
  EXPECT_EQ(timitseg_crf_set_param(h, "duration_bias", &tD), TIMITSEG_OK);
  EXPECT_EQ(timitseg_crf_set_param(h, "start", &ts), TIMITSEG_OK);
  EXPECT_EQ(timitseg_crf_set_param(h, "end", &te), TIMITSEG_OK);
  return h;
}

template <class V>
void expect_bits(const V& a, const V& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])), 0) << what << " differs bitwise";
}

void expect_same_bits(const Out& a, const Out& b) {
  expect_bits(a.nll, b.nll, "nll");
  expect_bits(a.lz, b.lz, "log_z");
  expect_bits(a.gx, b.gx, "grads.scores");
  expect_bits(a.gA, b.gA, "grads.transition");
  expect_bits(a.gD, b.gD, "grads.duration_bias");
  expect_bits(a.gs, b.gs, "grads.start");
  expect_bits(a.ge, b.ge, "grads.end");
}

template <class V>
void expect_close(const V& got, const V& want, double rel, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(static_cast<double>(got[i]))) << what << "[" << i << "]";
    EXPECT_LE(std::fabs(double(got[i]) - double(want[i])), rel * std::max(1.0, std::fabs(double(want[i]))))
        << what << "[" << i << "]: " << got[i] << " vs " << want[i];
  }
}

}  // namespace

// On the host backends the zero-copy path serves the int32 call, the general
// path the int64 one, and every output has the same bits.
TEST(CapiFast, HostBackendsFastEqualsGeneralBitwise) {
  for (int backend : {TIMITSEG_BACKEND_REFERENCE, TIMITSEG_BACKEND_CPU})
    for (unsigned seed : {1u, 2u, 3u}) {
      const Case c = make_case(seed, seed == 3 ? 1e4f : 1.0f);
      timitseg_crf* h = handle(backend, c);
      ASSERT_NE(h, nullptr);
      const Out general = run(h, c, true, false);
      EXPECT_EQ(h->fast_calls, 0u);
      const Out fast = run(h, c, false, false);
      EXPECT_EQ(h->fast_calls, 2u) << "the int32 call did not take the zero-copy path";
      expect_same_bits(fast, general);
      for (double v : fast.nll) EXPECT_TRUE(std::isfinite(v) && v >= -1e-6) << v;
      timitseg_crf_free(h);
    }
}

// cum_scores (cumulative = 1) too, with values in row 0 and the padding rows
// that both paths must ignore (the general path copies them as 0).
TEST(CapiFast, CumulativeScoresFastEqualsGeneralBitwise) {
  for (int backend : {TIMITSEG_BACKEND_REFERENCE, TIMITSEG_BACKEND_CPU}) {
    Case c = make_case(7);
    std::mt19937 g(9);
    c.x.resize(static_cast<size_t>(c.B * (c.T + 1) * c.C));
    float run_sum = 0.f;
    for (float& v : c.x) v = (run_sum += std::normal_distribution<float>(0.f, 1.f)(g));
    timitseg_crf* h = handle(backend, c);
    const Out general = run(h, c, true, false, 0.5, true);
    const Out fast = run(h, c, false, false, 0.5, true);
    EXPECT_EQ(h->fast_calls, 2u);
    expect_same_bits(fast, general);
    // row 0 is taken as 0: shifting it changes nothing
    Case shifted = c;
    for (int b = 0; b < c.B; ++b) shifted.x[static_cast<size_t>(b * (c.T + 1) * c.C)] += 100.f;
    expect_same_bits(run(h, shifted, false, false, 0.5, true), fast);
    timitseg_crf_free(h);
  }
}

// A batch with a row of length 0, a strided score tensor or float64 scores
// goes the general path (and still gives the values).
TEST(CapiFast, RowsOfLengthZeroTakeTheGeneralPath) {
  const Case c = make_case(5, 1.0f, {13, 0, 4});
  timitseg_crf* h = handle(TIMITSEG_BACKEND_CPU, c);
  const Out a = run(h, c, false, false);
  EXPECT_EQ(h->fast_calls, 0u);
  EXPECT_EQ(a.nll[1], 0.0);
  // the rows of length >= 1 alone, through the zero-copy path, give the same bits
  Case k = c;
  k.B = 2, k.len = {13, 4};
  k.x.erase(k.x.begin() + c.T * c.C, k.x.begin() + 2 * c.T * c.C);
  k.lab.erase(k.lab.begin() + c.T, k.lab.begin() + 2 * c.T);
  const Out b = run(h, k, false, false);
  EXPECT_EQ(h->fast_calls, 2u);
  EXPECT_EQ(std::memcmp(&a.nll[2], &b.nll[1], sizeof(double)), 0);
  EXPECT_EQ(std::memcmp(&a.gx[2 * c.T * c.C], &b.gx[c.T * c.C], sizeof(float) * c.T * c.C), 0);
  expect_bits(a.gA, b.gA, "grads.transition");
  timitseg_crf_free(h);
}

// ---- CUDA (skipped without a GPU) -------------------------------------------------

#define NEED_GPU()                                                                            \
  if (!timitseg_has_cuda() || cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device"

// Device pointers in, device outputs: the values of the reference backend on
// the host (rel 1e-5), the same bits on a rerun, and the same bits as the
// general path (int64 lengths) on the cuda backend.
TEST(CapiFastCuda, DevicePointersMatchReferenceAndGeneralPath) {
  NEED_GPU();
  for (unsigned seed : {11u, 12u}) {
    const Case c = make_case(seed, 1.0f, {13, 7, 1, 10, 13, 2});
    timitseg_crf* ref = handle(TIMITSEG_BACKEND_REFERENCE, c);
    timitseg_crf* h = handle(TIMITSEG_BACKEND_CUDA, c);
    ASSERT_NE(h, nullptr) << timitseg_last_error();
    const Out want = run(ref, c, false, false);
    const Out fast = run(h, c, false, true);
    EXPECT_EQ(h->fast_calls, 2u);
    const Out again = run(h, c, false, true);
    const Out general = run(h, c, true, true);
    EXPECT_EQ(h->fast_calls, 4u);
    expect_same_bits(fast, again);
    expect_same_bits(fast, general);
    expect_close(fast.nll, want.nll, 1e-5, "nll");
    expect_close(fast.lz, want.lz, 1e-5, "log_z");
    expect_close(fast.gx, want.gx, 1e-5, "grads.scores");
    expect_close(fast.gA, want.gA, 1e-5, "grads.transition");
    expect_close(fast.gD, want.gD, 1e-5, "grads.duration_bias");
    expect_close(fast.gs, want.gs, 1e-5, "grads.start");
    expect_close(fast.ge, want.ge, 1e-5, "grads.end");
    Case cum = c;  // cumulative scores: device copy with row 0 and padding zeroed
    cum.x.resize(static_cast<size_t>(c.B * (c.T + 1) * c.C));
    for (size_t i = 0; i < cum.x.size(); ++i) cum.x[i] = std::sin(0.37f * static_cast<float>(i)) * 3.f;
    const Out cf = run(h, cum, false, true, 0.5, true), cg = run(h, cum, true, true, 0.5, true);
    EXPECT_EQ(h->fast_calls, 6u);
    expect_same_bits(cf, cg);
    expect_close(cf.lz, run(ref, cum, false, false, 0.5, true).lz, 1e-5, "log_z (cumulative)");
    timitseg_crf_free(ref);
    timitseg_crf_free(h);
  }
}

// Scores up to |x| = 1e4 at the TIMIT shape's C and K: finite everywhere, bitwise reruns.
TEST(CapiFastCuda, ExtremeScoresGiveNoNaN) {
  NEED_GPU();
  Case c = make_case(21, 1e4f, {50, 31, 1, 50});
  c.T = 50;
  c.x.resize(static_cast<size_t>(c.B * c.T * c.C));
  c.lab.resize(static_cast<size_t>(c.B * c.T));
  std::mt19937 g(3);
  for (float& v : c.x) v = std::uniform_real_distribution<float>(-1e4f, 1e4f)(g);
  for (int32_t& l : c.lab) l = static_cast<int32_t>(g() % c.C);
  timitseg_crf* h = handle(TIMITSEG_BACKEND_CUDA, c);
  const Out a = run(h, c, false, true), b = run(h, c, false, true);
  EXPECT_EQ(h->fast_calls, 4u);
  expect_same_bits(a, b);
  for (double v : a.nll) EXPECT_TRUE(std::isfinite(v));
  for (float v : a.gx) EXPECT_TRUE(std::isfinite(v));
  for (float v : a.gA) EXPECT_TRUE(std::isfinite(v));
  timitseg_crf* ref = handle(TIMITSEG_BACKEND_REFERENCE, c);
  const Out want = run(ref, c, false, false);
  expect_close(a.lz, want.lz, 1e-5, "log_z");  // nll = log Z - gold cancels: compared through log Z
  timitseg_crf_free(ref);
  timitseg_crf_free(h);
}

// cuda: the lengths are checked by the backend on the device (no read-back).
// A row of length 0 falls back to the general path (no zero-copy call counted)
// with the same values as the general path; a length past T and a label
// outside [0, C) give the general path's one-line errors (the cumsum kernels
// clamp the length: nothing is read outside the rows).
TEST(CapiFastCuda, DeviceCheckedLengthsFallBackToTheGeneralPath) {
  NEED_GPU();
  const Case c = make_case(31, 1.0f, {13, 0, 4, 13});
  timitseg_crf* h = handle(TIMITSEG_BACKEND_CUDA, c);
  ASSERT_NE(h, nullptr) << timitseg_last_error();
  const Out fast = run(h, c, false, true);
  EXPECT_EQ(h->fast_calls, 0u) << "a row of length 0 must take the general path";
  expect_same_bits(fast, run(h, c, true, true));
  EXPECT_EQ(fast.nll[1], 0.0);
  Case bad = c;
  bad.len = {13, 14, 4, 13};
  Call m(true);
  std::vector<float> x = bad.x, lz(static_cast<size_t>(bad.B));
  std::vector<int32_t> len = bad.len, lab = bad.lab;
  timitseg_crf_batch in{};
  in.scores = m.put(x, TIMITSEG_F32, {bad.B, bad.T, bad.C});
  in.lengths = m.put(len, TIMITSEG_I32, {bad.B});
  timitseg_tensor out = m.put(lz, TIMITSEG_F32, {bad.B});
  EXPECT_EQ(timitseg_crf_log_partition(h, &in, &out), TIMITSEG_ERR_LENGTH);
  EXPECT_EQ(std::string(timitseg_last_error()), "timitseg_crf_log_partition: lengths[1] = 14 is outside [0, T = 13]");
  len = c.len;
  len[1] = 5;
  lab[static_cast<size_t>(bad.T + 2)] = bad.C;  // utterance 1, frame 2
  in.lengths = m.put(len, TIMITSEG_I32, {bad.B});
  timitseg_crf_gold gold{};
  gold.labels = m.put(lab, TIMITSEG_I32, {bad.B, bad.T});
  const int st = timitseg_crf_nll(h, &in, &gold, 1.0, &out, nullptr);
  EXPECT_NE(st, TIMITSEG_OK);
  const std::string msg = timitseg_last_error();
  EXPECT_NE(msg.find("gold.labels[1][2] = 5"), std::string::npos) << msg;
  EXPECT_EQ(h->fast_calls, 0u);
  timitseg_crf_free(h);
}
