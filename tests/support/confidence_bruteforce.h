// Brute-force oracle of the confidence scores (docs/crf.md "Confidence"):
// the constrained posteriors by enumeration of every alignment
// (align_bruteforce.h) and the span marginals by enumeration of every
// segmentation (crf_bruteforce.h), each weighted by exp(score - log Z).
// Independent of every backend. Tiny problems only; test code only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <vector>

#include "tests/support/align_bruteforce.h"
#include "tests/support/crf_bruteforce.h"

namespace timitseg::crf::testing {

inline double log_sum_exp_scores(const std::vector<double>& scores) {
  double m = -std::numeric_limits<double>::infinity();
  for (double s : scores) m = std::max(m, s);
  if (m == -std::numeric_limits<double>::infinity()) return m;
  double sum = 0.0;
  for (double s : scores) sum += std::exp(s - m);
  return m + std::log(sum);
}

struct ExpectedPosteriors {
  double log_z_c;             // -inf: infeasible
  std::vector<double> out;    // [n][3] as Backend::align_posteriors
};

// Utterance b, its phones (and optional flags), the query spans [n][2].
inline ExpectedPosteriors brute_align_posteriors(const Problem& pb, int64_t b, const std::vector<int32_t>& phones,
                                                 const std::vector<int32_t>& optional,
                                                 const std::vector<int32_t>& spans) {
  const std::vector<AlignPath> all = enumerate_alignments(pb, b, phones, optional);
  std::vector<double> scores;
  for (const AlignPath& a : all) scores.push_back(a.score);
  ExpectedPosteriors r{log_sum_exp_scores(scores), std::vector<double>(phones.size() * 3, 0.0)};
  if (r.log_z_c == -std::numeric_limits<double>::infinity()) return r;
  for (const AlignPath& a : all) {
    const double w = std::exp(a.score - r.log_z_c);
    for (size_t n = 0; n < phones.size(); ++n) {
      const int64_t s = spans[2 * n], e = s + spans[2 * n + 1];
      const int64_t ps = a.spans[2 * n], pr = a.spans[2 * n + 1], pe = ps + pr;
      double* o = r.out.data() + 3 * n;
      if (s == e) {  // the query is "skipped"
        if (pr == 0) o[0] += w, o[1] += w, o[2] += w;
        continue;
      }
      if (pr == 0) continue;
      const bool start_ok = std::llabs(ps - s) <= 1, end_ok = std::llabs(pe - e) <= 1;
      if (start_ok && end_ok) o[0] += w;
      if (start_ok) o[1] += w;
      if (end_ok) o[2] += w;
    }
  }
  return r;
}

// P(the segmentation holds the pieces of (start, duration, label)), by enumeration; 0 for duration 0.
inline double brute_span_marginal(const Problem& pb, const std::vector<Path>& paths, double log_z, int32_t start,
                                  int32_t duration, int32_t label) {
  if (duration == 0) return 0.0;
  const std::vector<Segment> pieces = split_spans({label}, {start, duration}, pb.dims.K);
  double sum = 0.0;
  for (const Path& p : paths) {
    bool all = true;
    for (const Segment& pc : pieces) {
      bool found = false;
      for (const Segment& sg : p.segs)
        found |= sg.start == pc.start && sg.duration == pc.duration && sg.label == pc.label;
      all &= found;
    }
    if (all) sum += std::exp(p.score - log_z);
  }
  return sum;
}

}  // namespace timitseg::crf::testing
