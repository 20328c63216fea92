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
#include <functional>
#include <utility>
#include <vector>

#include "tests/support/align_bruteforce.h"
#include "tests/support/crf_bruteforce.h"

namespace timitseg::crf::testing {

struct TranscriptExpected {
  std::vector<double> log_z, log_z_c;          // [B]
  std::vector<double> g_cum, g_A, g_D, g_s, g_e, g_o;  // gradients of sum_b scale * (log Z_b - log Z_c_b)
};

// The label sequences of every path through a phone graph (crf/phone_graph.h's
// links of n phones, read bit by bit: a start phone, then phones whose links
// name the one before, to an end phone), by depth-first search.
inline std::vector<std::vector<int32_t>> graph_label_paths(const int32_t* phones, const int32_t* links, int64_t n) {
  std::vector<std::vector<int32_t>> out;
  std::vector<int32_t> cur;
  std::function<void(int64_t)> walk = [&](int64_t i) {
    cur.push_back(phones[i]);
    if (links[i] & (1 << 30)) out.push_back(cur);
    for (int64_t m = i + 1; m < n && m - 1 - i < 29; ++m)
      if (links[m] >> (m - 1 - i) & 1) walk(m);
    cur.pop_back();
  };
  for (int64_t i = 0; i < n; ++i)
    if (links[i] & (1 << 29)) walk(i);
  return out;
}

// phones [B][N], num_phones [B], optional [B][N] (empty: none), links [B][N]
// (empty: the chain of optional; else every path of the graph, no optional phones).
inline TranscriptExpected transcript_brute_force(const Problem& pb, int64_t N, const std::vector<int32_t>& phones,
                                                 const std::vector<int32_t>& num_phones,
                                                 const std::vector<int32_t>& optional, double scale,
                                                 const std::vector<int32_t>& links = {}) {
  const int64_t B = pb.dims.B, T = pb.dims.T, C = pb.dims.C;
  const Expected un = brute_force(pb, scale, false);
  TranscriptExpected ex{un.log_z, {}, un.g_cum, un.g_A, un.g_D, un.g_s, un.g_e, un.g_o};
  for (int64_t b = 0; b < B; ++b) {
    // (the phone labels, one alignment of them) for every alignment of every path
    std::vector<std::pair<std::vector<int32_t>, AlignPath>> paths;
    if (links.empty()) {
      const std::vector<int32_t> ph(phones.begin() + b * N, phones.begin() + b * N + num_phones[b]);
      std::vector<int32_t> opt;
      if (!optional.empty()) opt.assign(optional.begin() + b * N, optional.begin() + b * N + num_phones[b]);
      for (AlignPath& a : enumerate_alignments(pb, b, ph, opt)) paths.emplace_back(ph, std::move(a));
    } else {
      for (const std::vector<int32_t>& ph : graph_label_paths(phones.data() + b * N, links.data() + b * N, num_phones[b]))
        for (AlignPath& a : enumerate_alignments(pb, b, ph)) paths.emplace_back(ph, std::move(a));
    }
    double m = -INFINITY;
    for (const auto& p : paths) m = std::max(m, p.second.score);
    double z = 0.0;
    for (const auto& p : paths) z += std::exp(p.second.score - m);
    const double lzc = paths.empty() || m == -INFINITY ? -INFINITY : m + std::log(z);
    ex.log_z_c.push_back(lzc);
    if (lzc == -INFINITY) continue;
    for (const auto& pp : paths) {
      const AlignPath& p = pp.second;
      const double P = std::exp(p.score - lzc);
      if (P == 0.0) continue;
      const std::vector<Segment> segs = split_spans(pp.first, p.spans, pb.dims.K);
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
