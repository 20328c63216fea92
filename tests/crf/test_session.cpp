// crf::Session (crf/session.h): one session reused across batches of growing
// and shrinking size gives, bitwise, what fresh run_host calls give (each a
// temporary session with fresh buffers), its device-resident calls match the
// host runner, and after the largest batch nothing more is reserved.
#include <gtest/gtest.h>

#include <vector>

#include "crf/backend.h"
#include "crf/backend_kind.h"
#include "crf/host_run.h"
#include "crf/segments.h"
#include "crf/session.h"
#include "helpers.h"

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

// Batches of growing and shrinking size (B, T), with and without labels.
struct Step {
  Dims dims;
  bool labels;
};
const std::vector<Step> kSteps = {
    {{2, 12, 4, 5}, true},  {{6, 30, 4, 5}, true},  {{1, 7, 4, 5}, false}, {{9, 41, 6, 5}, true},
    {{3, 20, 6, 5}, false}, {{9, 41, 6, 5}, true},  {{4, 9, 2, 5}, true},
};

TEST(Session, ReusedAcrossBatchSizesMatchesFreshRunHost) {
  for (const std::string name : {"cpu", "reference"}) {
    SCOPED_TRACE(name);
    auto be = make_backend(backend_kind(name));
    Session session(*be);
    uint32_t seed = 70;
    for (const Step& st : kSteps) {
      SCOPED_TRACE(::testing::Message() << "B=" << st.dims.B << " T=" << st.dims.T << " K=" << st.dims.K);
      const Problem pb = random_problem(st.dims, ++seed);
      HostRunOptions opt;
      opt.boundary_posteriors = true;
      opt.scale = 1.0 / static_cast<double>(st.dims.B);
      const int32_t* labels = st.labels ? pb.labels.data() : nullptr;
      const HostResult fresh = run_host(*be, pb.dims, pb.params(), labels, opt);
      const HostResult reused = session.run_host(pb.dims, pb.params(), labels, opt);
      expect_same(reused, fresh);
      // The values are real results, not an echo of one buffer: log Z agrees
      // with the brute-force-checked reference to rounding.
      auto ref = make_backend(BackendKind::reference);
      const HostResult want = run_host(*ref, pb.dims, pb.params(), labels, opt);
      expect_close(reused.log_z, want.log_z, 1e-9, 1e-9, "log_z");
    }
  }
}

TEST(Session, NothingReservedAfterTheLargestBatch) {
  auto be = make_backend(BackendKind::cpu);
  Session session(*be);
  const Dims big{9, 41, 6, 5};
  const Problem pb = random_problem(big, 5);
  session.run_host(big, pb.params(), pb.labels.data());
  const size_t after_big = session.bytes_reserved();
  EXPECT_GE(after_big, be->workspace_bytes(big));
  uint32_t seed = 90;
  for (const Step& st : kSteps) {
    if (st.dims.B > big.B || st.dims.T > big.T || st.dims.K > big.K) continue;
    const Problem q = random_problem(st.dims, ++seed);
    session.run_host(st.dims, q.params(), st.labels ? q.labels.data() : nullptr);
    EXPECT_EQ(session.bytes_reserved(), after_big) << "B=" << st.dims.B << " T=" << st.dims.T;
  }
}

// The device-resident path (here: host pointers, the cpu backend's memory
// space) gives what the host runner gives.
TEST(Session, BackendCallsMatchRunHost) {
  auto be = make_backend(BackendKind::cpu);
  Session session(*be);
  for (const Step& st : kSteps) {
    const Dims& d = st.dims;
    const Problem pb = random_problem(d, 300 + static_cast<uint32_t>(d.B * 100 + d.T));
    const int32_t* labels = st.labels ? pb.labels.data() : nullptr;
    HostRunOptions opt;
    opt.boundary_posteriors = true;
    opt.scale = 0.25;
    const HostResult want = run_host(*be, d, pb.params(), labels, opt);
    HostResult got;
    got.log_z.resize(d.B);
    if (labels) got.gold.resize(d.B);
    got.grad_cum_scores.resize(d.B * (d.T + 1) * d.C);
    got.grad_transition.resize(d.C * d.C);
    got.grad_duration_bias.resize(d.K * d.C);
    got.grad_start.resize(d.C);
    got.grad_end.resize(d.C);
    const Grads g{got.grad_cum_scores.data(), got.grad_transition.data(), got.grad_duration_bias.data(),
                  got.grad_start.data(), got.grad_end.data()};
    session.backward(d, pb.params(), labels, opt.scale, got.log_z.data(), labels ? got.gold.data() : nullptr, g);
    got.viterbi_score.resize(d.B);
    std::vector<int32_t> segs(d.B * d.T * 3), nseg(d.B);
    session.viterbi(d, pb.params(), got.viterbi_score.data(), segs.data(), nseg.data());
    got.segments = collect_segments(d, segs.data(), nseg.data());
    got.boundary_posteriors.resize(d.B * (d.T + 1));
    session.boundary_posteriors(d, pb.params(), got.boundary_posteriors.data());
    expect_same(got, want);
    std::vector<double> lz(d.B);
    session.log_partition(d, pb.params(), lz.data());
    EXPECT_EQ(lz, want.log_z);
    if (labels) {
      std::vector<double> gold(d.B);
      session.gold_score(d, pb.params(), labels, gold.data());
      EXPECT_EQ(gold, want.gold);
    }
  }
}

TEST(Session, BackendOptionsThreadsGiveIdenticalBits) {
  const Problem pb = random_problem(Dims{7, 25, 5, 4}, 11);
  HostRunOptions opt;
  opt.boundary_posteriors = true;
  BackendOptions one, many;
  one.threads = 1;
  many.threads = 3;
  auto a = make_backend(BackendKind::cpu, one), b = make_backend(BackendKind::cpu, many);
  expect_same(run_host(*a, pb.dims, pb.params(), pb.labels.data(), opt),
              run_host(*b, pb.dims, pb.params(), pb.labels.data(), opt));
  EXPECT_EQ(a->stream(), nullptr);  // host backends ignore streams
  a->set_stream(reinterpret_cast<void*>(0x10));
  EXPECT_EQ(a->stream(), nullptr);
}

}  // namespace
}  // namespace timitseg::crf::testing
