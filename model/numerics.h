// Per-layer numeric checks and fault injection (docs/debugging.md).
//
// Every executor calls its tap after each layer's forward and each layer's
// backward with the tensors that layer wrote, in execution order. A tap
//   1. plants the fault of StepOptions::fault (one value, element 0 of the
//      FIRST tensor of that layer and pass, at that global optimizer step), and
//   2. with StepOptions::check_numerics, counts NaN and Inf and the finite
//      min/max of every tapped tensor.
// The first tensor with a non-finite value stops the step with a
// NumericsError naming layer, pass and tensor (the GPU executor reduces each
// tensor on the device into a slot and reads all slots back once per step, so
// "first" is the first in tap order).
//
// Layer names, in tap order:
//   forward:  input (features), input_proj (its output after dropout),
//             lstm.{k}.fwd / lstm.{k}.bwd (each direction's half of layer k's
//             output), projection (scores), onset_projection (the onset
//             scores; only with crf.onset_features), center, cumsum (the centered
//             cumsum is one fused operation: both taps see cum_scores, the
//             center tap first), crf (log Z and gold score per utterance),
//             penalty (the L2 penalty value)
//   backward: crf (d cum_scores, d transition/duration_bias/start/end),
//             cumsum, center (d scores, the gradient through the fused
//             centered cumsum), projection (d weight, d bias, d input),
//             onset_projection (its d weight, d bias, and d input so far),
//             lstm.{k}.bwd / lstm.{k}.fwd (that direction's weight and bias
//             gradients, and d input of layer k), input_proj (d weight,
//             d bias, d output), input (d features), penalty (the CRF
//             parameter gradients after the penalty's share), optimizer (the
//             updated parameters and AdamW moments, after the update)
#pragma once

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/fault_spec.h"

namespace timitseg::model {

struct TensorStats {
  int64_t nan = 0, inf = 0, finite = 0;
  double min = std::numeric_limits<double>::infinity();   // of the finite values
  double max = -std::numeric_limits<double>::infinity();
  bool bad() const { return nan + inf > 0; }
};
TensorStats tensor_stats(const float* x, size_t n);
TensorStats tensor_stats(const double* x, size_t n);

struct NumericsHit {
  std::string layer;
  config::Pass pass = config::Pass::forward;
  std::string tensor;
  TensorStats stats;
  std::string describe() const;  // "layer lstm.1.fwd, backward pass, tensor ...: 3 NaN, 0 Inf, finite min ... max ..."
};

// Thrown by a step whose numeric check found a non-finite value.
class NumericsError : public std::runtime_error {
 public:
  explicit NumericsError(NumericsHit hit) : std::runtime_error(hit.describe()), hit_(std::move(hit)) {}
  const NumericsHit& hit() const { return hit_; }

 private:
  NumericsHit hit_;
};

}  // namespace timitseg::model
