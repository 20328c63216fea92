// The training loop on several processes (docs/multigpu.md), seen from
// train/train.cpp: each rank's share of a global batch, the stop request
// agreed by every rank, the dev evaluation split across the ranks, the
// resume command of an interrupted launch and the fault injections of the
// tests. With one process (dist::world().size() == 1) every function here is
// the one-process behaviour.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/dist.h"
#include "data/dataset.h"
#include "eval/metrics.h"
#include "model/batch.h"
#include "config/config.h"
#include "model/executor.h"
#include "model/labels.h"
#include "train/train_data.h"

namespace timitseg::train {

// This rank's part of one global batch of the epoch.
struct BatchShare {
  std::vector<int> utts;       // training-split indices of this rank's utterances, in batch order
  std::vector<int32_t> rows;   // [utts.size()] their rows in the global batch
  int global_B = 0, global_T = 0;
  int64_t global_frames = 0;   // valid frames of the global batch (after debug.fixed_length)
};
// batch: training-split indices (train/batches.h make_epoch_batches); with one
// process the share is the whole batch.
BatchShare share_of_batch(const std::vector<int>& batch, const std::vector<int32_t>& lengths, int fixed_length,
                          const dist::Communicator& world);
// Marks a collated share as such (BatchInput::share_rows; nothing with one process).
void mark_share(model::Batch& batch, const BatchShare& share, const dist::Communicator& world);

// The stop request (train/interrupt.h) agreed by every rank at a step
// boundary: 0 when no rank was asked to stop, else the exit code of the stop
// (128 + the largest signal seen by any rank; 1 for a request from code only).
int agreed_stop(dist::Communicator& world);

// The dev evaluation split across the ranks: chunk j of
// eval/evaluate.h's evaluation_chunks decoded by rank j mod N, the segments
// and NLLs gathered to every rank and the metrics accumulated in the
// one-process order, so every metric and the NLL sum are those of one process
// on the same executor. keep (optional): every utterance with its segments.
void evaluate_across_ranks(model::Executor& exec, const std::vector<const data::Utterance*>& utts, const data::Cmvn* cmvn,
                           const model::LabelSet& ls, int batch_size, eval::Metrics& metrics, double* nll_sum,
                           std::vector<std::pair<const data::Utterance*, std::vector<crf::Segment>>>* keep,
                           dist::Communicator& world);

// "timitseg train --resume DIR", with the launcher's prefix when launched
// ("mpirun -np N timitseg ...", "srun ... timitseg ..."): the line printed on an interrupt.
std::string resume_command(const std::string& run_dir, const dist::Communicator& world);

// debug.inject_exit: on its rank, before its step, throws, SIGKILLs this
// process or stops answering (sleeps until killed).
void inject_exit(const config::InjectExit& x, const dist::Communicator& world, int64_t step);

// Whether debug.inject_fault / inject_nonfinite act on this rank (debug.fault_rank).
bool fault_on_this_rank(const config::Config& cfg, const dist::Communicator& world);

// The parameters and the optimizer state are the same bits on every rank
// (the divergence check of every epoch end and of the set-up); one line naming
// the ranks that differ otherwise.
void check_state_agrees(const std::vector<float>& params, const std::vector<float>& m, const std::vector<float>& v,
                        const std::string& when);

// train.threads for one rank: as set, or with 0 (all cores) and several ranks
// on this node, this node's cores divided by the ranks on it.
int threads_of_rank(int threads, const dist::Launch& launch);

// Several GPU ranks: cudaSetDevice(the local rank's GPU) (dist::local_device).
void select_local_gpu(const dist::Launch& launch);

// debug.step_log: one steps.jsonl line, {"step", "loss", "grad_norm"} printed to 17 digits.
std::string step_line(int64_t step, const model::StepResult& r);
// The lines of RUN_DIR/steps.jsonl with step <= upto (--resume); "" for a missing file.
std::string steps_upto(const std::string& path, int64_t upto);

// Several ranks: the global batch holds a share for every rank (one line
// otherwise), every rank reads the same data (a fingerprint compared across
// the ranks), a GPU rank takes its local GPU. Nothing with one process.
void set_up_ranks(const config::Config& cfg, const TrainData& data, model::Device device, dist::Communicator& world);

}  // namespace timitseg::train
