// Fault injection's plain values (docs/debugging.md): the pass and
// the layer names of the executors' numeric taps (model/numerics.h lists what
// each layer taps), and the fault spec of debug.inject_fault and
// --inject-fault. The config validates the spec with the same parser that
// the train loop and replay-step use.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/enum_names.h"

namespace timitseg::config {

// debug.inject_fault's pass=PASS and value=VALUE.
enum class Pass { forward, backward };
TIMITSEG_ENUM_NAMES(Pass, 2, {Pass::forward, "forward"}, {Pass::backward, "backward"});
enum class FaultValue { nan, inf };
TIMITSEG_ENUM_NAMES(FaultValue, 2, {FaultValue::nan, "nan"}, {FaultValue::inf, "inf"});
const char* pass_name(Pass p);

// Every layer name of a model with `num_layers` LSTM layers, in forward tap
// order; onset: the model has crf.onset_projection (crf.onset_features).
std::vector<std::string> numerics_layers(int num_layers, bool onset = false);

// --inject-fault layer=NAME,pass=forward|backward,step=N,value=nan|inf
// (step: global optimizer step, from 1). Throws std::invalid_argument naming
// the problem. debug.inject_nonfinite "EPOCH:BATCH" (the older form) is
// converted by the train loop.
struct FaultSpec {
  std::string layer;  // empty: no fault
  Pass pass = Pass::forward;
  int64_t step = 0;
  float value = std::numeric_limits<float>::quiet_NaN();
  bool empty() const { return layer.empty(); }
  static FaultSpec parse(const std::string& text, int num_layers, bool onset = false);
  std::string to_string() const;
};

}  // namespace timitseg::config
