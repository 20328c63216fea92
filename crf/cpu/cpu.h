// The cpu backend: the spec's factorized recurrences, O(T (C^2 + K C)) per
// utterance, float32 inputs/outputs, float64 arithmetic and accumulation,
// common/parallel.h over the batch (dynamic assignment; results do not depend on
// which thread ran which utterance). Parameter gradients are computed per
// utterance into workspace slots and reduced over b = 0..B-1 in order, so two
// runs give bitwise identical results and an utterance's own outputs (log Z,
// gold, Viterbi, its rows of grad cum_scores) never depend on its batch or
// padding.
#pragma once

#include <memory>

#include "crf/backend.h"

namespace timitseg::crf::cpu {

// num_threads <= 0: all hardware threads (timitseg::resolve_threads).
std::unique_ptr<Backend> make_cpu_backend(int num_threads = 0);

}  // namespace timitseg::crf::cpu
