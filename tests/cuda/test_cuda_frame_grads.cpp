// The cuda backend's fused frame-score gradient (Grads::frame_scores,
// grad_frames_entries_kernel + grad_frames_scan_kernel) and its backward in two calls (backward_begin /
// backward_finish, crf/backend.h). Oracle: the same backend's one-call
// backward writing the cum_scores gradient, then the host's
// crf::centered_cumsum_backward per utterance: the fused kernel must give the
// same bits, and the split call the same log Z, gold and parameter gradients.
// Every test skips with a message when the machine has no CUDA device.
#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "crf/cumsum.h"
#include "tests/cuda/cuda_harness.h"
#include "tests/cuda/oracle.h"

namespace timitseg::crf::testing {
namespace {

uint32_t bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof(u));
  return u;
}
uint64_t bits(double v) {
  uint64_t u;
  std::memcpy(&u, &v, sizeof(u));
  return u;
}

struct Outputs {
  std::vector<double> logz, gold;
  std::vector<float> gcum, gx, gA, gD, gs, ge;
};

// backward with every parameter gradient; split: backward_begin + backward_finish
// with frame_scores (and cum_scores when both), else one backward() with cum_scores.
Outputs backward(Backend& be, const Problem& p, bool with_labels, bool split, bool both = false) {
  const Dims& d = p.dims;
  const size_t B = d.B, T = d.T, K = d.K, C = d.C;
  DevProblem dp(p);
  const Params q = dp.params();
  Buffer ws(Memory::device, be.workspace_bytes(d)), logz(Memory::device, B * 8), gold(Memory::device, B * 8),
      gcum(Memory::device, B * (T + 1) * C * 4), gx(Memory::device, B * T * C * 4), gA(Memory::device, C * C * 4),
      gD(Memory::device, K * C * 4), gs(Memory::device, C * 4), ge(Memory::device, C * 4);
  for (Buffer* b : {&logz, &gold, &gcum, &gx, &gA, &gD, &gs, &ge}) poison(*b);
  Grads g;
  g.transition = gA.as<float>();
  g.duration_bias = gD.as<float>();
  g.start = gs.as<float>();
  g.end = ge.as<float>();
  const int32_t* labels = with_labels ? dp.labels.as<int32_t>() : nullptr;
  double* gold_out = with_labels ? gold.as<double>() : nullptr;
  if (split) {
    g.frame_scores = gx.as<float>();
    if (both) g.cum_scores = gcum.as<float>();
    be.backward_begin(d, q, labels, 0.25, logz.as<double>(), gold_out, g, ws.data());
    be.backward_finish(g);
  } else {
    g.cum_scores = gcum.as<float>();
    be.backward(d, q, labels, 0.25, logz.as<double>(), gold_out, g, ws.data());
  }
  Outputs r;
  r.logz = from_device<double>(logz, B);
  if (with_labels) r.gold = from_device<double>(gold, B);
  if (!split || both) r.gcum = from_device<float>(gcum, B * (T + 1) * C);
  if (split) r.gx = from_device<float>(gx, B * T * C);
  r.gA = from_device<float>(gA, C * C);
  r.gD = from_device<float>(gD, K * C);
  r.gs = from_device<float>(gs, C);
  r.ge = from_device<float>(ge, C);
  return r;
}

template <class V>
void expect_bitwise(const V& got, const V& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(bits(got[i]), bits(want[i])) << what << " entry " << i;
}

TEST(CudaFrameGrads, FusedEqualsGradCumThenTheHostCumsumBackward) {
  SKIP_WITHOUT_GPU();
  auto be = make_cuda_backend();
  // TIMIT; small odd sizes; T = 1; a long utterance (187 KB of shared memory); more labels than threads
  const Dims shapes[] = {{32, 200, 30, 39}, {4, 57, 8, 5}, {3, 1, 1, 39}, {2, 600, 60, 39}, {2, 50, 4, 300}};
  uint64_t seed = 5;
  for (const Dims& d : shapes) {
    ASSERT_TRUE(be->fuses_frame_grads(d)) << "T=" << d.T << " C=" << d.C;
    for (bool with_labels : {true, false}) {
      const Problem p = make_problem(d.B, d.T, d.K, d.C, seed++);
      const std::string at = "B=" + std::to_string(d.B) + " T=" + std::to_string(d.T) + " C=" +
                             std::to_string(d.C) + (with_labels ? " labels" : " log Z");
      const Outputs one = backward(*be, p, with_labels, false);
      const Outputs fused = backward(*be, p, with_labels, true);
      const Outputs both = backward(*be, p, with_labels, true, true);
      // the oracle: the host's centered cumsum backward of the one call's cum gradient
      std::vector<float> want(d.B * d.T * d.C);
      for (int64_t b = 0; b < d.B; ++b)
        centered_cumsum_backward<float>(1, d.T, d.C, one.gcum.data() + b * (d.T + 1) * d.C, &p.lengths[b],
                                        want.data() + b * d.T * d.C);
      expect_bitwise(fused.gx, want, "frame_scores " + at);
      expect_bitwise(both.gx, want, "frame_scores (with cum_scores) " + at);
      expect_bitwise(both.gcum, one.gcum, "cum_scores " + at);
      expect_bitwise(fused.logz, one.logz, "log Z " + at);
      expect_bitwise(fused.gold, one.gold, "gold " + at);
      expect_bitwise(fused.gA, one.gA, "transition " + at);
      expect_bitwise(fused.gD, one.gD, "duration_bias " + at);
      expect_bitwise(fused.gs, one.gs, "start " + at);
      expect_bitwise(fused.ge, one.ge, "end " + at);
      bool nonzero = false;  // the comparison is of real values
      for (float v : want) nonzero = nonzero || v != 0.f;
      if (d.T > 1) EXPECT_TRUE(nonzero) << at;  // one frame: x - mean(x) is constant, its gradient 0
    }
  }
}

TEST(CudaFrameGrads, TooLongForSharedMemoryIsOneLineAndTheBackendStaysUsable) {
  SKIP_WITHOUT_GPU();
  auto be = make_cuda_backend();
  const Dims big{1, 100000, 60, 39};
  EXPECT_FALSE(be->fuses_frame_grads(big));
  float marker = 0.f;
  Grads g;
  g.frame_scores = &marker;
  try {
    be->backward_begin(big, Params(), nullptr, 1.0, nullptr, nullptr, g, nullptr);
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("frame_scores gradients need T*C float64"), std::string::npos) << m;
    EXPECT_NE(m.find("T=100000 C=39"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  const Problem p = make_problem(3, 40, 6, 7, 77);
  const Outputs one = backward(*be, p, true, false);
  const Outputs fused = backward(*be, p, true, true);
  expect_bitwise(fused.logz, one.logz, "log Z after the refusal");
}

TEST(CudaFrameGrads, SplitCallsOutOfOrderAreLogicErrors) {
  SKIP_WITHOUT_GPU();
  auto be = make_cuda_backend();
  EXPECT_THROW(be->backward_finish(Grads{}), std::logic_error);
  const Problem p = make_problem(2, 30, 5, 6, 9);
  DevProblem dp(p);
  const Params q = dp.params();
  Buffer ws(Memory::device, be->workspace_bytes(p.dims)), logz(Memory::device, 16), gold(Memory::device, 16),
      lz2(Memory::device, 16);
  Grads wanted;  // no gradients: the marginals are not queued
  be->backward_begin(p.dims, q, dp.labels.as<int32_t>(), 1.0, logz.as<double>(), gold.as<double>(), wanted,
                     ws.data());
  // another call before the finish, and a parameter gradient that the begin did not want
  EXPECT_THROW(be->log_partition(p.dims, q, lz2.as<double>(), ws.data()), std::logic_error);
  EXPECT_THROW(be->backward_begin(p.dims, q, nullptr, 1.0, logz.as<double>(), nullptr, wanted, ws.data()),
               std::logic_error);
  Buffer gA(Memory::device, 6 * 6 * 4);
  Grads more;
  more.transition = gA.as<float>();
  EXPECT_THROW(be->backward_finish(more), std::logic_error);
  // the refused finish ended the begun call: the backend takes new calls, with the same log Z
  be->log_partition(p.dims, q, lz2.as<double>(), ws.data());
  const Outputs one = backward(*be, p, true, false);
  expect_bitwise(from_device<double>(lz2, 2), one.logz, "log Z");
}

}  // namespace
}  // namespace timitseg::crf::testing
