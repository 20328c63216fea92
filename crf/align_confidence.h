// The confidences of forced alignment (docs/crf.md "Confidence", docs/align.md
// "Confidence"): the scores Executor::align fills from its forward, and the
// windows that score a long utterance piecewise. They drive crf/'s constrained
// forward-backward (crf::Session, crf/cpu/align_posteriors.h), beside which
// they live; on a host backend their windows run on WindowLimits::threads (the
// executors pass the command's --threads, model::finish_alignment).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "crf/backend.h"
#include "crf/host_run.h"
#include "crf/session.h"

namespace timitseg::crf {

// Confidence of aligned phones (docs/crf.md "Confidence"), [B][N] each on
// the host: boundary (both boundaries within ±1 frame, under the transcript),
// start and end (each boundary within ±1 frame), label (the unconstrained
// span marginal of the phone's span and label). computed[b] = 0 when
// utterance b's constrained table was over the memory limit (reason[b] says
// why) or the utterance is infeasible; its scores are then 0.
struct AlignConfidence {
  std::vector<double> boundary, start, end, label;
  std::vector<char> computed;
  std::vector<char> windowed;  // 1: computed by windows of the transcript (fill_align_confidence)
  std::vector<std::string> reason;
};
// The windows of fill_align_confidence for an utterance over the limit: core
// phones per window, context phones on each side, the memory limit of one
// window (<= 0: utterance_limit), and on a host backend the band of the
// window's constrained pass: +-band phones around the aligned path at every
// frame (<= 0: every phone of the window; docs/align.md "Confidence"), and
// the host threads the windows run on (a host backend; results do not depend
// on it).
struct WindowLimits {
  int64_t core = 32, margin = 16;
  double limit = 0.0;
  int64_t band = 8;
  int threads = 1;
};

// Fills `out` for the aligned spans `r` of an align() on host arrays (any
// backend through the session's copies): one batched call of
// Backend::align_posteriors and of Backend::span_marginals when the batch's
// constrained tables and the backend's workspace fit in kConfidenceBatchBytes,
// else per utterance; an utterance whose own need exceeds
// kConfidenceUtteranceBytes is scored by windows of its transcript (each
// conditioned on the aligned phones outside it; docs/align.md), and not
// computed (reason given) when even a window is over the limit.
constexpr double kConfidenceBatchBytes = 1024.0 * 1024 * 1024;
constexpr double kConfidenceUtteranceBytes = 512.0 * 1024 * 1024;
void fill_align_confidence(crf::Session& session, const crf::Dims& dims, const crf::Params& host_params, int64_t N,
                           const std::vector<int32_t>& phones, const std::vector<int32_t>& num_phones,
                           const std::vector<int32_t>& optional, const crf::AlignResult& r, AlignConfidence* out,
                           double batch_limit = kConfidenceBatchBytes,
                           double utterance_limit = kConfidenceUtteranceBytes,
                           WindowLimits window_limits = WindowLimits());

// The windows of fill_align_confidence for one long utterance (dims.B = 1,
// np phones y, flags opt or nullptr, aligned spans [np][2]) scored as batches
// of windows (docs/align.md "Long recordings"): each batch one call of
// Backend::align_posteriors and one of Backend::span_marginals, every phone
// of each window (no band); a window's edge transitions are folded into its
// own rows (start into onset row 0, end into cum row L: one float32 rounding
// each). A batch's constrained tables and the backend's workspace stay under
// batch_limit bytes. Writes post3 [np][3] (boundary, start, end) and label
// [np]; returns the number of batches, 0 (nothing written) when one window
// alone exceeds the limit.
int64_t batched_window_confidence(crf::Session& session, const crf::Dims& dims, const crf::Params& host_params,
                                  int64_t np, const int32_t* y, const int32_t* opt, const int32_t* spans,
                                  double* post3, double* label, const WindowLimits& limits, double batch_limit);

}  // namespace timitseg::crf
