// Forced alignment of one utterance in bounded memory: the checkpointed
// constrained Viterbi of docs/crf.md ("Forced alignment in bounded memory").
// Bitwise the scores, spans and ties of the cpu backend's full-table
// recurrence; used by it when the full table exceeds kAlignFullTableBytes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "crf/backend.h"

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
  // The phone graph [np] (crf/phone_graph.h) of the constrained forward-backward
  // (ConstrainedPosteriors), nullptr = the chain of opt; the Viterbi paths read opt only.
  const int32_t* links = nullptr;
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

// The constrained Viterbi's traceback from (L, the last kept phone), as the
// full table does it, into spans [np][2] (start, duration). dur(t, n): the
// back pointer of F[t][n] (the last segment's duration); how(t, n): the back
// pointer of S[t][n] (0 the previous phone ends at t, 1 a continuation of K
// frames, 2 the optional phone n-1 skipped). skip_last: phone np-1 is
// optional and skipped (it gets the start L).
template <class Dur, class How>
void trace_back_spans(int64_t L, int64_t np, int64_t K, bool skip_last, Dur dur, How how, int32_t* out) {
  int64_t n = np - 1, end = L;
  if (skip_last) out[2 * n] = static_cast<int32_t>(L), --n;
  int64_t v = end - dur(end, n);
  while (true) {
    const int8_t h = how(v, n);
    if (h == 1) {
      v -= K;
      continue;
    }
    out[2 * n] = static_cast<int32_t>(v);
    out[2 * n + 1] = static_cast<int32_t>(end - v);
    if (h == 2) {
      out[2 * (n - 1)] = static_cast<int32_t>(v);
      n -= 2;
    } else {
      n -= 1;
    }
    if (n < 0) break;
    end = v;
    v = end - dur(end, n);
  }
}

}  // namespace timitseg::crf::cpu
