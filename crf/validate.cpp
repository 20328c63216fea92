// Host-side checks of a backend's inputs (crf/validate.h).
#include "crf/phone_graph.h"
#include "crf/validate.h"

#include <stdexcept>
#include <string>

#include "crf/detail.h"

namespace timitseg::crf {

void validate_host(const Dims& dims, const Params& p, const int32_t* labels) {
  detail::validate_inputs<float>(dims, p.cum_scores, p.transition, p.duration_bias, p.start, p.end, p.lengths,
                                 labels, p.onset);
}

void validate_align_host(const Dims& dims, int64_t N, const int32_t* phones, const int32_t* num_phones,
                         const int32_t* optional) {
  auto bad = [](const std::string& msg) { throw std::invalid_argument(msg); };
  if (N < 1) bad("crf: align: phone stride N must be >= 1, got " + std::to_string(N));
  if (!phones) bad("crf: align: phones is null");
  if (!num_phones) bad("crf: align: num_phones is null");
  for (int64_t b = 0; b < dims.B; ++b) {
    if (num_phones[b] < 1 || num_phones[b] > N)
      bad("crf: align: num_phones[" + std::to_string(b) + "] = " + std::to_string(num_phones[b]) +
          " is outside [1, N=" + std::to_string(N) + "]");
    for (int64_t i = 0; i < num_phones[b]; ++i) {
      const int32_t c = phones[b * N + i];
      if (c < 0 || c >= dims.C)
        bad("crf: align: phones[" + std::to_string(b) + "][" + std::to_string(i) + "] = " + std::to_string(c) +
            " is outside [0, C=" + std::to_string(dims.C) + ")");
    }
    if (!optional) continue;
    int64_t kept = 0;
    for (int64_t i = 0; i < num_phones[b]; ++i) {
      const int32_t o = optional[b * N + i];
      const std::string at = "crf: align: optional[" + std::to_string(b) + "][" + std::to_string(i) + "] = ";
      if (o != 0 && o != 1) bad(at + std::to_string(o) + " is not 0 or 1");
      if (o == 1 && i > 0 && optional[b * N + i - 1] == 1)
        bad(at + "1 follows another optional phone (two optional phones in a row are not supported)");
      kept += o == 0;
    }
    if (kept == 0) bad("crf: align: utterance " + std::to_string(b) + " has only optional phones");
  }
}

void validate_align_spans_host(const Dims& dims, int64_t N, const int32_t* num_phones, const int32_t* lengths,
                               const int32_t* spans) {
  if (!spans) throw std::invalid_argument("crf: align_posteriors: spans is null");
  for (int64_t b = 0; b < dims.B; ++b)
    for (int64_t i = 0; i < num_phones[b]; ++i) {
      const int64_t s = spans[(b * N + i) * 2], r = spans[(b * N + i) * 2 + 1];
      if (s < 0 || r < 0 || s + r > lengths[b])
        throw std::invalid_argument("crf: align_posteriors: spans[" + std::to_string(b) + "][" + std::to_string(i) +
                                    "] = (" + std::to_string(s) + ", " + std::to_string(r) +
                                    ") is not a span (start, duration >= 0) inside [0, length=" +
                                    std::to_string(lengths[b]) + "]");
    }
}

void validate_span_queries_host(const Dims& dims, int64_t Q, const int32_t* queries, const int32_t* num_queries,
                                const int32_t* lengths) {
  auto bad = [](const std::string& msg) { throw std::invalid_argument(msg); };
  if (Q < 1) bad("crf: span_marginals: query stride Q must be >= 1, got " + std::to_string(Q));
  if (!queries) bad("crf: span_marginals: queries is null");
  if (!num_queries) bad("crf: span_marginals: num_queries is null");
  for (int64_t b = 0; b < dims.B; ++b) {
    if (num_queries[b] < 0 || num_queries[b] > Q)
      bad("crf: span_marginals: num_queries[" + std::to_string(b) + "] = " + std::to_string(num_queries[b]) +
          " is outside [0, Q=" + std::to_string(Q) + "]");
    for (int64_t i = 0; i < num_queries[b]; ++i) {
      const int32_t* q = queries + (b * Q + i) * 3;
      if (q[0] < 0 || q[1] < 0 || static_cast<int64_t>(q[0]) + q[1] > lengths[b] || q[2] < 0 || q[2] >= dims.C)
        bad("crf: span_marginals: queries[" + std::to_string(b) + "][" + std::to_string(i) + "] = (" +
            std::to_string(q[0]) + ", " + std::to_string(q[1]) + ", " + std::to_string(q[2]) +
            ") is not (start, duration >= 0, label in [0, C=" + std::to_string(dims.C) +
            ")) inside [0, length=" + std::to_string(lengths[b]) + "]");
    }
  }
}

bool transcript_feasible(int32_t length, const int32_t* phones, const int32_t* optional, int32_t n) {
  (void)phones;  // every label can take a frame: only the count matters
  if (n < 1) return false;
  int64_t needed = 0;
  for (int32_t i = 0; i < n; ++i) needed += !(optional && optional[i] == 1);
  return static_cast<int64_t>(length) >= needed;
}

void validate_transcript_host(const Dims& dims, int64_t N, const int32_t* phones, const int32_t* num_phones,
                              const int32_t* optional, const int32_t* links) {
  validate_align_host(dims, N, phones, num_phones, optional);
  if (!links) return;
  if (optional)
    throw std::invalid_argument("crf: transcript: give optional or links, not both (links is the whole graph)");
  validate_links_host(dims.B, N, num_phones, links);
}

}  // namespace timitseg::crf
