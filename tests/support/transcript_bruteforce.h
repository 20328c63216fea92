// Brute-force oracle of the transcript NLL (docs/crf.md "Training from
// transcripts"): log Z and its expectations from every segmentation
// (crf_bruteforce.h), log Z_c and the constrained expectations from every
// alignment of the transcript (align_bruteforce.h: each composition of the
// frames into phone durations, 0 allowed for optional phones, each phone cut
// into pieces of K then the remainder by hand). No recurrence. Tiny problems
// only; header-only, test code only.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "tests/support/align_bruteforce.h"
#include "tests/support/crf_bruteforce.h"

namespace timitseg::crf::testing {

struct TranscriptExpected {
  std::vector<double> log_z, log_z_c;          // [B]
  std::vector<double> g_cum, g_A, g_D, g_s, g_e, g_o;  // gradients of sum_b scale * (log Z_b - log Z_c_b)
};

// phones [B][N], num_phones [B], optional [B][N] (empty: none).
inline TranscriptExpected transcript_brute_force(const Problem& pb, int64_t N, const std::vector<int32_t>& phones,
                                                 const std::vector<int32_t>& num_phones,
                                                 const std::vector<int32_t>& optional, double scale) {
  const int64_t B = pb.dims.B, T = pb.dims.T, C = pb.dims.C;
  const Expected un = brute_force(pb, scale, false);
  TranscriptExpected ex{un.log_z, {}, un.g_cum, un.g_A, un.g_D, un.g_s, un.g_e, un.g_o};
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<int32_t> ph(phones.begin() + b * N, phones.begin() + b * N + num_phones[b]);
    std::vector<int32_t> opt;
    if (!optional.empty()) opt.assign(optional.begin() + b * N, optional.begin() + b * N + num_phones[b]);
    const std::vector<AlignPath> paths = enumerate_alignments(pb, b, ph, opt);
    double m = -INFINITY;
    for (const AlignPath& p : paths) m = std::max(m, p.score);
    double z = 0.0;
    for (const AlignPath& p : paths) z += std::exp(p.score - m);
    const double lzc = paths.empty() || m == -INFINITY ? -INFINITY : m + std::log(z);
    ex.log_z_c.push_back(lzc);
    if (lzc == -INFINITY) continue;
    for (const AlignPath& p : paths) {
      const double P = std::exp(p.score - lzc);
      if (P == 0.0) continue;
      const std::vector<Segment> segs = split_spans(ph, p.spans, pb.dims.K);
      for (size_t i = 0; i < segs.size(); ++i) {
        const Segment& g = segs[i];
        ex.g_cum[(b * (T + 1) + g.start + g.duration) * C + g.label] -= scale * P;
        ex.g_cum[(b * (T + 1) + g.start) * C + g.label] += scale * P;
        ex.g_D[(g.duration - 1) * C + g.label] -= scale * P;
        if (i > 0) ex.g_A[segs[i - 1].label * C + g.label] -= scale * P;
        if (!ex.g_o.empty()) ex.g_o[(b * T + g.start) * C + g.label] -= scale * P;
      }
      ex.g_s[segs.front().label] -= scale * P;
      ex.g_e[segs.back().label] -= scale * P;
    }
  }
  return ex;
}

}  // namespace timitseg::crf::testing
