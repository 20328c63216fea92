// The training loop of `timitseg train` (docs/training.md); the dev
// evaluation of every epoch is eval/evaluate.h's pass.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "config/config.h"
#include "eval/evaluate.h"
#include "train/batches.h"  // make_epoch_batches (bench train)
#include "eval/metrics.h"
#include "model/batch.h"
#include "model/checkpoint.h"
#include "model/executor.h"
#include "train/run_folder.h"  // format_metric: "n/a" for metrics of empty splits
#include "train/train_data.h"  // TrainData, load_train_data

namespace timitseg::train {

struct TimeBreakdown {
  double data = 0, encoder_forward = 0, encoder_backward = 0, crf = 0, optimizer = 0, dev_eval = 0;
  nlohmann::json to_json() const;
};

struct EpochRecord {
  int epoch = 0;
  // dev_per, dev_loss: NaN when there is no dev split (logged "n/a", left out of metrics.jsonl)
  double train_loss = 0, dev_per = 0, dev_loss = 0, frames_per_sec = 0, utterances_per_sec = 0, epoch_seconds = 0,
         lr = 0;
  double max_abs_transition = 0, max_abs_duration_bias = 0;
  TimeBreakdown times;
};

struct TrainResult {
  std::vector<EpochRecord> epochs;  // epochs run by this call
  std::string run_dir;
};

// After each epoch, once its metrics.jsonl line and checkpoints are written:
// what the epoch's dev evaluation decoded, so a caller can reuse it without
// decoding again (`train` refreshes RUN_DIR/report.html from it, app/cmd_model.cpp).
struct EpochEnd {
  std::string run_dir;
  int epoch = 0;
  bool best = false;                  // this epoch's state is checkpoints/best.safetensors
  const model::LabelSet* labels = nullptr;   // the label set of the segments
  // Dev utterances with their Viterbi segments (labels of *labels); empty without a dev split.
  std::vector<std::pair<const data::Utterance*, std::vector<crf::Segment>>> dev;
};
using AfterEpoch = std::function<void(const EpochEnd&)>;

// Trains from scratch (resume == false) or continues the latest
// RUN_DIR/checkpoints/epoch-N.safetensors (resume == true; cfg must be the
// checkpoint's config, possibly with train.epochs raised). after_epoch
// (optional) is called after every epoch; an exception from it propagates.
// The run folder (docs/training.md "The run folder"): train.log (the log of
// every call, appended), run.json (version, git commit, build, machine,
// device, CRF backend, start time; one entry more per resume), config.yaml,
// metrics.jsonl and checkpoints/ (best.safetensors without optimizer state,
// the last epoch-N and the train.keep_checkpoints epochs before it).
TrainResult train(const config::Config& cfg, const TrainData& data, bool resume, const AfterEpoch& after_epoch = nullptr);

// Throws when RUN_DIR already holds a run (checkpoints/epoch-N.safetensors, or
// metrics.jsonl lines other than a lone epoch-1 line without its checkpoint,
// which is what a run killed in its first epoch leaves): a fresh run must not
// mix with it.
void check_fresh_run_dir(const std::string& run_dir);

// Latest epoch checkpoint of a run directory ("" when none).
std::string latest_checkpoint(const std::string& run_dir);

}  // namespace timitseg::train
