// The `crf replay` file of a training step that failed (train/step_failure.cpp;
// docs/debugging.md).
#pragma once

#include <string>
#include <vector>

#include "model/batch.h"
#include "model/params.h"

namespace timitseg::model {

// CRF inputs of a batch in `crf replay` format (cum_scores, transition,
// duration_bias, start, end, lengths, labels), written atomically.
void write_replay(const std::string& path, const ParamLayout& layout, const std::vector<float>& params,
                  const Batch& batch, const std::vector<float>& cum);

}  // namespace timitseg::model
