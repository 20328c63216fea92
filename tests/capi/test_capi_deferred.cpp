// The deferred NLL of the C API (timitseg_crf_nll_deferred + timitseg_crf_check,
// capi/crf_deferred.cpp). Oracle: the synchronous timitseg_crf_nll on the same
// handle and inputs: the same bits, the same status and message. Host backends
// run the deferred call synchronously; the CUDA half (skipped without a GPU)
// checks the queued path: errors at the check, rows of length 0 re-run there,
// no leak into the next call, and tickets kept per handle.
#ifdef TIMITSEG_HAVE_CUDA  // a CPU-only build (-DTIMITSEG_CUDA=OFF) links no CUDA runtime
#include <cuda_runtime.h>
#endif
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "capi/crf_batch.h"
#include "common/cuda.h"
#include "tests/capi/capi_helpers.h"

using namespace timitseg::capi::testing;
namespace cuda = timitseg::cuda;

namespace {

constexpr int kC = 5, kK = 4, kT = 12;

struct Problem {
  int B = 0;
  std::vector<float> x, A, D, s, e;
  std::vector<int32_t> len, lab;
};

Problem make_problem(unsigned seed, std::vector<int32_t> len) {
  Problem p;
  p.B = static_cast<int>(len.size());
  p.len = std::move(len);
  std::mt19937 g(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  auto fill = [&](std::vector<float>& v, size_t k) {
    v.resize(k);
    for (float& f : v) f = n(g);
  };
  fill(p.x, static_cast<size_t>(p.B * kT * kC)), fill(p.A, kC * kC), fill(p.D, kK * kC), fill(p.s, kC), fill(p.e, kC);
  p.lab.resize(static_cast<size_t>(p.B * kT));
  for (int32_t& l : p.lab) l = static_cast<int32_t>(g() % kC);
  return p;
}

timitseg_crf* handle(int backend, const Problem& p) {
  timitseg_crf_params prm = timitseg_crf_default_params();
  prm.num_labels = kC, prm.max_duration = kK, prm.backend = backend, prm.threads = 1, prm.reg = 0.01;
  timitseg_crf* h = nullptr;
  if (timitseg_crf_create(&prm, &h) != TIMITSEG_OK) return nullptr;
  std::vector<float> A = p.A, D = p.D, s = p.s, e = p.e;
  timitseg_tensor tA = f32(A, {kC, kC}), tD = f32(D, {kK, kC}), ts = f32(s, {kC}), te = f32(e, {kC});
  EXPECT_EQ(timitseg_crf_set_param(h, "transition", &tA), TIMITSEG_OK);
  EXPECT_EQ(timitseg_crf_set_param(h, "duration_bias", &tD), TIMITSEG_OK);
  EXPECT_EQ(timitseg_crf_set_param(h, "start", &ts), TIMITSEG_OK);
  EXPECT_EQ(timitseg_crf_set_param(h, "end", &te), TIMITSEG_OK);
  return h;
}

// One nll call's tensors (on the device when dev), its outputs read back by result().
struct Call {
  bool dev;
  std::vector<void*> mem;
  std::vector<float> x, gx, gA, gD, gs, ge;
  std::vector<int32_t> len, lab;
  std::vector<double> nll;
  timitseg_crf_batch in{};
  timitseg_crf_gold gold{};
  timitseg_crf_grads g{};
  timitseg_tensor out{};
  Call(const Problem& p, bool d) : dev(d), x(p.x), len(p.len), lab(p.lab) {
    const int64_t B = p.B;
    gx.assign(x.size(), -1.f), gA.assign(kC * kC, -1.f), gD.assign(kK * kC, -1.f), gs.assign(kC, -1.f);
    ge.assign(kC, -1.f), nll.assign(static_cast<size_t>(B), -1.0);
    in.scores = put(x, TIMITSEG_F32, {B, kT, kC});
    in.lengths = put(len, TIMITSEG_I32, {B});
    gold.labels = put(lab, TIMITSEG_I32, {B, kT});
    g.scores = put(gx, TIMITSEG_F32, {B, kT, kC});
    g.transition = put(gA, TIMITSEG_F32, {kC, kC});
    g.duration_bias = put(gD, TIMITSEG_F32, {kK, kC});
    g.start = put(gs, TIMITSEG_F32, {kC});
    g.end = put(ge, TIMITSEG_F32, {kC});
    out = put(nll, TIMITSEG_F64, {B});
  }
  ~Call() {
    for (void* q : mem) cuda::device_free(q);
  }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;
  template <class V>
  timitseg_tensor put(V& v, int dtype, std::vector<int64_t> shape) {
    timitseg_tensor t = tensor(v.data(), dtype, shape);
    if (!dev) return t;
    const size_t bytes = v.size() * sizeof(v[0]);
    void* q = cuda::device_alloc(bytes);
    mem.push_back(q);
    cuda::copy_to_device(q, v.data(), bytes);
    t.data = q;
    t.device = TIMITSEG_DEVICE_CUDA;
    return t;
  }
  template <class V>
  void fetch(const timitseg_tensor& t, V& v) {
    if (dev) cuda::copy_to_host(v.data(), t.data, v.size() * sizeof(v[0]));
  }
  // Every output, as host bytes (nll, then the gradients).
  std::vector<unsigned char> result() {
    fetch(out, nll), fetch(g.scores, gx), fetch(g.transition, gA), fetch(g.duration_bias, gD);
    fetch(g.start, gs), fetch(g.end, ge);
    std::vector<unsigned char> r;
    auto add = [&](const void* p, size_t n) {
      const auto* c = static_cast<const unsigned char*>(p);
      r.insert(r.end(), c, c + n);
    };
    add(nll.data(), nll.size() * 8), add(gx.data(), gx.size() * 4), add(gA.data(), gA.size() * 4);
    add(gD.data(), gD.size() * 4), add(gs.data(), gs.size() * 4), add(ge.data(), ge.size() * 4);
    return r;
  }
  int sync(timitseg_crf* h, bool grads = true) {
    return timitseg_crf_nll(h, &in, &gold, 0.5, &out, grads ? &g : nullptr);
  }
  int deferred(timitseg_crf* h, uint64_t* ticket, bool grads = true) {
    return timitseg_crf_nll_deferred(h, &in, &gold, 0.5, &out, grads ? &g : nullptr, ticket);
  }
  // timitseg_crf_nll_begin + _end (check: NULL waits, else the ticket for timitseg_crf_check)
  int begin_end(timitseg_crf* h, uint64_t* check = nullptr, bool grads = true) {
    uint64_t t = 0;
    const int st = timitseg_crf_nll_begin(h, &in, &gold, 0.5, grads ? 1 : 0, &t);
    if (st != TIMITSEG_OK) return st;
    return timitseg_crf_nll_end(h, t, &out, grads ? &g : nullptr, check);
  }
};

// The outcome of a call: status and message (empty on success).
struct Outcome {
  int status;
  std::string message;
};
Outcome outcome(int status) { return {status, status == TIMITSEG_OK ? "" : timitseg_last_error()}; }

void expect_same(const Outcome& got, const Outcome& want) {
  EXPECT_EQ(got.status, want.status);
  EXPECT_EQ(got.message, want.message);
}

}  // namespace

// Host backends: the deferred call is the synchronous one (same bits), its
// check reports OK with no re-run; tickets count up per handle.
TEST(CapiDeferred, HostBackendsDeferredEqualsSynchronousBitwise) {
  for (int backend : {TIMITSEG_BACKEND_REFERENCE, TIMITSEG_BACKEND_CPU}) {
    const Problem p = make_problem(3, {12, 5, 1, 9});
    timitseg_crf* h = handle(backend, p);
    ASSERT_NE(h, nullptr) << timitseg_last_error();
    Call a(p, false), b(p, false);
    ASSERT_EQ(a.sync(h), TIMITSEG_OK) << timitseg_last_error();
    uint64_t t1 = 0, t2 = 0;
    ASSERT_EQ(b.deferred(h, &t1), TIMITSEG_OK) << timitseg_last_error();
    EXPECT_EQ(b.result(), a.result()) << "the deferred call's outputs differ from the synchronous call's";
    int rerun = -1;
    EXPECT_EQ(timitseg_crf_check(h, t1, &rerun), TIMITSEG_OK);
    EXPECT_EQ(rerun, 0);
    Call c(p, false);
    ASSERT_EQ(c.deferred(h, &t2, false), TIMITSEG_OK);
    EXPECT_EQ(t2, t1 + 1);
    EXPECT_EQ(timitseg_crf_check(h, t2, nullptr), TIMITSEG_OK);
    EXPECT_EQ(timitseg_crf_check(h, t2, nullptr), TIMITSEG_OK) << "a second check of a ticket reports OK";
    EXPECT_EQ(std::memcmp(c.nll.data(), a.nll.data(), a.nll.size() * 8), 0);
    timitseg_crf_free(h);
  }
}

// Errors: on the host the deferred call returns the synchronous call's status
// and message at once; bad tickets and NULL arguments are one line each.
TEST(CapiDeferred, ErrorsReadAsTheSynchronousCall) {
  Problem p = make_problem(4, {12, 5, 3});
  p.lab[static_cast<size_t>(kT + 2)] = kC;  // utterance 1, frame 2: outside [0, C)
  timitseg_crf* h = handle(TIMITSEG_BACKEND_CPU, p);
  Call a(p, false), b(p, false);
  const Outcome want = outcome(a.sync(h));
  ASSERT_NE(want.status, TIMITSEG_OK);
  EXPECT_NE(want.message.find("gold.labels[1][2] = 5"), std::string::npos) << want.message;
  uint64_t t = 99;
  expect_same(outcome(b.deferred(h, &t)), want);
  EXPECT_EQ(t, 0u) << "a failed call issues no ticket";
  EXPECT_EQ(timitseg_crf_check(h, 0, nullptr), TIMITSEG_ERR_ARGUMENT);
  EXPECT_EQ(std::string(timitseg_last_error()),
            "timitseg_crf_nll: ticket 0 was not issued by this handle (last: " + std::to_string(h->last_ticket) + ")");
  EXPECT_EQ(timitseg_crf_check(h, h->last_ticket + 1, nullptr), TIMITSEG_ERR_ARGUMENT);
  EXPECT_EQ(b.deferred(h, nullptr), TIMITSEG_ERR_ARGUMENT);
  EXPECT_EQ(std::string(timitseg_last_error()), "timitseg_crf_nll: ticket is NULL");
  EXPECT_EQ(timitseg_crf_check(nullptr, 1, nullptr), TIMITSEG_ERR_ARGUMENT);
  EXPECT_EQ(std::string(timitseg_last_error()), "timitseg_crf_nll: crf is NULL");
  // the next good call runs as usual
  const Problem good = make_problem(4, {12, 5, 3});
  Call c(good, false), d(good, false);
  ASSERT_EQ(c.sync(h), TIMITSEG_OK);
  ASSERT_EQ(d.deferred(h, &t), TIMITSEG_OK);
  EXPECT_EQ(timitseg_crf_check(h, t, nullptr), TIMITSEG_OK);
  EXPECT_EQ(d.result(), c.result());
  timitseg_crf_free(h);
}

// nll in two calls (timitseg_crf_nll_begin / _end): the synchronous call's bits
// on the host backends, waiting or deferred; misuse is one argument error each.
TEST(CapiNllBeginEnd, HostBackendsEqualTheOneCallBitwise) {
  for (int backend : {TIMITSEG_BACKEND_REFERENCE, TIMITSEG_BACKEND_CPU}) {
    const Problem p = make_problem(21, {12, 5, 1, 9});
    timitseg_crf* h = handle(backend, p);
    ASSERT_NE(h, nullptr) << timitseg_last_error();
    for (bool grads : {true, false}) {
      Call a(p, false), b(p, false), c(p, false);
      ASSERT_EQ(a.sync(h, grads), TIMITSEG_OK) << timitseg_last_error();
      ASSERT_EQ(b.begin_end(h, nullptr, grads), TIMITSEG_OK) << timitseg_last_error();
      EXPECT_EQ(b.result(), a.result()) << "backend " << backend << " grads " << grads;
      uint64_t t = 0;
      ASSERT_EQ(c.begin_end(h, &t, grads), TIMITSEG_OK) << timitseg_last_error();
      EXPECT_GE(t, 1u);
      EXPECT_EQ(timitseg_crf_check(h, t, nullptr), TIMITSEG_OK);
      EXPECT_EQ(c.result(), a.result());
      bool nonzero = false;
      for (double v : a.nll) nonzero = nonzero || v != 0.0;
      EXPECT_TRUE(nonzero);
    }
    timitseg_crf_free(h);
  }
}

TEST(CapiNllBeginEnd, MisuseIsOneArgumentError) {
  const Problem p = make_problem(22, {12, 5, 3});
  timitseg_crf* h = handle(TIMITSEG_BACKEND_CPU, p);
  Call a(p, false), b(p, false);
  uint64_t t = 0;
  EXPECT_EQ(timitseg_crf_nll_end(h, 7, &a.out, &a.g, nullptr), TIMITSEG_ERR_ARGUMENT);
  EXPECT_EQ(std::string(timitseg_last_error()),
            "timitseg_crf_nll: ticket 7 is not a begun nll of this handle (ended already, or dropped by a later "
            "call on the handle)");
  // another call between begin and end drops the begun one
  ASSERT_EQ(timitseg_crf_nll_begin(h, &a.in, &a.gold, 0.5, 1, &t), TIMITSEG_OK);
  std::vector<double> lz(3);
  timitseg_tensor tz = tensor(lz.data(), TIMITSEG_F64, {3});
  ASSERT_EQ(timitseg_crf_log_partition(h, &a.in, &tz), TIMITSEG_OK);
  EXPECT_EQ(timitseg_crf_nll_end(h, t, &a.out, &a.g, nullptr), TIMITSEG_ERR_ARGUMENT);
  EXPECT_NE(std::string(timitseg_last_error()).find("dropped by a later call"), std::string::npos);
  // gradients at the end of a call begun without them
  ASSERT_EQ(timitseg_crf_nll_begin(h, &a.in, &a.gold, 0.5, 0, &t), TIMITSEG_OK);
  EXPECT_EQ(timitseg_crf_nll_end(h, t, &a.out, &a.g, nullptr), TIMITSEG_ERR_ARGUMENT);
  EXPECT_EQ(std::string(timitseg_last_error()),
            "timitseg_crf_nll: grads given to the end of an nll begun with with_grads = 0");
  EXPECT_EQ(timitseg_crf_nll_begin(h, &a.in, &a.gold, 0.5, 1, nullptr), TIMITSEG_ERR_ARGUMENT);
  EXPECT_EQ(std::string(timitseg_last_error()), "timitseg_crf_nll: ticket is NULL");
  ASSERT_EQ(timitseg_crf_nll_begin(h, &a.in, &a.gold, 0.5, 1, &t), TIMITSEG_OK);
  EXPECT_EQ(timitseg_crf_nll_end(h, t, nullptr, &a.g, nullptr), TIMITSEG_ERR_ARGUMENT);
  EXPECT_EQ(std::string(timitseg_last_error()), "timitseg_crf_nll: nll is NULL");
  // the handle works on, with the one call's bits
  ASSERT_EQ(a.sync(h), TIMITSEG_OK);
  ASSERT_EQ(b.begin_end(h), TIMITSEG_OK) << timitseg_last_error();
  EXPECT_EQ(b.result(), a.result());
  timitseg_crf_free(h);
}

// ---- CUDA (skipped without a GPU) -------------------------------------------------

#define NEED_GPU()                                                                            \
  if (!timitseg_has_cuda() || cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device"

// The queued path: the same bits as the synchronous call (with and without
// gradients), the call left pending until its check, one zero-copy call each.
TEST(CapiDeferredCuda, DeferredEqualsSynchronousBitwise) {
  NEED_GPU();
  const Problem p = make_problem(11, {12, 7, 1, 10, 12, 2});
  timitseg_crf* h = handle(TIMITSEG_BACKEND_CUDA, p);
  ASSERT_NE(h, nullptr) << timitseg_last_error();
  for (bool grads : {true, false}) {
    Call a(p, true), b(p, true);
    ASSERT_EQ(a.sync(h, grads), TIMITSEG_OK) << timitseg_last_error();
    uint64_t t = 0;
    const uint64_t before = h->fast_calls;
    ASSERT_EQ(b.deferred(h, &t, grads), TIMITSEG_OK) << timitseg_last_error();
    EXPECT_TRUE(h->deferred.has_value()) << "the cuda zero-copy call must return before its check";
    int rerun = -1;
    ASSERT_EQ(timitseg_crf_check(h, t, &rerun), TIMITSEG_OK) << timitseg_last_error();
    EXPECT_EQ(rerun, 0);
    EXPECT_FALSE(h->deferred.has_value());
    EXPECT_EQ(h->fast_calls, before + 1);
    EXPECT_EQ(b.result(), a.result()) << "grads " << grads;
  }
  timitseg_crf_free(h);
}

// A bad label or length: the deferred call returns OK, its check the
// synchronous call's status and message; the next call is not affected.
TEST(CapiDeferredCuda, BadInputsRaiseAtTheCheckAndDoNotLeak) {
  NEED_GPU();
  const Problem good = make_problem(12, {12, 5, 3, 12});
  Problem bad_label = good, bad_length = good;
  bad_label.lab[static_cast<size_t>(kT + 2)] = kC;
  bad_length.len[2] = kT + 1;
  timitseg_crf* h = handle(TIMITSEG_BACKEND_CUDA, good);
  ASSERT_NE(h, nullptr) << timitseg_last_error();
  Call ref(good, true);
  ASSERT_EQ(ref.sync(h), TIMITSEG_OK);
  const std::vector<unsigned char> want = ref.result();
  for (const Problem* bad : {&bad_label, &bad_length}) {
    Call a(*bad, true), b(*bad, true), c(good, true);
    const Outcome sync = outcome(a.sync(h));
    ASSERT_NE(sync.status, TIMITSEG_OK);
    uint64_t t = 0;
    ASSERT_EQ(b.deferred(h, &t), TIMITSEG_OK) << "the device check's error belongs to the check";
    int rerun = -1;
    expect_same(outcome(timitseg_crf_check(h, t, &rerun)), sync);
    EXPECT_EQ(rerun, 0);
    uint64_t t2 = 0;
    ASSERT_EQ(c.deferred(h, &t2), TIMITSEG_OK) << timitseg_last_error();
    EXPECT_EQ(timitseg_crf_check(h, t2, nullptr), TIMITSEG_OK) << timitseg_last_error();
    EXPECT_EQ(c.result(), want) << "a failed deferred call changed the next one";
  }
  EXPECT_NE(h->fast_calls, 0u);
  timitseg_crf_free(h);
}

// A row of length 0: the device path cannot take it; the check re-runs the
// general path (rerun = 1) and the outputs are the synchronous call's.
TEST(CapiDeferredCuda, RowOfLengthZeroRerunsAtTheCheck) {
  NEED_GPU();
  const Problem p = make_problem(13, {12, 0, 4, 12});
  timitseg_crf* h = handle(TIMITSEG_BACKEND_CUDA, p);
  Call a(p, true), b(p, true);
  ASSERT_EQ(a.sync(h), TIMITSEG_OK) << timitseg_last_error();
  uint64_t t = 0;
  ASSERT_EQ(b.deferred(h, &t), TIMITSEG_OK);
  int rerun = -1;
  ASSERT_EQ(timitseg_crf_check(h, t, &rerun), TIMITSEG_OK) << timitseg_last_error();
  EXPECT_EQ(rerun, 1);
  EXPECT_EQ(b.result(), a.result());
  EXPECT_EQ(b.nll[1], 0.0);
  timitseg_crf_free(h);
}

// Another call on the handle resolves a pending deferred call (its outcome kept
// for its check, in any order); a second handle's tickets are its own.
TEST(CapiDeferredCuda, PendingStateIsPerHandle) {
  NEED_GPU();
  const Problem good = make_problem(14, {12, 5, 3, 12});
  Problem bad = good;
  bad.lab[static_cast<size_t>(3 * kT + 1)] = -1;
  timitseg_crf* h = handle(TIMITSEG_BACKEND_CUDA, good);
  timitseg_crf* h2 = handle(TIMITSEG_BACKEND_CUDA, good);
  Call ref(bad, true);
  const Outcome want = outcome(ref.sync(h));
  ASSERT_NE(want.status, TIMITSEG_OK);
  Call a(bad, true), b(good, true), c(good, true), d(good, true);
  uint64_t ta = 0, tb = 0, tc = 0;
  ASSERT_EQ(a.deferred(h, &ta), TIMITSEG_OK);
  ASSERT_EQ(c.deferred(h2, &tc), TIMITSEG_OK);  // the other handle: nothing of h's is resolved
  EXPECT_TRUE(h->deferred.has_value());
  ASSERT_EQ(b.deferred(h, &tb), TIMITSEG_OK);   // resolves a's status and keeps its error
  EXPECT_EQ(h->resolved.count(ta), 1u);
  EXPECT_EQ(timitseg_crf_check(h, tb, nullptr), TIMITSEG_OK) << timitseg_last_error();
  expect_same(outcome(timitseg_crf_check(h, ta, nullptr)), want);
  EXPECT_TRUE(h->resolved.empty()) << "a checked outcome is dropped";
  EXPECT_EQ(timitseg_crf_check(h2, tc, nullptr), TIMITSEG_OK) << timitseg_last_error();
  ASSERT_EQ(d.sync(h), TIMITSEG_OK);
  EXPECT_EQ(b.result(), d.result());
  EXPECT_EQ(c.result(), d.result());
  timitseg_crf_free(h);
  timitseg_crf_free(h2);
}

// The two calls on the cuda zero-copy path: queued at the begin (the handle
// holds it), the one call's bits after the end, waiting or deferred; a row of
// length 0 re-run at the check; a bad label raised at the check; another call
// between begin and end drops the begun work and the handle works on.
TEST(CapiNllBeginEndCuda, QueuedHalvesEqualTheOneCallBitwise) {
  NEED_GPU();
  const Problem p = make_problem(23, {12, 7, 1, 10, 12, 2});
  timitseg_crf* h = handle(TIMITSEG_BACKEND_CUDA, p);
  ASSERT_NE(h, nullptr) << timitseg_last_error();
  Call a(p, true), b(p, true), c(p, true);
  ASSERT_EQ(a.sync(h), TIMITSEG_OK) << timitseg_last_error();
  uint64_t t = 0;
  ASSERT_EQ(timitseg_crf_nll_begin(h, &b.in, &b.gold, 0.5, 1, &t), TIMITSEG_OK) << timitseg_last_error();
  ASSERT_TRUE(h->begun.has_value());
  EXPECT_TRUE(h->begun->queued) << "the begin must queue the recurrences";
  EXPECT_TRUE(h->begun->frames) << "B 6 T 12 C 5: the backend writes the frame gradient itself";
  const uint64_t before = h->fast_calls;
  ASSERT_EQ(timitseg_crf_nll_end(h, t, &b.out, &b.g, nullptr), TIMITSEG_OK) << timitseg_last_error();
  EXPECT_EQ(h->fast_calls, before + 1);
  EXPECT_EQ(b.result(), a.result());
  uint64_t check = 0;
  ASSERT_EQ(c.begin_end(h, &check), TIMITSEG_OK) << timitseg_last_error();
  EXPECT_TRUE(h->deferred.has_value());
  ASSERT_EQ(timitseg_crf_check(h, check, nullptr), TIMITSEG_OK) << timitseg_last_error();
  EXPECT_EQ(c.result(), a.result());

  const Problem zero = make_problem(24, {12, 0, 4, 12});
  Call z1(zero, true), z2(zero, true);
  ASSERT_EQ(z1.sync(h), TIMITSEG_OK) << timitseg_last_error();
  ASSERT_EQ(z2.begin_end(h, &check), TIMITSEG_OK);
  int rerun = -1;
  ASSERT_EQ(timitseg_crf_check(h, check, &rerun), TIMITSEG_OK) << timitseg_last_error();
  EXPECT_EQ(rerun, 1);
  EXPECT_EQ(z2.result(), z1.result());

  Problem bad = p;
  bad.lab[static_cast<size_t>(kT + 2)] = kC;
  Call b1(bad, true), b2(bad, true);
  const Outcome want = outcome(b1.sync(h));
  ASSERT_NE(want.status, TIMITSEG_OK);
  expect_same(outcome(b2.begin_end(h)), want);

  Call d(p, true), e(p, true);
  ASSERT_EQ(timitseg_crf_nll_begin(h, &d.in, &d.gold, 0.5, 1, &t), TIMITSEG_OK);
  std::vector<double> lz(p.B);
  Call lzc(p, true);
  timitseg_tensor tz = lzc.put(lz, TIMITSEG_F64, {p.B});
  ASSERT_EQ(timitseg_crf_log_partition(h, &lzc.in, &tz), TIMITSEG_OK) << timitseg_last_error();
  EXPECT_EQ(timitseg_crf_nll_end(h, t, &d.out, &d.g, nullptr), TIMITSEG_ERR_ARGUMENT);
  ASSERT_EQ(e.begin_end(h), TIMITSEG_OK) << timitseg_last_error();
  EXPECT_EQ(e.result(), a.result());
  timitseg_crf_free(h);
}

#ifdef TIMITSEG_HAVE_CUDA
namespace {
void CUDART_CB sleep_600ms(void*) { std::this_thread::sleep_for(std::chrono::milliseconds(600)); }

// Milliseconds that f() takes.
template <class F>
double ms_of(F f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

// A deferred call's check, and the next call on the handle (which reads the
// previous call's status first), wait for that call's work only, not for work
// queued on its stream after it (a host function sleeping 600 ms on a
// non-blocking stream): SemiCRF(check="deferred")'s next forward never waits
// for the layers queued before it. The outputs are final at the check (read
// by copies that do not wait for that stream) and the synchronous call's bits.
TEST(CapiDeferredCuda, CheckWaitsForTheCallNotForLaterWork) {
  NEED_GPU();
  const Problem p = make_problem(15, {12, 7, 1, 10});
  timitseg_crf* h = handle(TIMITSEG_BACKEND_CUDA, p);
  ASSERT_NE(h, nullptr) << timitseg_last_error();
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  Call ref(p, true), a(p, true), b(p, true);
  ASSERT_EQ(ref.sync(h), TIMITSEG_OK) << timitseg_last_error();
  const std::vector<unsigned char> want = ref.result();
  a.in.stream = b.in.stream = s;
  uint64_t ta = 0, tb = 0;
  ASSERT_EQ(a.deferred(h, &ta), TIMITSEG_OK) << timitseg_last_error();
  ASSERT_EQ(cudaLaunchHostFunc(s, sleep_600ms, nullptr), cudaSuccess);
  int st = -1;
  EXPECT_LT(ms_of([&] { st = timitseg_crf_check(h, ta, nullptr); }), 300.0) << "the check waited for later work";
  EXPECT_EQ(st, TIMITSEG_OK) << timitseg_last_error();
  EXPECT_EQ(a.result(), want);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  ASSERT_EQ(a.deferred(h, &ta), TIMITSEG_OK) << timitseg_last_error();
  ASSERT_EQ(cudaLaunchHostFunc(s, sleep_600ms, nullptr), cudaSuccess);
  EXPECT_LT(ms_of([&] { st = b.begin_end(h, &tb); }), 300.0) << "the next call waited for later work";
  EXPECT_EQ(st, TIMITSEG_OK) << timitseg_last_error();
  EXPECT_EQ(timitseg_crf_check(h, ta, nullptr), TIMITSEG_OK) << timitseg_last_error();
  EXPECT_EQ(timitseg_crf_check(h, tb, nullptr), TIMITSEG_OK) << timitseg_last_error();
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(a.result(), want);
  EXPECT_EQ(b.result(), want);
  cudaStreamDestroy(s);
  timitseg_crf_free(h);
}
#endif  // TIMITSEG_HAVE_CUDA (the test above)
