// One timing loop for the CRF benchmarks (`timitseg bench crf` and
// bench/cuda_crf_bench): untimed warm-up calls, then timed calls, each between
// two Backend::synchronize() so that a device backend's queued work is
// counted in full. Programs print the numbers; nothing here asserts.
#pragma once

#include <functional>

#include "crf/backend.h"

namespace timitseg::crf {

struct Timing {
  double median_ms = 0;  // median of the timed calls (mean of the middle two for an even count)
  double min_ms = 0;
};

// Runs call(i) for i = 0 .. warmup-1 untimed, then for i = 0 .. repeats-1
// timed (wall clock, std::chrono::steady_clock). repeats >= 1.
Timing time_calls(Backend& backend, int warmup, int repeats, const std::function<void(int i)>& call);

}  // namespace timitseg::crf
