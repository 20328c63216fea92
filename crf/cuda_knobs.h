// The CUDA CRF backend's environment knobs (crf/cuda/backend.cu reads them once
// when a backend is made): settings/env.cpp's table checks each value against
// its words; here they become enums, so the backend compares values, never
// text. Each enum's words are its knob's words in that table (CudaKnobs.* in
// tests/crf/test_cuda_knobs.cpp compares the two). No CUDA here: the knobs
// read the same in every build (and their tests run without a GPU).
#pragma once

#include <optional>
#include <string>

#include "common/enum_names.h"
#include "settings/env.h"

namespace timitseg::crf {

// TIMITSEG_CUDA_RECURRENCE: the scaled linear-domain log-sum-exp kernel where
// it fits (fast), or the log-domain kernel everywhere (exact); the two agree to
// float64 rounding.
enum class CudaRecurrence { fast, exact };
TIMITSEG_ENUM_NAMES(CudaRecurrence, 2, {CudaRecurrence::fast, "fast"}, {CudaRecurrence::exact, "exact"});

// TIMITSEG_CUDA_MARGINALS: the parameter marginals summed in the linear domain
// where the kernel fits (linear), or with one exp per term (exact).
enum class CudaMarginals { linear, exact };
TIMITSEG_ENUM_NAMES(CudaMarginals, 2, {CudaMarginals::linear, "linear"}, {CudaMarginals::exact, "exact"});

// TIMITSEG_CUDA_RING: the recurrence state in a shared-memory ring where it
// fits (shared), or in global memory always (global).
enum class CudaRing { shared, global };
TIMITSEG_ENUM_NAMES(CudaRing, 2, {CudaRing::shared, "shared"}, {CudaRing::global, "global"});

// TIMITSEG_CUDA_CHECKPOINT: the checkpointed backward (docs/crf.md) for a long
// input (auto), at every size (always) or never.
enum class CudaCheckpoint { automatic, always, never };
TIMITSEG_ENUM_NAMES(CudaCheckpoint, 3, {CudaCheckpoint::automatic, "auto"}, {CudaCheckpoint::always, "always"},
                    {CudaCheckpoint::never, "never"});

// The knobs' values; unset (or empty) gives the default here.
struct CudaKnobs {
  int lanes = 0;  // TIMITSEG_CUDA_LANES: lanes per label group, 4, 8, 16 or 32; 0 = chosen from K and C
  CudaRecurrence recurrence = CudaRecurrence::fast;
  CudaMarginals marginals = CudaMarginals::linear;
  CudaRing ring = CudaRing::shared;
  CudaCheckpoint checkpoint = CudaCheckpoint::automatic;
};

// Knob `name`'s value as E (its words checked by settings/env.cpp's table), or `fallback` when unset.
template <class E>
E cuda_knob(const char* name, E fallback, const env::Lookup& lookup) {
  const std::optional<std::string> word = env::word(name, lookup);
  return word ? common::enum_value<E>(*word, name) : fallback;
}

// The knobs from the environment (or `lookup`, a test's). A value that is none
// of its knob's words is settings/env.h's one error line naming the knob.
// Inline: the CUDA backend's library (crf/cuda/) calls it below timitseg_crf.
inline CudaKnobs cuda_knobs_from_environment(const env::Lookup& lookup = {}) {
  CudaKnobs k;
  if (const std::optional<std::string> lanes = env::word("TIMITSEG_CUDA_LANES", lookup)) k.lanes = std::stoi(*lanes);
  k.recurrence = cuda_knob("TIMITSEG_CUDA_RECURRENCE", k.recurrence, lookup);
  k.marginals = cuda_knob("TIMITSEG_CUDA_MARGINALS", k.marginals, lookup);
  k.ring = cuda_knob("TIMITSEG_CUDA_RING", k.ring, lookup);
  k.checkpoint = cuda_knob("TIMITSEG_CUDA_CHECKPOINT", k.checkpoint, lookup);
  return k;
}

}  // namespace timitseg::crf
