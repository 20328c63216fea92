// crf::Session on the cuda backend (crf/session.h): reused across batches of
// growing and shrinking size it gives, bitwise, what fresh run_host calls
// give; on a non-default CUDA stream too; its device-resident calls match the
// host runner; after the largest batch nothing more is allocated. Skips
// without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "common/cuda_check.h"
#include "crf/backend.h"
#include "crf/backend_kind.h"
#include "crf/segments.h"
#include "crf/host_run.h"
#include "crf/session.h"
#include "tests/cuda/cuda_harness.h"
#include "tests/support/crf_problems.h"
#include "tests/cuda/test_stream.h"

namespace timitseg::crf::testing {
namespace {

void expect_same(const HostResult& a, const HostResult& b) {
  EXPECT_EQ(a.log_z, b.log_z);
  EXPECT_EQ(a.gold, b.gold);
  EXPECT_EQ(a.viterbi_score, b.viterbi_score);
  EXPECT_TRUE(a.segments == b.segments);
  EXPECT_EQ(a.grad_cum_scores, b.grad_cum_scores);
  EXPECT_EQ(a.grad_transition, b.grad_transition);
  EXPECT_EQ(a.grad_duration_bias, b.grad_duration_bias);
  EXPECT_EQ(a.grad_start, b.grad_start);
  EXPECT_EQ(a.grad_end, b.grad_end);
  EXPECT_EQ(a.boundary_posteriors, b.boundary_posteriors);
}

struct Step {
  Dims dims;
  bool labels;
};
const std::vector<Step> kSteps = {
    {{2, 12, 4, 5}, true},   {{6, 30, 4, 5}, true},  {{1, 7, 4, 5}, false},   {{9, 41, 6, 39}, true},
    {{3, 20, 6, 39}, false}, {{9, 41, 6, 39}, true}, {{4, 9, 2, 5}, true},
};

using testsupport::Stream;

TEST(CudaSession, ReusedAcrossBatchSizesMatchesFreshRunHost) {
  SKIP_WITHOUT_GPU();
  Stream stream;
  for (void* st_ptr : {static_cast<void*>(nullptr), static_cast<void*>(stream.s)}) {
    SCOPED_TRACE(st_ptr ? "non-default stream" : "default stream");
    BackendOptions bo;
    bo.stream = st_ptr;
    auto be = make_backend(BackendKind::cuda, bo);
    EXPECT_EQ(be->stream(), st_ptr);
    auto fresh_be = make_backend(BackendKind::cuda);  // default stream, fresh buffers per call
    auto ref = make_backend(BackendKind::reference);
    Session session(*be);
    EXPECT_EQ(session.stream(), st_ptr);
    uint32_t seed = 70;
    for (const Step& st : kSteps) {
      SCOPED_TRACE(::testing::Message() << "B=" << st.dims.B << " T=" << st.dims.T << " C=" << st.dims.C);
      const Problem pb = random_problem(st.dims, ++seed);
      HostRunOptions opt;
      opt.boundary_posteriors = true;
      opt.scale = 1.0 / static_cast<double>(st.dims.B);
      const int32_t* labels = st.labels ? pb.labels.data() : nullptr;
      const HostResult fresh = run_host(*fresh_be, pb.dims, pb.params(), labels, opt);
      const HostResult reused = session.run_host(pb.dims, pb.params(), labels, opt);
      expect_same(reused, fresh);
      const HostResult want = run_host(*ref, pb.dims, pb.params(), labels, opt);
      EXPECT_LT(rel_err(reused.log_z, want.log_z), 1e-5);
      EXPECT_LT(rel_err(reused.grad_cum_scores, want.grad_cum_scores), 1e-5);
    }
  }
}

TEST(CudaSession, NothingAllocatedAfterTheLargestBatch) {
  SKIP_WITHOUT_GPU();
  auto be = make_backend(BackendKind::cuda);
  Session session(*be);
  const Dims big{9, 41, 6, 39};
  const Problem pb = random_problem(big, 5);
  HostRunOptions opt;
  opt.boundary_posteriors = true;
  session.run_host(big, pb.params(), pb.labels.data(), opt);
  const size_t after_big = session.bytes_reserved();
  EXPECT_GE(after_big, be->workspace_bytes(big));
  uint32_t seed = 90;
  for (const Step& st : kSteps) {
    if (st.dims.B > big.B || st.dims.T > big.T || st.dims.K > big.K || st.dims.C > big.C) continue;
    const Problem q = random_problem(st.dims, ++seed);
    session.run_host(st.dims, q.params(), st.labels ? q.labels.data() : nullptr, opt);
    EXPECT_EQ(session.bytes_reserved(), after_big) << "B=" << st.dims.B << " T=" << st.dims.T;
  }
}

// Device-resident path: inputs already on the device, results to caller
// pointers there, the workspace owned by the session.
TEST(CudaSession, DeviceCallsMatchRunHost) {
  SKIP_WITHOUT_GPU();
  Stream stream;
  auto be = make_backend(BackendKind::cuda);
  Session session(*be, stream.s);
  for (const Step& st : kSteps) {
    const Dims& d = st.dims;
    const size_t B = d.B, T = d.T, K = d.K, C = d.C;
    const Problem pb = random_problem(d, 300 + static_cast<uint32_t>(d.B * 100 + d.T));
    HostRunOptions opt;
    opt.boundary_posteriors = true;
    opt.scale = 0.25;
    const HostResult want = session.run_host(d, pb.params(), pb.labels.data(), opt);
    DevProblem dp(pb);
    const Params q = dp.params();
    Buffer lz(Memory::device, B * 8), gold(Memory::device, B * 8), gc(Memory::device, B * (T + 1) * C * 4),
        gA(Memory::device, C * C * 4), gD(Memory::device, K * C * 4), gs(Memory::device, C * 4),
        ge(Memory::device, C * 4), vs(Memory::device, B * 8), segs(Memory::device, B * T * 12),
        nseg(Memory::device, B * 4), bp(Memory::device, B * (T + 1) * 8);
    const Grads g{gc.as<float>(), gA.as<float>(), gD.as<float>(), gs.as<float>(), ge.as<float>()};
    session.backward(d, q, dp.labels.as<int32_t>(), opt.scale, lz.as<double>(), gold.as<double>(), g);
    session.viterbi(d, q, vs.as<double>(), segs.as<int32_t>(), nseg.as<int32_t>());
    session.boundary_posteriors(d, q, bp.as<double>());
    be->synchronize();
    EXPECT_EQ(from_device<double>(lz, B), want.log_z);
    EXPECT_EQ(from_device<double>(gold, B), want.gold);
    EXPECT_EQ(from_device<float>(gc, B * (T + 1) * C), want.grad_cum_scores);
    EXPECT_EQ(from_device<float>(gA, C * C), want.grad_transition);
    EXPECT_EQ(from_device<float>(gD, K * C), want.grad_duration_bias);
    EXPECT_EQ(from_device<float>(gs, C), want.grad_start);
    EXPECT_EQ(from_device<float>(ge, C), want.grad_end);
    EXPECT_EQ(from_device<double>(vs, B), want.viterbi_score);
    const auto hs = from_device<int32_t>(segs, B * T * 3);
    const auto hn = from_device<int32_t>(nseg, B);
    EXPECT_TRUE(collect_segments(d, hs.data(), hn.data()) == want.segments);
    EXPECT_EQ(from_device<double>(bp, B * (T + 1)), want.boundary_posteriors);
  }
}

}  // namespace
}  // namespace timitseg::crf::testing
