// Windows of an aligned transcript (crf/transcript_windows.h).
#include "crf/transcript_windows.h"

#include <algorithm>

namespace timitseg::crf {

TranscriptWindow transcript_window(int64_t k, int64_t core, int64_t margin, int64_t np, int64_t L,
                                   const int32_t* spans) {
  TranscriptWindow w{};
  w.np = np;
  w.c0 = k * core;
  w.c1 = std::min(np, w.c0 + core);
  w.p0 = std::max<int64_t>(0, w.c0 - margin);
  w.p1 = std::min(np, w.c1 + margin);
  w.a = spans[2 * w.p0];
  w.e = w.p1 == np ? L : spans[2 * w.p1];
  w.before = w.p0 - 1;
  w.after = w.p1;
  if (w.before >= 0 && spans[2 * w.before + 1] == 0) --w.before;
  if (w.after < np && spans[2 * w.after + 1] == 0) ++w.after;
  return w;
}

WindowProblem::WindowProblem(const Dims& d, const Params& hp, int64_t b, const TranscriptWindow& w, const int32_t* y,
                             const int32_t* utterance_spans)
    : dims{1, w.e - w.a, d.K, d.C}, p(hp), length(static_cast<int32_t>(w.e - w.a)) {
  const int64_t C = d.C, np_window = w.p1 - w.p0;
  p.cum_scores = hp.cum_scores + (b * (d.T + 1) + w.a) * C;
  p.onset = hp.onset ? hp.onset + (b * d.T + w.a) * C : nullptr;
  p.lengths = &length;
  if (w.before >= 0) p.start = hp.transition + y[w.before] * C;
  if (w.after < w.np) {
    end_col.resize(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) end_col[c] = hp.transition[c * C + y[w.after]];
    p.end = end_col.data();
  }
  spans.assign(utterance_spans + 2 * w.p0, utterance_spans + 2 * w.p1);
  for (int64_t i = 0; i < np_window; ++i) spans[2 * i] -= static_cast<int32_t>(w.a);
}

}  // namespace timitseg::crf
