// Windows of an aligned transcript (docs/align.md "Confidence", "Boundaries
// from the posteriors"): a long utterance's phones taken `core` at a time,
// each core inside a window with `margin` more phones of context on either
// side, its frames from the aligned start of its first phone to the aligned
// end of its last, conditioned on the aligned phones outside it. The
// confidences' windows (crf/align_confidence*.cpp) and the posteriors'
// boundaries (crf/posterior_boundaries.cpp) are cut the same way.
#pragma once

#include <cstdint>
#include <vector>

#include "crf/backend.h"

namespace timitseg::crf {

// Window k of an utterance of np phones: core phones [c0, c1), its phones
// [p0, p1), its frames [a, e), the kept phones around it (before < 0,
// after >= np: none; a skipped phone is passed over).
struct TranscriptWindow {
  int64_t c0, c1, p0, p1, a, e, before, after, np;
};
// np phones with aligned spans [np][2] over L frames.
TranscriptWindow transcript_window(int64_t k, int64_t core, int64_t margin, int64_t np, int64_t L,
                                   const int32_t* spans);

// Window w of utterance b (phones y [np], aligned spans [np][2]) as one
// utterance (dims.B = 1, T = e - a): its rows of cum/onset, start scores the
// transitions from y[before] (the model's start when none), end scores those
// into y[after] (the model's end when none), and its phones' spans in its
// frames. Not copyable: p points into it.
struct WindowProblem {
  Dims dims;
  Params p;
  int32_t length;
  std::vector<float> end_col;
  std::vector<int32_t> spans;  // [p1 - p0][2], starts relative to a
  WindowProblem(const Dims& d, const Params& hp, int64_t b, const TranscriptWindow& w, const int32_t* y,
                const int32_t* utterance_spans);
  WindowProblem(const WindowProblem&) = delete;
  WindowProblem& operator=(const WindowProblem&) = delete;
};

}  // namespace timitseg::crf
