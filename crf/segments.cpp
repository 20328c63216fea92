// Segments from frame labels, alignments and Viterbi output (crf/segments.h).
#include "crf/segments.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "crf/detail.h"

namespace timitseg::crf {

std::vector<Segment> gold_segments(const int32_t* labels, int32_t length, int64_t K, int32_t batch) {
  std::vector<Segment> out;
  detail::for_each_gold_segment(labels, length, K, [&](int64_t u, int64_t d, int64_t c) {
    out.push_back(Segment{batch, static_cast<int32_t>(u), static_cast<int32_t>(d), static_cast<int32_t>(c)});
  });
  return out;
}

int32_t merge_repeated_phones(int32_t* phones, int32_t* optional, int32_t n) {
  int32_t out = 0;
  for (int32_t i = 0; i < n; ++i) {
    const bool opt = optional && optional[i] == 1;
    if (out > 0 && phones[out - 1] == phones[i]) {
      if (!opt && optional && optional[out - 1] == 1) optional[out - 1] = 0;  // the kept one takes its place
      continue;
    }
    phones[out] = phones[i];
    if (optional) optional[out] = opt ? 1 : 0;
    ++out;
  }
  return out;
}

std::vector<Segment> align_segments(int64_t K, const int32_t* phones, int64_t n, const int32_t* spans, int32_t batch) {
  std::vector<Segment> out;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t u = spans[2 * i], r = spans[2 * i + 1];  // r = 0: a skipped optional phone
    for (int64_t pos = u; pos < u + r; pos += K)
      out.push_back(Segment{batch, static_cast<int32_t>(pos), static_cast<int32_t>(std::min(K, u + r - pos)),
                            phones[i]});
  }
  return out;
}

std::vector<Segment> collect_segments(const Dims& dims, const int32_t* segments, const int32_t* num_segments) {
  std::vector<Segment> out;
  for (int64_t b = 0; b < dims.B; ++b) {
    const int32_t* rows = segments + b * dims.T * 3;
    if (num_segments[b] < 1 || num_segments[b] > dims.T)
      throw std::runtime_error("crf: viterbi returned " + std::to_string(num_segments[b]) + " segments for utterance " +
                               std::to_string(b) + " (expected 1..T=" + std::to_string(dims.T) + ")");
    for (int32_t i = 0; i < num_segments[b]; ++i)
      out.push_back(Segment{static_cast<int32_t>(b), rows[3 * i], rows[3 * i + 1], rows[3 * i + 2]});
  }
  return out;
}

}  // namespace timitseg::crf
