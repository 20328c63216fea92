// The report of a training step that found a non-finite value (internal to
// train/): the dump folder or the `crf replay` file it leaves, then one
// error line naming the epoch, batch, step, tensor and utterances. Called
// by the training loop (train/train.cpp); docs/debugging.md.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <random>
#include <string>

#include "common/dist.h"
#include "model/batch.h"
#include "model/checkpoint.h"
#include "config/config.h"
#include "model/executor.h"
#include "model/numerics.h"
#include "model/params.h"
#include "train/replay_step.h"

namespace timitseg::train {

// Where the failed step happened and what its report reads (the run's, borrowed).
struct FailedStep {
  const config::Config* cfg = nullptr;
  std::filesystem::path run_dir;
  model::Executor* exec = nullptr;        // the parameters before the step (a failed step updates nothing)
  const model::ModelState* state = nullptr;
  const model::ParamLayout* layout = nullptr;
  int num_classes = 0;
  config::FaultSpec fault;                 // debug.inject_fault of this rank
  dist::Communicator* world = nullptr;
  int epoch = 0;
  size_t bi = 0, nbatches = 0;     // the batch (0-based) of the epoch's nbatches
  std::function<void(const std::string&)> log_error;  // RUN_DIR/train.log
};

// The text form of an engine's state (the rng_state metadata of checkpoints and dumps).
std::string rng_to_string(const std::mt19937_64& rng);

// A step stopped by the per-layer checks (debug.check_numerics): the dump
// folder RUN_DIR/nonfinite-step-N for replay-step, then one error
// (std::runtime_error, also logged). rng_before: the engine before the step.
[[noreturn]] void stop_on_numerics(const FailedStep& f, const model::NumericsError& e, const model::Batch& batch,
                                   const model::StepOptions& step_opts, const std::mt19937_64& rng_before);

// A step stopped by the older checks (CRF input, loss, gradients): the
// batch's CRF inputs in a `crf replay` file, then one error.
[[noreturn]] void stop_on_nonfinite(const FailedStep& f, const model::NonFiniteError& e, const model::Batch& batch,
                                    const model::StepOptions& step_opts);

}  // namespace timitseg::train
