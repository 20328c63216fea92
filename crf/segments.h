// Segments (crf/backend.h's Segment rows) from frame labels, alignments and
// Viterbi output, and a transcript's phones merged as frame labels merge into
// runs.
#pragma once

#include <cstdint>
#include <vector>

#include "crf/backend.h"

namespace timitseg::crf {

// The gold segmentation of one utterance from its frame labels [length]
// (spec "Gold segmentation"): maximal runs of equal labels, a run of length
// r > K split left to right into floor(r/K) pieces of K then the remainder.
// Rows carry `batch`. Labels are assumed validated (validate_host).
std::vector<Segment> gold_segments(const int32_t* labels, int32_t length, int64_t K, int32_t batch = 0);

// Merges a transcript's consecutive equal labels as frame labels merge into
// runs (docs/crf.md "What Z_c sums over, exactly"): phones [n] and optional
// [n] (nullptr = none) rewritten in place, the new count returned. Two equal
// phones in a row become one; an optional phone equal to its kept
// neighbour goes (the run is there either way), a kept one replacing an
// optional one before it. align()'s rules on optional phones still hold
// after it. Equal labels around an optional phone ("a sil? a") stay.
int32_t merge_repeated_phones(int32_t* phones, int32_t* optional, int32_t n);

// The segments (start, duration, label) of an alignment's segmentation:
// each phone's span [start, start+duration) split left to right into pieces
// of K, then the remainder (the gold-run rule); skipped phones (duration 0)
// give none. spans [n][2], phones [n].
std::vector<Segment> align_segments(int64_t K, const int32_t* phones, int64_t n, const int32_t* spans,
                                    int32_t batch = 0);

// Flatten per-utterance Viterbi output ([B][T][3] + counts) into Segment rows.
std::vector<Segment> collect_segments(const Dims& dims, const int32_t* segments, const int32_t* num_segments);

}  // namespace timitseg::crf
