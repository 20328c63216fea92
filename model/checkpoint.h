// Checkpoints: safetensors files with the parameters under PyTorch names,
// what decode needs (feature options, CMVN, label set) and the training state
// for --resume.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/dataset.h"
#include "model/config.h"
#include "model/labels.h"
#include "model/optim.h"
#include "model/params.h"

namespace timitseg::model {

// Everything a checkpoint carries: weights, what decode needs (feature options,
// CMVN, label set) and the training state for --resume.
struct ModelState {
  Config config;
  ModelDims dims;
  LabelSet labels;
  data::FeatureOptions features;
  bool has_cmvn = false;
  data::Cmvn cmvn;
  std::vector<float> params;  // ParamLayout(dims)
  // training state
  AdamW optimizer;
  int epoch = 0;  // epochs completed
  std::string rng_state;
  double best_dev_per = std::numeric_limits<double>::infinity();
  int best_epoch = 0;
  double dev_per = std::numeric_limits<double>::quiet_NaN();
};

// Atomic (safetensors temp file + rename). with_optimizer adds
// optimizer.exp_avg.NAME / optimizer.exp_avg_sq.NAME tensors.
void save_checkpoint(const std::string& path, const ModelState& s, bool with_optimizer = true);
// Throws naming the file on a missing tensor or a shape mismatch.
ModelState load_checkpoint(const std::string& path);

}  // namespace timitseg::model
