// Forced alignment of one utterance in bounded memory: the checkpointed
// constrained Viterbi of docs/crf.md ("Forced alignment in bounded memory").
// Bitwise the scores, spans and ties of the cpu backend's full-table
// recurrence; used by it when the full table exceeds kAlignFullTableBytes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "crf/semicrf.h"

namespace timitseg::crf::cpu {

// Above this size of one utterance's full table ((T+1) N x 24 bytes) the cpu
// backend aligns by checkpoints; the reference backend refuses.
constexpr size_t kAlignFullTableBytes = size_t{256} << 20;
// align_bounded shows a progress bar (common/progress.h) when L N K reaches this.
constexpr int64_t kProgressWork = int64_t{20} * 1000 * 1000 * 1000;

// One utterance: L frames, np phones y (optional flags opt or nullptr), its
// cumulative scores [L+1][C] and onset [L][C] (or nullptr); p supplies the
// transition, duration bias, start and end.
struct AlignUtterance {
  int64_t L = 0, np = 0, K = 0, C = 0;
  const int32_t* y = nullptr;
  const int32_t* opt = nullptr;
  const float* cum = nullptr;
  const float* onset = nullptr;
  const Params* p = nullptr;
};

// The segment length M that balances the stored rows and the back pointers.
int64_t bounded_segment_frames(int64_t L, int64_t K);
// Bytes the bounded method allocates for segment length M.
size_t bounded_align_bytes(int64_t L, int64_t np, int64_t K, int64_t M);

// Aligns u with segments of M frames (M >= 1; <= 0: bounded_segment_frames).
// Writes spans [np][2] (start, duration; (0, 0) when infeasible) and returns
// the score (-inf when infeasible). Allocates its own memory (bounded_align_bytes);
// std::bad_alloc when that fails.
double align_bounded(const AlignUtterance& u, int32_t* spans, int64_t M = 0);

}  // namespace timitseg::crf::cpu
