// Dump folders of a failed training step and `timitseg replay-step`
// (docs/debugging.md). When the per-layer checks (model/numerics.h) stop a
// step, the train loop writes RUN_DIR/nonfinite-step-N/:
//   batch.safetensors  features F32 [B,T,D] (as collated), labels I32 [B,T],
//                      lengths I32 [B], source_frames I32 [B]; metadata:
//                      utterance_ids (space-separated), epoch, batch (from 1),
//                      step (global optimizer step, from 1), lr, seed,
//                      rng_state (the CPU engine before the step, as
//                      checkpoints store it), fault (--inject-fault or "")
//   state.safetensors  a checkpoint of the model and AdamW state BEFORE the
//                      step (after it, for a hit in the optimizer layer)
//   config.yaml        the run's configuration
//   report.json        the hit: layer, pass, tensor, nan, inf, finite,
//                      min, max, epoch, batch, step, utterance_ids
// replay_step() re-runs that step from the folder.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>

#include "model/batch.h"
#include "model/checkpoint.h"
#include "config/config.h"
#include "model/executor.h"
#include "model/numerics.h"

namespace timitseg::train {

struct StepDumpInfo {
  int epoch = 0;
  int batch = 0;      // from 1
  int64_t step = 0;   // global optimizer step, from 1
  double lr = 0;      // the step's learning rate
  std::string rng_state;  // CPU engine before the step
  config::FaultSpec fault;        // the run's --inject-fault ("" when none)
  // Several processes (docs/multigpu.md): the failing rank, the rank count and
  // the step's global loss normalization (0: one process). The batch is then
  // that rank's share (its share_rows, global_B and global_T are saved too),
  // and replay-step re-runs that share in one process with the same masks.
  int rank = 0, world_size = 1;
  double loss_norm = 0;
};

// Writes DIR atomically (a temporary folder renamed at the end; an existing
// DIR is replaced). `state` is the model and optimizer state before the step.
void write_step_dump(const std::string& dir, const model::Batch& batch, const config::Config& cfg, const model::ModelState& state,
                     const StepDumpInfo& info, const model::NumericsHit& hit);

struct ReplayStepOptions {
  std::string dump;         // the dump folder
  std::optional<config::DeviceSetting> device;     // --device; unset = the run's train.device
  std::optional<crf::BackendKind> crf_backend;  // --crf-backend; unset = the run's crf.backend
  int fixed_length = 0;     // > 0: truncate/pad every row to N frames (debug.fixed_length)
  bool check_numerics = false;  // force the per-layer checks on (else the run's debug.check_numerics)
  bool without_fault = false;   // do not plant the run's --inject-fault
  int threads = -1;             // CPU threads; < 0: the run's train.threads
};

struct ReplayStepResult {
  int64_t step = 0;
  model::StepResult result;
  std::string executor;  // Executor::description()
};

// Loads the folder, builds the executor, restores the rng and runs the step
// (train_step) with the stored step, seed, learning rate and fault. Throws
// NumericsError for a hit, NonFiniteError for the older checks, and
// std::runtime_error naming the file for a missing or malformed dump.
ReplayStepResult replay_step(const ReplayStepOptions& options);

// debug.fixed_length applied to a collated batch: every row truncated or
// padded (zero features, last label repeated) to exactly N frames.
model::Batch fix_batch_length(const model::Batch& batch, int fixed_length, int input_dim);

}  // namespace timitseg::train
