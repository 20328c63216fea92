// The score of one segment and of a whole segmentation (docs/crf.md
// "Segmentations and the distribution"; "Scores on the host (`crf/score.h`)"),
// on host arrays, written once for every host recurrence (the reference and
// cpu backends, the alignments and their posteriors) and the C API's gold
// scores. Header-only (inlined into the hot loops); F is float (the backends'
// inputs) or double (the reference's and the C API's float64 path). The order
// of the float64 operations is part of the contract: every host result's bits
// depend on it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "crf/backend.h"

namespace timitseg::crf {

// Segment [u, u + d) with label c of one utterance: cum [T+1][C] and onset
// [T][C] (nullptr: none) are the utterance's rows, duration_bias [K][C]:
//   (double(cum[u+d][c]) - double(cum[u][c]) + double(D[d-1][c])) (+ double(onset[u][c]))
// in double, in this order.
template <class Cum, class F>
inline double segment_score(const Cum* cum, const F* duration_bias, const F* onset, int64_t C, int64_t u, int64_t d,
                            int64_t c) {
  const double v = static_cast<double>(cum[(u + d) * C + c]) - static_cast<double>(cum[u * C + c]) +
                   static_cast<double>(duration_bias[(d - 1) * C + c]);
  return onset ? v + static_cast<double>(onset[u * C + c]) : v;
}

// The parameters one utterance is scored with: transition [C][C],
// duration_bias [K][C], start [C] and end [C] (nullptr: 0), onset [T][C] (the
// utterance's rows, nullptr: none).
template <class F>
struct ScoreParams {
  int64_t C = 0;
  const F* transition = nullptr;
  const F* duration_bias = nullptr;
  const F* start = nullptr;
  const F* end = nullptr;
  const F* onset = nullptr;
};

// The score of segs (one utterance's segmentation in time order, not empty)
// on the utterance's cum [T+1][C]:
//   start[first] + end[last], then for each segment its segment_score and,
//   from the second on, transition[previous label][its label]
// summed in double in this order. visit(i) is called after segment i is added
// (the callers' gradient indicators); -inf entries give -inf (the caller
// reports it).
template <class Cum, class F, class Visit>
double segmentation_score(const std::vector<Segment>& segs, const Cum* cum, const ScoreParams<F>& p, Visit&& visit) {
  const int64_t C = p.C;
  const auto first = segs.front().label, last = segs.back().label;
  double s = (p.start ? static_cast<double>(p.start[first]) : 0.0) + (p.end ? static_cast<double>(p.end[last]) : 0.0);
  for (size_t i = 0; i < segs.size(); ++i) {
    const Segment& x = segs[i];
    s += segment_score(cum, p.duration_bias, p.onset, C, x.start, x.duration, x.label);
    if (i > 0) s += static_cast<double>(p.transition[segs[i - 1].label * C + x.label]);
    visit(i);
  }
  return s;
}

template <class Cum, class F>
double segmentation_score(const std::vector<Segment>& segs, const Cum* cum, const ScoreParams<F>& p) {
  return segmentation_score(segs, cum, p, [](size_t) {});
}

}  // namespace timitseg::crf
