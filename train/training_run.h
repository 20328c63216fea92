// The set-up of one training run (train/train.cpp's first named step):
// TrainingRun, what every step of the run reads, and set_up_run, which fills
// it before the first epoch: the configuration checked, the executor, the run
// folder (train.log, run.json, config.yaml, metrics.jsonl), the state (fresh
// or resumed from the latest epoch checkpoint) and the schedule with its
// debug injections (train/run_setup.cpp). Private to train/.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/dist.h"
#include "common/run_lock.h"
#include "config/config.h"
#include "config/fault_spec.h"
#include "data/dataset.h"
#include "model/checkpoint.h"
#include "model/executor.h"
#include "model/labels.h"
#include "model/params.h"
#include "options/device_choice.h"
#include "train/run_folder.h"
#include "train/train_data.h"

namespace timitseg::train::detail {

// What every step of a run reads: set up once by set_up_run, before the first epoch.
struct TrainingRun {
  config::Config cfg;                 // the caller's, with the doctest limits applied and validated
  options::DeviceChoice choice;        // train.device, crf.backend, train.rnn_algo with `auto` resolved (options/device_choice.h)
  model::Device device = model::Device::cpu;  // choice.device
  model::LabelSet ls;
  int threads = 0;
  config::FaultSpec fault;            // debug.inject_fault
  model::ModelState state;           // dims, labels, features, CMVN, parameters, optimizer, epoch, best so far
  std::unique_ptr<model::Executor> exec;
  std::optional<model::ParamLayout> layout;
  std::filesystem::path run_dir, ckpt_dir;
  std::optional<RunLock> lock;       // RUN_DIR/.timitseg.lock (rank 0), for the whole call
  std::optional<LogFile> log_file;  // RUN_DIR/train.log, for the whole call
  std::string metrics_path, metrics_text;
  std::string steps_text;  // debug.step_log: RUN_DIR/steps.jsonl so far
  std::mt19937_64 rng;
  int fixed_length = 0;
  int inject_epoch = -1, inject_batch = -1;  // debug.inject_nonfinite
  std::vector<int32_t> lengths;              // [N] frames of each training utterance
  std::vector<uint8_t> by_transcript;        // [N] 1: trains on its phone sequence (train_data.h trains_on_transcript)
  int64_t batches_per_epoch = 0, total_steps = 0;
  const data::Cmvn* cmvn = nullptr;
  std::vector<const data::Utterance*> dev_utts;
  dist::Communicator* world = nullptr;  // dist::world(): one process, or the ranks of mpirun / srun
  config::InjectExit inject_exit;               // debug.inject_exit
  std::unique_ptr<dist::Watchdog> watchdog;  // several processes: 2 x train.dist_timeout without progress ends this one
  void stamp(const char* phase) const {
    if (watchdog) watchdog->stamp(phase);
  }
  bool rank0() const { return world->rank() == 0; }
  // An error line for RUN_DIR/train.log (rank 0 writes it; other ranks' reach stderr only).
  void log_error(const std::string& msg) const {
    if (log_file) log_file->error(msg);
  }
};

// Fills r before the first epoch (see the top of this file); resume: from
// the latest epoch checkpoint of train.run_dir.
void set_up_run(TrainingRun& r, const config::Config& cfg_in, const TrainData& data, bool resume);

}  // namespace timitseg::train::detail
