// The float64 inputs and gradients of the reference backend's entry points
// (crf/reference/reference.h): crf::Params and crf::Grads in float64.
#pragma once

#include <cstdint>

namespace timitseg::crf::reference {

struct ParamsF64 {
  const double* cum_scores = nullptr;     // [B][T+1][C]
  const double* transition = nullptr;     // [C][C]
  const double* duration_bias = nullptr;  // [K][C]
  const double* start = nullptr;          // [C] or nullptr (zeros)
  const double* end = nullptr;            // [C] or nullptr (zeros)
  const int32_t* lengths = nullptr;       // [B]
  const double* onset = nullptr;          // [B][T][C] or nullptr (none)
};

struct GradsF64 {  // overwritten; nullptr = not wanted
  double* cum_scores = nullptr;     // [B][T+1][C]
  double* transition = nullptr;     // [C][C]
  double* duration_bias = nullptr;  // [K][C]
  double* start = nullptr;          // [C]
  double* end = nullptr;            // [C]
  double* onset = nullptr;          // [B][T][C] (when ParamsF64::onset is set; padding 0)
};

}  // namespace timitseg::crf::reference
