// Forced alignment of a long utterance in a band: the constrained Viterbi of
// docs/crf.md restricted, at every frame boundary t, to a window of W
// consecutive phones [lo[t], lo[t] + W) (docs/crf.md "Forced alignment of long
// recordings (banded)"). Cost O(L W K) time and O(L W) bytes instead of
// O(L N K) and O(L N). The band comes from two cheap passes of the recurrence
// itself (forward and on the reversed problem, each following its best phone
// row by row); when the best path in the band touches the band's edge, the
// band is widened around that path and the alignment redone, until it does
// not (a band of every phone is the full recurrence). Every value is computed by the full table's
// float64 expressions in its order, so when the full table's path lies inside
// the band the score and spans are bitwise the full table's (tested:
// tests/crf/test_align_banded.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "crf/cpu/align_bounded.h"

namespace timitseg::crf::cpu {

// The width (phones) of the two first passes that place the band, and the
// most memory the band's back pointers may take (3 bytes a cell) before
// align_banded stops widening.
constexpr int64_t kBandStartWidth = 32;
constexpr size_t kBandMaxBytes = size_t{1} << 30;

// A band over the rows t = 0..L of one utterance: row t holds the phones
// [lo[t], hi[t]) (0 <= lo < hi <= np).
struct Band {
  std::vector<int32_t> lo, hi;  // [L + 1] each
  int64_t cells() const;        // the sum of the rows' widths
  int64_t max_width() const;
};

// The result of one banded pass.
struct BandPass {
  double score = 0;           // the best alignment inside the band (-inf: none)
  bool touches_edge = false;  // its path uses a cell on an inner edge of the band (or none was found)
};

// One pass: the constrained Viterbi restricted to `band`, spans [np][2] of
// its best path. Allocates band.cells() * 3 bytes of back pointers.
BandPass align_in_band(const AlignUtterance& u, const Band& band, int32_t* spans);

// The first estimate of where the path is, row by row: a pass of the
// recurrence (no back pointers) over a window of `width` phones that follows,
// at each row, the best "phones 0..n done at t" of the row before (at most 2
// phones a frame). Returns that phone per row t = 0..L. It runs ahead of the
// path where squeezing phones is cheap; the same pass on the time-reversed
// problem runs behind it, so the band holds both (band_between).
std::vector<int32_t> forward_centres(const AlignUtterance& u, int64_t width);
std::vector<int32_t> backward_centres(const AlignUtterance& u, int64_t width);
// Rows [min(a, b) - margin, max(a, b) + margin] clamped to [0, np).
Band band_between(const std::vector<int32_t>& a, const std::vector<int32_t>& b, int64_t np, int64_t margin);
// The band `margin` phones either side of the path of spans [np][2] (the phone
// covering frame t; the last phone at t = L), joined with `old` when given.
Band band_around(const int32_t* spans, int64_t np, int64_t L, int64_t margin, const Band* old = nullptr);

struct BandedStats {
  int passes = 0;               // banded passes run
  int64_t cells = 0;            // the last band's cells
  int64_t max_width = 0;        // its widest row
  bool exact_fallback = false;  // the checkpointed full recurrence was used instead
};

// The whole method: the band between the forward and backward centres
// (passes of `width` phones, <= 0: kBandStartWidth) with a margin of width/2,
// then, while the best path in it touches its edge, the band around that
// path with twice the margin, joined with the last. When the band's back
// pointers would need more than max_bytes, the checkpointed full recurrence
// (align_bounded) is used if it fits in max_bytes; otherwise a
// std::runtime_error says which limit was hit and what to do. Writes spans
// [np][2], returns the score (-inf: infeasible). `first`, when given, is the
// first band instead of the one between the centres (tests force the
// widening with it). threads: the two centre passes run side by side when >= 2
// (common/parallel.h; the result does not depend on it).
double align_banded(const AlignUtterance& u, int32_t* spans, int64_t width = 0, size_t max_bytes = kBandMaxBytes,
                    BandedStats* stats = nullptr, const Band* first = nullptr, int threads = 1);

}  // namespace timitseg::crf::cpu
