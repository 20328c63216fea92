// Brute-force oracle of forced alignment (docs/crf.md "Forced alignment"):
// every composition of L frames into the N phones, each phone cut into pieces
// of K then the remainder by hand, the segmentation scored term by term as in
// the spec's Score(y). Independent of every backend (no recurrence, no
// align_segments). Tiny problems only; header-only, test code only.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "crf/backend.h"
#include "tests/support/crf_bruteforce.h"
#include "tests/support/crf_problems.h"

namespace timitseg::crf::testing {

struct AlignPath {
  std::vector<int32_t> spans;  // [N][2] (start, duration)
  double score;                // -inf when it uses a forbidden entry
};

// The segmentation of given phone spans: each phone of r frames is r/K pieces
// of K, then r%K frames if nonzero (written independently of crf::align_segments).
inline std::vector<Segment> split_spans(const std::vector<int32_t>& phones, const std::vector<int32_t>& spans,
                                        int64_t K) {
  std::vector<Segment> segs;
  for (size_t n = 0; n < phones.size(); ++n) {
    const int32_t u = spans[2 * n], r = spans[2 * n + 1];
    for (int32_t i = 0; i < r / K; ++i)
      segs.push_back(Segment{0, static_cast<int32_t>(u + i * K), static_cast<int32_t>(K), phones[n]});
    if (r % K) segs.push_back(Segment{0, static_cast<int32_t>(u + (r / K) * K), static_cast<int32_t>(r % K), phones[n]});
  }
  return segs;
}

// Every alignment of phones (n of them) to utterance b's L frames, in the
// order of compositions (r_1, ..., r_n) lexicographic; r_i >= 1, or >= 0 when
// optional[i] is 1 (a skipped phone has the span (t, 0)).
inline std::vector<AlignPath> enumerate_alignments(const Problem& pb, int64_t b, const std::vector<int32_t>& phones,
                                                   const std::vector<int32_t>& optional = {}) {
  const int64_t L = pb.lengths[b], n = static_cast<int64_t>(phones.size()), K = pb.dims.K;
  auto opt = [&](int64_t i) { return !optional.empty() && optional[i] == 1; };
  std::vector<int64_t> kept_after(n + 1, 0);  // phones kept from i on (each needs a frame)
  for (int64_t i = n - 1; i >= 0; --i) kept_after[i] = kept_after[i + 1] + (opt(i) ? 0 : 1);
  std::vector<AlignPath> out;
  std::vector<int32_t> spans(2 * n, 0);
  std::function<void(int64_t, int64_t)> rec = [&](int64_t i, int64_t t) {
    if (i == n) {
      if (t == L) out.push_back(AlignPath{spans, segmentation_score(pb, b, split_spans(phones, spans, K))});
      return;
    }
    for (int64_t r = opt(i) ? 0 : 1; t + r + kept_after[i + 1] <= L; ++r) {
      spans[2 * i] = static_cast<int32_t>(t);
      spans[2 * i + 1] = static_cast<int32_t>(r);
      rec(i + 1, t + r);
    }
  };
  rec(0, 0);
  return out;
}

// Random phone sequences [B][N] with num_phones[b] in [1, N] (labels in [0, C);
// consecutive repeats allowed and, with C small, frequent).
inline void random_phones(std::mt19937& rng, int64_t B, int64_t N, int64_t C, std::vector<int32_t>& phones,
                          std::vector<int32_t>& num_phones, int64_t min_n = 1) {
  std::uniform_int_distribution<int32_t> ulab(0, static_cast<int32_t>(C - 1));
  std::uniform_int_distribution<int64_t> un(min_n, N);
  phones.assign(B * N, 0);
  num_phones.assign(B, 0);
  for (int64_t b = 0; b < B; ++b) {
    num_phones[b] = static_cast<int32_t>(un(rng));
    for (int64_t i = 0; i < num_phones[b]; ++i) phones[b * N + i] = ulab(rng);
  }
}

// Random optional flags [B][N] for phones with num_phones: each phone optional
// with probability p, never two in a row, never all of an utterance's.
inline std::vector<int32_t> random_optional(std::mt19937& rng, int64_t B, int64_t N, const std::vector<int32_t>& nph,
                                            double p) {
  std::bernoulli_distribution coin(p);
  std::vector<int32_t> opt(B * N, 0);
  for (int64_t b = 0; b < B; ++b) {
    int64_t kept = 0;
    for (int64_t i = 0; i < nph[b]; ++i) {
      opt[b * N + i] = (i == 0 || opt[b * N + i - 1] == 0) && coin(rng) ? 1 : 0;
      kept += opt[b * N + i] == 0;
    }
    if (kept == 0) opt[b * N] = 0;
  }
  return opt;
}

}  // namespace timitseg::crf::testing
