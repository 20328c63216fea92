// The cuda backend's deferred status (crf::Backend::set_defer_status /
// check_deferred, crf/backend.h): a call returns once queued and its status
// word is read by check_deferred. Oracle: the same backend's synchronous call
// on the same inputs (the same bits; the same exception type and message).
// Every test skips with a message when the machine has no CUDA device.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <typeinfo>

#include "common/cuda_check.h"
#include "tests/cuda/cuda_harness.h"
#include "tests/cuda/oracle.h"
#include "tests/cuda/test_stream.h"

namespace timitseg::crf::testing {
namespace {

// How a deferred call is checked: mark_deferred_end() after it or not, a host
// function that sleeps sleep_ms queued on its stream before the check (work
// queued after the call), and how long check_deferred() took (out).
struct Deferral {
  bool mark = false;
  int sleep_ms = 0;
  double check_ms = 0.0;
};

void CUDART_CB sleep_on_stream(void* ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(reinterpret_cast<intptr_t>(ms)));
}

struct Outputs {
  std::vector<double> logz;
  std::vector<float> gcum, gA, gD, gs, ge;
};

// backward with labels and every gradient; deferred: set_defer_status(true) and
// check_deferred() after the call. *error: the message thrown ("" when none),
// *type the exception's type name.
Outputs backward(Backend& be, const Problem& p, bool deferred, std::string* error = nullptr,
                 std::string* type = nullptr, Deferral* how = nullptr) {
  const Dims& d = p.dims;
  const size_t B = d.B, T = d.T, K = d.K, C = d.C;
  DevProblem dp(p);
  const Params q = dp.params();
  Buffer ws(Memory::device, be.workspace_bytes(d)), logz(Memory::device, B * 8), gold(Memory::device, B * 8),
      gcum(Memory::device, B * (T + 1) * C * 4), gA(Memory::device, C * C * 4), gD(Memory::device, K * C * 4),
      gs(Memory::device, C * 4), ge(Memory::device, C * 4);
  for (Buffer* b : {&logz, &gold, &gcum, &gA, &gD, &gs, &ge}) poison(*b);
  Grads g;
  g.cum_scores = gcum.as<float>();
  g.transition = gA.as<float>();
  g.duration_bias = gD.as<float>();
  g.start = gs.as<float>();
  g.end = ge.as<float>();
  if (error) error->clear();
  be.set_defer_status(deferred);
  try {
    be.backward(d, q, dp.labels.as<int32_t>(), 0.5, logz.as<double>(), gold.as<double>(), g, ws.data());
    be.set_defer_status(false);
    if (deferred && how && how->mark) be.mark_deferred_end();
    if (deferred && how && how->sleep_ms > 0)
      TS_CUDA(cudaLaunchHostFunc(static_cast<cudaStream_t>(be.stream()), sleep_on_stream,
                                 reinterpret_cast<void*>(static_cast<intptr_t>(how->sleep_ms))));
    const auto t0 = std::chrono::steady_clock::now();
    if (deferred) be.check_deferred();  // the inputs (dp) and ws are still alive here
    if (how) how->check_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  } catch (const std::exception& e) {
    be.set_defer_status(false);
    if (!error) throw;
    *error = e.what();
    if (type) *type = dynamic_cast<const std::invalid_argument*>(&e) ? "invalid_argument" : "other";
  }
  Outputs o;
  o.logz = from_device<double>(logz, B);
  o.gcum = from_device<float>(gcum, B * (T + 1) * C);
  o.gA = from_device<float>(gA, C * C);
  o.gD = from_device<float>(gD, K * C);
  o.gs = from_device<float>(gs, C);
  o.ge = from_device<float>(ge, C);
  return o;
}

template <class V>
void expect_bits(const V& a, const V& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])), 0) << what << " differs bitwise";
}

TEST(CudaDeferred, BackwardEqualsSynchronousBitwise) {
  SKIP_WITHOUT_GPU();
  auto be = make_cuda_backend();
  for (uint64_t seed : {3u, 4u}) {
    const Problem p = make_problem(6, 40, 8, 5, seed);
    Deferral marked;
    marked.mark = true;
    const Outputs a = backward(*be, p, false);
    for (Deferral* how : {static_cast<Deferral*>(nullptr), &marked}) {
      SCOPED_TRACE(how ? "mark_deferred_end" : "unmarked");
      const Outputs b = backward(*be, p, true, nullptr, nullptr, how);
      expect_bits(a.logz, b.logz, "log_z");
      expect_bits(a.gcum, b.gcum, "grad cum_scores");
      expect_bits(a.gA, b.gA, "grad transition");
      expect_bits(a.gD, b.gD, "grad duration_bias");
      expect_bits(a.gs, b.gs, "grad start");
      expect_bits(a.ge, b.ge, "grad end");
    }
  }
}

// mark_deferred_end: the check waits for the call's own work only, not for
// work queued on its stream after it (a host function sleeping 600 ms), and
// the outputs are final when it returns (read while the stream still sleeps,
// by copies that do not wait for that non-blocking stream). The oracle of the
// timing: the unmarked check of the same call waits for the sleep. A bad
// input is still thrown by the marked check, with the synchronous message.
TEST(CudaDeferred, MarkedCheckWaitsForTheCallNotForLaterWork) {
  SKIP_WITHOUT_GPU();
  auto be = make_cuda_backend();
  testsupport::Stream s;
  const Problem p = make_problem(6, 40, 8, 5, 3);
  const Outputs want = backward(*be, p, false);
  be->set_stream(s.s);
  Deferral unmarked, marked;
  unmarked.sleep_ms = marked.sleep_ms = 600;
  marked.mark = true;
  const Outputs u = backward(*be, p, true, nullptr, nullptr, &unmarked);
  EXPECT_GE(unmarked.check_ms, 500.0) << "without the mark the check waits for the stream";
  const Outputs m = backward(*be, p, true, nullptr, nullptr, &marked);
  EXPECT_LT(marked.check_ms, 300.0) << "the marked check waited for work queued after the call";
  for (const Outputs* o : {&u, &m}) {
    expect_bits(o->logz, want.logz, "log_z");
    expect_bits(o->gcum, want.gcum, "grad cum_scores");
    expect_bits(o->gA, want.gA, "grad transition");
    expect_bits(o->gD, want.gD, "grad duration_bias");
  }
  Problem bad = p;
  bad.labels[0] = static_cast<int32_t>(p.dims.C);  // utterance 0, frame 0: inside every length
  std::string sync, deferred;
  backward(*be, bad, false, &sync);
  ASSERT_FALSE(sync.empty());
  Deferral bad_marked;
  bad_marked.mark = true;
  bad_marked.sleep_ms = 50;
  backward(*be, bad, true, &deferred, nullptr, &bad_marked);
  EXPECT_EQ(deferred, sync);
  be->set_stream(nullptr);
  TS_CUDA(cudaStreamSynchronize(s.s));
}

// A device-detected error is thrown by check_deferred, not by the call, with the
// synchronous call's type and message; the backend then runs the next call as usual.
TEST(CudaDeferred, ErrorsComeFromCheckDeferredWithTheSameMessage) {
  SKIP_WITHOUT_GPU();
  auto be = make_cuda_backend();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::pair<const char*, std::function<void(Problem&)>>> cases = {
      {"NaN score", [&](Problem& p) { p.cum[p.row(1, 3) + 2] = nan; }},
      {"zero length", [&](Problem& p) { p.lengths[2] = 0; }},
      {"bad label", [&](Problem& p) { p.labels[4] = 4; }},
      {"no finite path", [&](Problem& p) { for (auto& v : p.s) v = -std::numeric_limits<float>::infinity(); }},
  };
  Options o;
  o.vary_lengths = false;
  const Problem good = make_problem(3, 10, 5, 4, 31337, o);
  const Outputs want = backward(*be, good, false);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.first);
    Problem p = good;
    c.second(p);
    std::string sync, sync_type, deferred, deferred_type;
    backward(*be, p, false, &sync, &sync_type);
    ASSERT_FALSE(sync.empty());
    backward(*be, p, true, &deferred, &deferred_type);
    EXPECT_EQ(deferred, sync);
    EXPECT_EQ(deferred_type, sync_type);
    Deferral marked;
    marked.mark = true;
    backward(*be, p, true, &deferred, &deferred_type, &marked);  // the word's early copy read the error
    EXPECT_EQ(deferred, sync);
    EXPECT_EQ(deferred_type, sync_type);
    be->check_deferred();  // nothing pending: a no-op
    const Outputs next = backward(*be, good, true);
    expect_bits(next.logz, want.logz, "log_z after a failed deferred call");
    expect_bits(next.gA, want.gA, "grad transition after a failed deferred call");
  }
}

// While a status is unread, a call that would reuse the status word throws.
TEST(CudaDeferred, UnreadStatusBlocksTheNextCall) {
  SKIP_WITHOUT_GPU();
  auto be = make_cuda_backend();
  const Problem p = make_problem(2, 12, 4, 3, 9);
  DevProblem dp(p);
  const Params q = dp.params();
  Buffer ws(Memory::device, be->workspace_bytes(p.dims)), logz(Memory::device, 2 * 8);
  be->set_defer_status(true);
  be->log_partition(p.dims, q, logz.as<double>(), ws.data());
  be->set_defer_status(false);
  EXPECT_THROW(be->log_partition(p.dims, q, logz.as<double>(), ws.data()), std::logic_error);
  be->check_deferred();
  const auto first = from_device<double>(logz, 2);
  be->log_partition(p.dims, q, logz.as<double>(), ws.data());
  expect_bits(from_device<double>(logz, 2), first, "log_z");
}

}  // namespace
}  // namespace timitseg::crf::testing
