// Brute-force enumeration of every segmentation for tiny cases (T <= 6,
// C <= 3, K <= 3, with and without start/end): log Z, sum of P(y) = 1, every
// gradient as an expectation, gold score, the Viterbi argmax and the boundary
// posteriors. Reference (float64 entry points) to 1e-9, cpu to 1e-5 relative.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "crf/backend_kind.h"
#include "crf/cpu/cpu.h"
#include "crf/host_run.h"
#include "crf/reference/reference.h"
#include "crf/segments.h"
#include "helpers.h"

namespace timitseg::crf::testing {
namespace {

std::vector<Problem> tiny_problems() { return tiny_exact_problems({1, 2, 3, 5, 6}, {1, 2, 3}, {1, 2, 3}, 1); }

std::string describe(const Problem& pb) {
  return "T=" + std::to_string(pb.dims.T) + " C=" + std::to_string(pb.dims.C) + " K=" + std::to_string(pb.dims.K) +
         (pb.s.empty() ? " (no start/end)" : " (start/end)");
}

TEST(BruteForce, ReferenceFloat64MatchesEnumerationTo1e9) {
  const double scale = 0.75;
  for (const Problem& pb : tiny_problems()) {
    SCOPED_TRACE(describe(pb));
    const Expected ex = brute_force(pb, scale);
    const int64_t B = pb.dims.B, T = pb.dims.T, K = pb.dims.K, C = pb.dims.C;
    std::vector<double> cum(pb.cum.begin(), pb.cum.end()), A(pb.A.begin(), pb.A.end()), D(pb.D.begin(), pb.D.end()),
        s(pb.s.begin(), pb.s.end()), e(pb.e.begin(), pb.e.end());
    reference::ParamsF64 p{cum.data(), A.data(), D.data(), s.empty() ? nullptr : s.data(),
                           e.empty() ? nullptr : e.data(), pb.lengths.data()};
    std::vector<double> lz(B), gold(B), gc(B * (T + 1) * C), ga(C * C), gd(K * C), gs(C), ge(C);
    reference::backward_f64(pb.dims, p, pb.labels.data(), scale, lz.data(), gold.data(),
                            reference::GradsF64{gc.data(), ga.data(), gd.data(), gs.data(), ge.data()});
    expect_close(lz, ex.log_z, 1e-9, 1e-12, "log_z");
    expect_close(gold, ex.gold, 1e-9, 1e-12, "gold");
    expect_close(gc, ex.g_cum, 1e-9, 1e-12, "grad_cum");
    expect_close(ga, ex.g_A, 1e-9, 1e-12, "grad_transition");
    expect_close(gd, ex.g_D, 1e-9, 1e-12, "grad_duration_bias");
    expect_close(gs, ex.g_s, 1e-9, 1e-12, "grad_start");
    expect_close(ge, ex.g_e, 1e-9, 1e-12, "grad_end");
    std::vector<double> lz2(B), vs(B), bp(B * (T + 1));
    reference::log_partition_f64(pb.dims, p, lz2.data());
    expect_close(lz2, ex.log_z, 1e-9, 1e-12, "log_partition");
    std::vector<double> g2(B);
    reference::gold_score_f64(pb.dims, p, pb.labels.data(), g2.data());
    expect_close(g2, ex.gold, 1e-9, 1e-12, "gold_score");
    std::vector<int32_t> segs(B * T * 3), ns(B);
    reference::viterbi_f64(pb.dims, p, vs.data(), segs.data(), ns.data());
    expect_close(vs, ex.vscore, 1e-9, 1e-12, "viterbi_score");
    EXPECT_EQ(collect_segments(pb.dims, segs.data(), ns.data()), ex.vsegs);
    reference::boundary_posteriors_f64(pb.dims, p, bp.data());
    expect_close(bp, ex.bpost, 1e-9, 1e-12, "boundary_posteriors");
    // sum over all segmentations of P(y) = exp(score - log Z) is 1, with the backend's log Z.
    for (int64_t b = 0; b < B; ++b) {
      double total = 0.0;
      for (const Path& path : enumerate_paths(pb, b)) total += std::exp(path.score - lz[b]);
      EXPECT_NEAR(total, 1.0, 1e-12) << "utterance " << b;
    }
  }
}

TEST(BruteForce, CpuMatchesEnumerationTo1e5) {
  const double scale = 0.75;
  auto cpu = cpu::make_cpu_backend(2);
  for (const Problem& pb : tiny_problems()) {
    SCOPED_TRACE(describe(pb));
    const Expected ex = brute_force(pb, scale);
    HostRunOptions opt;
    opt.scale = scale;
    opt.boundary_posteriors = true;
    const HostResult r = run_host(*cpu, pb.dims, pb.params(), pb.labels.data(), opt);
    expect_close(r.log_z, ex.log_z, 1e-5, 1e-9, "log_z");
    expect_close(r.gold, ex.gold, 1e-5, 1e-9, "gold");
    expect_close(r.grad_cum_scores, ex.g_cum, 1e-5, 1e-7, "grad_cum");
    expect_close(r.grad_transition, ex.g_A, 1e-5, 1e-7, "grad_transition");
    expect_close(r.grad_duration_bias, ex.g_D, 1e-5, 1e-7, "grad_duration_bias");
    expect_close(r.grad_start, ex.g_s, 1e-5, 1e-7, "grad_start");
    expect_close(r.grad_end, ex.g_e, 1e-5, 1e-7, "grad_end");
    expect_close(r.viterbi_score, ex.vscore, 1e-5, 1e-9, "viterbi_score");
    EXPECT_EQ(r.segments, ex.vsegs);
    expect_close(r.boundary_posteriors, ex.bpost, 1e-5, 1e-9, "boundary_posteriors");
    for (int64_t b = 0; b < pb.dims.B; ++b) {
      double total = 0.0;
      for (const Path& path : enumerate_paths(pb, b)) total += std::exp(path.score - r.log_z[b]);
      EXPECT_NEAR(total, 1.0, 1e-9) << "utterance " << b;
    }
  }
}

TEST(BruteForce, ViterbiTiesGoToSmallestDurationThenSmallestLabel) {
  // All scores zero: every segmentation ties. Smallest d first means the last
  // segment is traced with d = 1 at every step; smallest label is 0.
  for (const std::string name : {"reference", "cpu"}) {
    auto be = make_backend(backend_kind(name));
    Problem pb;
    pb.dims = Dims{1, 4, 3, 2};
    pb.cum.assign(5 * 2, 0.0f);
    pb.A.assign(4, 0.0f);
    pb.D.assign(6, 0.0f);
    pb.lengths = {4};
    HostRunOptions opt;
    opt.gradients = false;
    const HostResult r = run_host(*be, pb.dims, pb.params(), nullptr, opt);
    const std::vector<Segment> want{{0, 0, 1, 0}, {0, 1, 1, 0}, {0, 2, 1, 0}, {0, 3, 1, 0}};
    EXPECT_EQ(r.segments, want) << name;
    EXPECT_EQ(r.viterbi_score[0], 0.0) << name;
  }
}

TEST(GoldSegments, RunsLongerThanKAreSplitLeftToRight) {
  const std::vector<int32_t> lab{0, 0, 0, 0, 0, 0, 0, 1, 1, 2, 2, 2};
  const std::vector<Segment> got = gold_segments(lab.data(), 12, 3, 5);
  const std::vector<Segment> want{{5, 0, 3, 0}, {5, 3, 3, 0}, {5, 6, 1, 0}, {5, 7, 2, 1}, {5, 9, 3, 2}};
  EXPECT_EQ(got, want);
  // Length shorter than the label row: frames past the length are ignored.
  const std::vector<Segment> cut = gold_segments(lab.data(), 2, 3, 0);
  EXPECT_EQ(cut, (std::vector<Segment>{{0, 0, 2, 0}}));
}

}  // namespace
}  // namespace timitseg::crf::testing
