// Host-side checks of a backend's inputs (crf/backend.h): every host backend
// runs them before any work; the cuda backend checks on the device with the
// same messages. Pointers are host pointers.
#pragma once

#include <cstdint>

#include "crf/backend.h"

namespace timitseg::crf {

// Host-side input validation used by every backend before any work:
// K >= 1, C >= 1, T >= 1, B >= 1, lengths in [1,T], labels in [0,C) on valid
// frames, cum_scores finite on the valid rows 0..lengths[b]; transition,
// duration_bias, start and end finite or -inf (-inf forbids that transition /
// duration / first label / last label; NaN and +inf are rejected); onset (when
// given) finite on the valid frames t < lengths[b]. Throws
// std::invalid_argument naming the tensor, the index and the value. Pointers
// must be host pointers. With -inf parameters every backend throws
// std::runtime_error naming the utterance when its log Z is -inf (no path of
// finite score) or, with labels, when its gold segmentation scores -inf.
void validate_host(const Dims& dims, const Params& p, const int32_t* labels);

// Host-side checks of align's phone inputs (every backend's host part calls
// it; the cuda backend checks on the device with the same messages): N >= 1,
// num_phones[b] in [1, N], phones[b][i] in [0, C) for i < num_phones[b];
// optional (when given) 0 or 1 there, never 1 twice in a row, never 1 for
// every phone. Throws std::invalid_argument naming the tensor, the index and the value.
void validate_align_host(const Dims& dims, int64_t N, const int32_t* phones, const int32_t* num_phones,
                         const int32_t* optional = nullptr);

// Host-side checks of the confidence queries (every host backend calls them;
// the cuda backend checks on the device with the same messages): spans
// [B][N][2] for phones n < num_phones[b] with start >= 0, duration >= 0 and
// start + duration <= lengths[b]; queries [B][Q][3] with num_queries[b] in
// [0, Q], start >= 0, duration >= 0, start + duration <= lengths[b], label in
// [0, C). Throws std::invalid_argument naming the tensor, the index and the value.
void validate_align_spans_host(const Dims& dims, int64_t N, const int32_t* num_phones, const int32_t* lengths,
                               const int32_t* spans);
void validate_span_queries_host(const Dims& dims, int64_t Q, const int32_t* queries, const int32_t* num_queries,
                                const int32_t* lengths);

// True when an utterance of `length` frames can hold its transcript phones
// [n] (optional [n] or nullptr): length >= the number of non-optional phones,
// and n >= 1. False means log Z_c = -inf whatever the scores (the transcript
// loss skips such an utterance with one line naming it).
bool transcript_feasible(int32_t length, const int32_t* phones, const int32_t* optional, int32_t n);

// validate_align_host's checks of a transcript, and links [B][N] (nullptr =
// the chain of optional; else optional must be nullptr and every entry passes
// validate_links_host).
void validate_transcript_host(const Dims& dims, int64_t N, const int32_t* phones, const int32_t* num_phones,
                              const int32_t* optional, const int32_t* links);

}  // namespace timitseg::crf
