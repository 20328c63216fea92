// The checkpointed constrained Viterbi (crf/cpu/align_bounded.h, docs/crf.md
// "Forced alignment in bounded memory") against the cpu backend's full-table
// recurrence, bitwise: scores (also -inf) and spans, on random inputs of many
// sizes, every segment length M (1, below K, K, above K, past L, the default),
// phones longer than K, repeated labels, onset scores, optional phones,
// infeasible utterances; and the cpu backend switching to it above the size.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/progress.h"
#include "crf/backend.h"
#include "crf/backend_kind.h"
#include "crf/cpu/align_bounded.h"
#include "crf/host_run.h"
#include "tests/support/align_cases.h"
#include "tests/support/crf_problems.h"

namespace timitseg::crf::testing {
namespace {

void expect_bitwise(const Problem& pb, const Phones& ph, bool with_optional, const AlignResult& full,
                    const std::vector<int64_t>& Ms) {
  const Params p = pb.params();
  for (int64_t b = 0; b < pb.dims.B; ++b)
    for (int64_t M : Ms) {
      SCOPED_TRACE(::testing::Message() << "b=" << b << " L=" << pb.lengths[b] << " n=" << ph.nph[b] << " K="
                                        << pb.dims.K << " M=" << M);
      std::vector<int32_t> spans(ph.nph[b] * 2, -1);
      const double s = cpu::align_bounded(utterance(pb, p, ph, b, with_optional), spans.data(), M);
      EXPECT_EQ(s, full.score[b]);  // bitwise (both -inf when infeasible)
      EXPECT_EQ(spans, full_spans(full, ph, b));
    }
}

TEST(AlignBounded, BitwiseTheFullTableOnRandomInputs) {
  uint32_t seed = 100;
  int feasible = 0, infeasible = 0;
  for (int64_t T : {1, 2, 7, 23, 61})
    for (int64_t K : {1, 3, 8, 40})
      for (int64_t C : {2, 5})
        for (int64_t N : {1, 3, 9, 30})
          for (int variant = 0; variant < 3; ++variant) {  // plain, onset, optional phones
            Problem pb = random_problem(Dims{3, T, K, C}, ++seed, {});
            if (variant == 1) add_onset(pb, seed);
            const bool with_opt = variant == 2;
            const Phones ph = random_phones(3, N, C, with_opt, seed);
            const AlignResult full = full_table(pb, ph, with_opt);
            for (int64_t b = 0; b < 3; ++b) (full.score[b] > -std::numeric_limits<double>::infinity() ? feasible : infeasible)++;
            expect_bitwise(pb, ph, with_opt, full, {1, 2, K > 1 ? K - 1 : 1, K, K + 1, 5, T, T + 3, 0});
          }
  EXPECT_GT(feasible, 300);   // the cases are mostly feasible ...
  EXPECT_GT(infeasible, 50);  // ... and include N > L
}

TEST(AlignBounded, ForbiddenTransitionsAndLongPhones) {
  // -inf entries (a forbidden transition, a forbidden duration) and runs far longer than K.
  Problem pb = random_problem(Dims{4, 200, 4, 3}, 77, {200, 173, 120, 64});
  pb.A[0 * 3 + 1] = -std::numeric_limits<float>::infinity();
  pb.D[2 * 3 + 2] = -std::numeric_limits<float>::infinity();
  Phones ph;
  ph.N = 6;
  ph.y = {0, 1, 2, 0, 2, 1, 2, 2, 0, 0, 1, 1, 0, 2, 1, 0, 2, 2, 1, 1, 1, 1, 1, 1};
  ph.nph = {6, 6, 3, 6};
  ph.opt.assign(24, 0);
  const AlignResult full = full_table(pb, ph, false);
  EXPECT_EQ(full.score[0], -std::numeric_limits<double>::infinity());  // 0 -> 1 forbidden
  expect_bitwise(pb, ph, false, full, {1, 3, 4, 5, 17, 64, 199, 0});
}

TEST(AlignBounded, CpuBackendSwitchesAboveTheTableSize) {
  // (T+1) N x 24 bytes over kAlignFullTableBytes: the backend needs no workspace and aligns in a band
  // (crf/cpu/align_banded.h; random scores, the band finds the full path here).
  const Dims big{2, 12000, 6, 4};
  const int64_t N = 1000;
  ASSERT_GT(static_cast<size_t>(big.T + 1) * N * 24, cpu::kAlignFullTableBytes);
  auto be = make_backend(BackendKind::cpu, BackendOptions{2, nullptr});
  EXPECT_EQ(be->align_workspace_bytes(big, N), 0u);
  EXPECT_GT(be->align_workspace_bytes(Dims{2, 300, 6, 4}, 38), 0u);
  Problem pb = random_problem(big, 5, {12000, 9000});
  const Phones ph = random_phones(2, N, 4, false, 5);
  const AlignResult r = full_table(pb, ph, false);
  // the same utterances with one segment holding every row (no checkpoint) give the same
  const Params p = pb.params();
  for (int64_t b = 0; b < 2; ++b) {
    ASSERT_TRUE(std::isfinite(r.score[b]));
    std::vector<int32_t> spans(ph.nph[b] * 2);
    EXPECT_EQ(cpu::align_bounded(utterance(pb, p, ph, b, false), spans.data(), pb.lengths[b] + 1), r.score[b]);
    EXPECT_TRUE(std::equal(spans.begin(), spans.end(), r.spans.begin() + b * N * 2));
  }
  EXPECT_LT(cpu::bounded_align_bytes(12000, N, 6, cpu::bounded_segment_frames(12000, 6)),
            static_cast<size_t>(12001) * N * 24 / 10);
}

TEST(AlignBounded, MemoryThatCannotBeHadIsOneLine) {
  // 4M frames, 4M phones, K = 10^4: petabytes even in bounded memory (beyond any address
  // space, so the allocation fails whatever the overcommit setting); nothing is read first.
  Progress::set_enabled(false);
  const float dummy[1] = {0.0f};
  const Params p{dummy, dummy, dummy, nullptr, nullptr, nullptr};
  const int64_t L = 4000000, np = 4000000, K = 10000;
  std::vector<int32_t> y(2, 0), spans(np * 2, 7);
  const cpu::AlignUtterance u{L, np, K, 1, y.data(), nullptr, dummy, nullptr, &p};
  try {
    cpu::align_bounded(u, spans.data());
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    const std::string want = "crf: align: 4000000 frames and 4000000 phones need " +
                             std::to_string(cpu::bounded_align_bytes(L, np, K, cpu::bounded_segment_frames(L, K)) >> 20) +
                             " MiB even in bounded memory, and the allocation failed: free memory, or split the "
                             "recording (e.g. at long pauses) and align the parts";
    EXPECT_EQ(std::string(e.what()), want);
  }
  Progress::set_enabled(true);
}

}  // namespace
}  // namespace timitseg::crf::testing
