// The cuda backend's deferred status (crf::Backend::set_defer_status /
// check_deferred, crf/semicrf.h): a call returns once queued and its status
// word is read by check_deferred. Oracle: the same backend's synchronous call
// on the same inputs (the same bits; the same exception type and message).
// Every test skips with a message when the machine has no CUDA device.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <typeinfo>

#include "tests/cuda/cuda_harness.h"
#include "tests/cuda/oracle.h"

namespace timitseg::crf::testing {
namespace {

struct Outputs {
  std::vector<double> logz;
  std::vector<float> gcum, gA, gD, gs, ge;
};

// backward with labels and every gradient; deferred: set_defer_status(true) and
// check_deferred() after the call. *error: the message thrown ("" when none),
// *type the exception's type name.
Outputs backward(Backend& be, const Problem& p, bool deferred, std::string* error = nullptr,
                 std::string* type = nullptr) {
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
    if (deferred) be.check_deferred();  // the inputs (dp) and ws are still alive here
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
    const Outputs a = backward(*be, p, false), b = backward(*be, p, true);
    expect_bits(a.logz, b.logz, "log_z");
    expect_bits(a.gcum, b.gcum, "grad cum_scores");
    expect_bits(a.gA, b.gA, "grad transition");
    expect_bits(a.gD, b.gD, "grad duration_bias");
    expect_bits(a.gs, b.gs, "grad start");
    expect_bits(a.ge, b.ge, "grad end");
  }
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
