// Forced alignment with a checkpoint: `timitseg align` (audio + known phone
// or word sequence -> .PHN + TextGrid) and the alignment metrics of
// `evaluate --align` (eval/align_metrics.h; docs/align.md). The constrained Viterbi is
// crf::Backend::align (docs/crf.md "Forced alignment"); the transcripts come
// from data/transcripts.h.
#pragma once

#include "eval/align_input.h"
#include "eval/align_options.h"
#include "eval/boundary_shifts.h"
#include "eval/silence_edges.h"
#include "eval/formats.h"
#include "model/checkpoint.h"
#include "model/executor.h"

namespace timitseg::eval {

// Writes OUT/<name>.<suffix> per input and format (eval/formats.h; by default
// .PHN in samples of the file as given, and .TextGrid with the tier "phones",
// and "words" when words were given), each atomically; a bad input is one error line and the others go on
// (then throws at the end with the count). Returns the number aligned.
int align(const AlignOptions& o);

// Aligns one input in memory with exec, as `timitseg align` does (the
// pronunciation chosen by score, the constrained Viterbi; no confidences):
// the phones and, when the transcript had words, the words tier. Throws
// "AUDIO: no alignment of finite score (...)". The C API's model handle
// aligns through it.
// shifts (nullptr: none): each boundary moved by its phone's shift, as `align --shifts`.
// edges (nullptr: none): silence edges at the energy change (eval/silence_edges.h), before the
// shifts; the input must hold its samples (align_input's keep_samples).
// boundaries: the constrained Viterbi's, or the posteriors' (crf/posterior_boundaries.h), before the edges.
Segmentation align_one(model::Executor& exec, AlignInput input, const model::ModelState& s,
                       const BoundaryShifts* shifts = nullptr, const SilenceEdgeOptions* edges = nullptr,
                       crf::AlignBoundaries boundaries = crf::AlignBoundaries::viterbi);

}  // namespace timitseg::eval
