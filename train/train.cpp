// Training loop: train() at the end of this file drives the named steps
// above it: set_up_run (train/training_run.h, train/run_setup.cpp: config
// checks, executor, run folder, fresh or resumed state, schedule), one_epoch
// (batches of train/batches.h, one_step each: AdamW + cosine schedule + clipping on the executor, interrupts, the
// non-finite stops with a replay-step dump or a crf-replay file),
// dev_evaluation (eval/evaluate.h), drift_check, checkpoint (metrics.jsonl,
// best and epoch checkpoints, the log line).
#include "model/feature_check.h"
#include "train/train.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <functional>
#include <memory>
#include <optional>

#include "common/atomic_file.h"
#include "common/progress.h"
#include "common/version.h"
#include "crf/duration.h"
#include "model/drift.h"
#include "model/step_recipe.h"  // loss_normalization: the step's, once
#include "options/device_choice.h"
#include "options/options.h"
#include "train/augment_batch.h"
#include "train/batches.h"
#include "train/distributed.h"
#include "train/gaussian_reestimate.h"
#include "train/interrupt.h"
#include "train/replay_step.h"
#include "train/run_folder.h"
#include "train/step_failure.h"
#include "train/training_run.h"  // TrainingRun, set_up_run

namespace fs = std::filesystem;

namespace timitseg::train {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

nlohmann::json TimeBreakdown::to_json() const {
  return {{"data", data},           {"encoder_forward", encoder_forward}, {"encoder_backward", encoder_backward},
          {"crf", crf},             {"optimizer", optimizer},             {"dev_eval", dev_eval}};
}

namespace {

using detail::set_up_run;   // train/training_run.h: the first named step
using detail::TrainingRun;

// SIGINT / SIGTERM (train/interrupt.h) seen between steps, where nothing is
// being written: stops with Interrupted; --resume goes on from the last finished epoch.
// exit_code: agreed_stop's (every rank stops after the same step with the same code).
[[noreturn]] void stop_interrupted(const TrainingRun& r, int epoch, size_t bi, int exit_code) {
  const std::string at = "interrupted at epoch " + std::to_string(epoch) + ", batch " + std::to_string(bi);
  // epoch - 1 >= 1: checkpoints/epoch-(epoch-1) exists (finished here or resumed from).
  const std::string msg = epoch > 1 ? at + "; resume with: " + resume_command(r.cfg.train_run_dir, *r.world) +
                                          (r.world->size() > 1 ? " (any number of ranks)" : "")
                                    : at + ", before the first epoch finished (nothing to resume); start again "
                                           "with the same `timitseg train` command";
  r.log_error(msg);
  throw Interrupted(msg, exit_code);
}

// Where a failed step happened, for its report (train/step_failure.h).
FailedStep failed_step(const TrainingRun& r, int epoch, size_t bi, size_t nbatches) {
  FailedStep f;
  f.cfg = &r.cfg;
  f.run_dir = r.run_dir;
  f.exec = r.exec.get();
  f.state = &r.state;
  f.layout = &*r.layout;
  f.num_classes = r.ls.size();
  f.fault = r.fault;
  f.world = r.world;
  f.epoch = epoch;
  f.bi = bi;
  f.nbatches = nbatches;
  f.log_error = [&r](const std::string& msg) { r.log_error(msg); };
  return f;
}

// One step: the options of this update (scheduled lr, debug injections), the
// executor's train_step, and on a non-finite value the report that stops the run.
model::StepResult one_step(TrainingRun& r, const model::Batch& batch, int epoch, size_t bi, size_t nbatches, model::StepOptions& step_opts,
                    const BatchShare& share) {
  const config::Config& cfg = r.cfg;
  step_opts = options::step_options(cfg);  // options/options.h
  step_opts.lr = model::scheduled_lr(cfg.train_lr_schedule, cfg.train_lr, cfg.train_min_lr, r.state.optimizer.step, r.total_steps,
                       r.batches_per_epoch);
  step_opts.time_parts = r.exec->device() == model::Device::cpu;  // free on the CPU; on the GPU it would serialize the step
  step_opts.rng = &r.rng;
  step_opts.step = r.state.optimizer.step + 1;
  step_opts.fault = r.fault;
  if (r.world->size() > 1)  // every rank divides by the global batch's norm (model/dist_step.h)
    step_opts.loss_norm = model::loss_normalization(step_opts.frame_normalization, share.global_B, share.global_frames);
  inject_exit(r.inject_exit, *r.world, step_opts.step);
  const std::mt19937_64 rng_before = r.rng;  // for the dump of a failed step (2.5 KB copy)
  const bool inject = epoch == r.inject_epoch && static_cast<int>(bi) + 1 == r.inject_batch;
  if (inject)  // debug.inject_nonfinite: poison one transition entry for this step
    step_opts.poison.emplace_back(r.layout->crf().transition.offset, std::numeric_limits<float>::quiet_NaN());
  model::StepResult sr;
  try {
    sr = r.exec->train_step(batch, step_opts);
    ++r.state.optimizer.step;
  } catch (const model::NumericsError& e) {
    stop_on_numerics(failed_step(r, epoch, bi, nbatches), e, batch, step_opts, rng_before);
  } catch (const model::NonFiniteError& e) {
    stop_on_nonfinite(failed_step(r, epoch, bi, nbatches), e, batch, step_opts);
  }
  return sr;
}

// The training side of one epoch, summed over its steps.
struct EpochTotals {
  double loss_sum = 0, grad_norm_sum = 0, grad_norm_max = 0;
  int64_t frames = 0, utts = 0, padded = 0;
  size_t batches = 0;
  double grad_norm_mean() const { return grad_norm_sum / std::max<size_t>(1, batches); }
};

// One epoch: its batches (seeded shuffle), prepared on a background thread,
// one step each; loss, throughput and time per part into rec.
EpochTotals one_epoch(TrainingRun& r, const TrainData& data, int epoch, Clock::time_point epoch_t0, EpochRecord& rec) {
  const auto batches = make_epoch_batches(r.lengths, r.cfg, r.rng, r.by_transcript);  // the global batches: the same on every rank
  std::vector<BatchShare> shares;
  for (const std::vector<int>& b : batches) shares.push_back(share_of_batch(b, r.lengths, r.fixed_length, *r.world));
  EpochTotals tot;
  tot.batches = batches.size();
  Progress progress("epoch " + std::to_string(epoch) + "/" + std::to_string(r.cfg.train_epochs),
                    static_cast<int64_t>(batches.size()), "batch");
  double train_seconds = 0;
  BatchPrefetcher prefetch(
      [&](size_t bi) {
        std::vector<const data::Utterance*> chunk;
        for (int i : shares[bi].utts) chunk.push_back(&data.train.utterances[i]);
        // an empty share (fewer utterances than ranks): an empty batch, which adds zeros to the step
        const bool by_transcript = !batches[bi].empty() && r.by_transcript[static_cast<size_t>(batches[bi][0])];
        model::Batch batch = chunk.empty() ? model::Batch{}
                                           : model::make_batch(chunk, r.cmvn, r.ls, r.fixed_length,
                                                               by_transcript ? model::BatchSupervision::transcript
                                                                             : model::BatchSupervision::segments);
        mask_batch(batch, shares[bi].utts, r.cfg, epoch, r.state.dims.gaussian);  // augment.*_masks (off: nothing)
        mark_share(batch, shares[bi], *r.world);
        return batch;
      },
      batches.size());
  for (size_t bi = 0; bi < batches.size(); ++bi) {
    if (const int code = agreed_stop(*r.world)) {  // one process: stop_requested()
      progress.finish();
      stop_interrupted(r, epoch, bi, code);
    }
    r.stamp("a training step");
    const auto t_data = Clock::now();
    const model::Batch batch = prefetch.next();  // waits only when the prefetch thread is behind
    rec.times.data += since(t_data);
    model::StepOptions step_opts;
    const model::StepResult sr = one_step(r, batch, epoch, bi, batches.size(), step_opts, shares[bi]);
    rec.times.optimizer += sr.times.optimizer;
    rec.times.encoder_forward += sr.times.encoder_forward;
    rec.times.encoder_backward += sr.times.encoder_backward;
    rec.times.crf += sr.times.crf;
    train_seconds = since(epoch_t0);
    tot.loss_sum += sr.loss;
    if (r.cfg.debug_step_log) r.steps_text += step_line(step_opts.step, sr);
    tot.grad_norm_sum += sr.grad_norm;
    tot.grad_norm_max = std::max(tot.grad_norm_max, sr.grad_norm);
    tot.frames += shares[bi].global_frames;  // the global batch's (every rank counts the same)
    tot.padded += static_cast<int64_t>(shares[bi].global_B) * shares[bi].global_T;
    tot.utts += shares[bi].global_B;
    rec.lr = step_opts.lr;
    {
      std::ostringstream pf;
      pf.precision(4);
      pf << "loss " << tot.loss_sum / (bi + 1) << "  "
         << static_cast<int64_t>(tot.frames / std::max(1e-9, train_seconds)) << " frames/s";
      progress.set_postfix(pf.str());
    }
    progress.advance();
    if ((bi + 1) % static_cast<size_t>(r.cfg.train_log_every) == 0)
      spdlog::debug("epoch {} batch {}/{}: loss {:.5f} (penalty {:.5f}), lr {:.3g}, T {}", epoch, bi + 1,
                    batches.size(), sr.loss, sr.penalty, step_opts.lr, batch.input.T);
  }
  progress.finish();
  rec.train_loss = tot.loss_sum / std::max<size_t>(1, batches.size());
  rec.frames_per_sec = tot.frames / std::max(1e-9, train_seconds);
  rec.utterances_per_sec = tot.utts / std::max(1e-9, train_seconds);
  r.exec->get_state(r.state.params, r.state.optimizer);
  check_state_agrees(r.state.params, r.state.optimizer.m, r.state.optimizer.v,
                     "after epoch " + std::to_string(epoch));
  return tot;
}

// Dev evaluation (eval/evaluate.h): PER and the other metrics, and the dev
// loss from the decoding forward (log Z - gold score, no dropout, no
// penalty) normalized as the training loss (crf.loss_normalization). With
// end, the dev segments are kept for after_epoch. NaN without a dev split.
eval::Metrics dev_evaluation(TrainingRun& r, EpochRecord& rec, EpochEnd* end) {
  r.stamp("the dev evaluation");
  const auto t_dev = Clock::now();
  eval::Metrics dev(r.ls.scoring_names);
  eval::UtteranceHook keep_segments;
  if (end)
    keep_segments = [end](const data::Utterance& u, const model::Batch&, int, const std::vector<float>*,
                          const std::vector<crf::Segment>& segs) { end->dev.emplace_back(&u, segs); };
  if (!r.dev_utts.empty()) {
    double nll_sum = 0;
    if (r.world->size() > 1)  // chunk j on rank j mod N, merged: the one-process metrics (train/distributed.h)
      evaluate_across_ranks(*r.exec, r.dev_utts, r.cmvn, r.ls, r.cfg.train_batch_size, dev, &nll_sum,
                            end ? &end->dev : nullptr, *r.world);
    else
      eval::evaluate_utterances(*r.exec, r.dev_utts, r.cmvn, r.ls, r.cfg.train_batch_size, dev, keep_segments, false,
                          &nll_sum);
    rec.dev_per = dev.per();
    int64_t dev_frames = 0, dev_timed = 0;  // the dev loss is the NLL of the utterances with times
    for (const data::Utterance* u : r.dev_utts)
      if (u->has_times()) {
        dev_frames += u->num_frames;
        ++dev_timed;
      }
    rec.dev_loss = dev_timed == 0 ? std::numeric_limits<double>::quiet_NaN()
                                  : nll_sum / model::loss_normalization(
                                                  r.cfg.crf_loss_normalization == config::LossNormalization::frame,
                                                  dev_timed, std::max<int64_t>(1, dev_frames));
  } else {
    rec.dev_per = std::numeric_limits<double>::quiet_NaN();
    rec.dev_loss = std::numeric_limits<double>::quiet_NaN();
  }
  rec.times.dev_eval = since(t_dev);
  return dev;
}

// Drift check: the CRF parameters' maxima into rec, a warning above
// debug.drift_threshold; returns whether it fired.
bool drift_check(const TrainingRun& r, int epoch, EpochRecord& rec, const EpochTotals& tot) {
  const auto [mt, md] = model::crf_param_maxima(*r.layout, r.state.params);
  rec.max_abs_transition = mt;
  rec.max_abs_duration_bias = md;
  spdlog::debug("epoch {}: max|transition| = {:.4f}, max|duration_bias| = {:.4f}, gradient norm mean {:.4f} max {:.4f}",
                epoch, mt, md, tot.grad_norm_mean(), tot.grad_norm_max);
  // the same numbers as metrics.jsonl's max_abs_transition, max_abs_duration_bias, grad_norm_mean, grad_norm_max
  const bool drift = mt > r.cfg.debug_drift_threshold || md > r.cfg.debug_drift_threshold;
  if (drift)
    spdlog::warn(
        "epoch {}: CRF parameters drifting high: max|transition| = {:.3f}, max|duration_bias| = {:.3f} "
        "(debug.drift_threshold = {}), gradient norm mean {:.3f} max {:.3f}; consider raising --crf-reg (now {})",
        epoch, mt, md, r.cfg.debug_drift_threshold, tot.grad_norm_mean(), tot.grad_norm_max, r.cfg.crf_reg);
  return drift;
}

// The epoch's metrics.jsonl line (a metric of a missing split is left out, never NaN or null).
nlohmann::json metrics_line(const TrainingRun& r, const EpochRecord& rec, const EpochTotals& tot, const eval::Metrics& dev,
                            bool drift, bool best, const std::string& wall_start) {
  nlohmann::json line = {{"epoch", rec.epoch},
                         {"train_loss", rec.train_loss},
                         {"frames_per_sec", rec.frames_per_sec},
                         {"utterances_per_sec", rec.utterances_per_sec},
                         {"epoch_seconds", rec.epoch_seconds},
                         {"lr", rec.lr},
                         {"max_abs_transition", rec.max_abs_transition},
                         {"max_abs_duration_bias", rec.max_abs_duration_bias},
                         {"grad_norm_mean", tot.grad_norm_mean()},
                         {"grad_norm_max", tot.grad_norm_max},
                         {"drift_warning", drift},
                         {"train_frames", tot.frames},
                         {"padding_fraction", tot.padded ? 1.0 - double(tot.frames) / double(tot.padded) : 0.0},
                         {"optimizer_step", r.state.optimizer.step},
                         {"device", model::device_name(r.device)},
                         {"best", best},
                         {"seconds", rec.times.to_json()},
                         {"wall_clock", {{"start", wall_start}, {"end", iso8601_now()}}}};
  if (r.world->size() > 1) {  // several processes: their number, and rank 0's wait in the collectives
    line["world_size"] = r.world->size();
    line["seconds"]["collectives"] = r.world->take_wait_seconds();
  }
  if (!r.dev_utts.empty()) {
    line["dev_per"] = rec.dev_per;
    line["dev_loss"] = rec.dev_loss;
    const bool timed = dev.sequence_only() < dev.utterances();  // frames and boundaries need times
    line["dev_frame_accuracy"] = timed ? nlohmann::json(dev.frame_accuracy()) : nlohmann::json(nullptr);
    line["dev_boundary_f1_tol2"] = timed ? nlohmann::json(dev.boundary(2).f1()) : nlohmann::json(nullptr);
    if (dev.sequence_only() > 0) line["dev_utterances_without_times"] = dev.sequence_only();
  }
  if (r.exec->device() != model::Device::cpu)  // parts are not timed on the GPU (that would serialize the step)
    for (const char* part : {"encoder_forward", "encoder_backward", "crf", "optimizer"}) line["seconds"].erase(part);
  return line;
}

// Checkpoint: metrics.jsonl first, then best, then the epoch's checkpoint: an
// interruption before the last write leaves a line (and a best) for an
// epoch without a checkpoint, which --resume drops (it keeps lines with
// epoch <= the checkpoint's) and redoes identically, never a missing line
// or a best.safetensors older than the checkpoints say. Then the log line.
void checkpoint(TrainingRun& r, const EpochRecord& rec, const nlohmann::json& line, bool best) {
  r.metrics_text += line.dump() + "\n";
  write_file_atomic(r.metrics_path, r.metrics_text);
  if (r.cfg.debug_step_log) write_file_atomic((r.run_dir / "steps.jsonl").string(), r.steps_text);
  const std::string ckpt = (r.ckpt_dir / ("epoch-" + std::to_string(rec.epoch) + ".safetensors")).string();
  // best first (the model for evaluate/decode/export, without optimizer state;
  // --resume uses the last epoch-N): a kill between the two files then redoes
  // this epoch on resume and rewrites best identically
  if (best) model::save_checkpoint((r.ckpt_dir / "best.safetensors").string(), r.state, /*with_optimizer=*/false);
  model::save_checkpoint(ckpt, r.state);
  prune_checkpoints(r.ckpt_dir, rec.epoch, r.cfg.train_keep_checkpoints);
  const std::string dev_text = "dev loss " + format_metric(rec.dev_loss, "%.4f") + ", dev PER " +
                               format_metric(rec.dev_per, "%.2f%%", 100);
  if (r.exec->device() == model::Device::cpu)
    spdlog::info("epoch {}: train loss {:.4f}, {}{}, {:.0f} frames/s, {:.1f} s (data {:.2f}, encoder "
                 "fwd {:.2f} bwd {:.2f}, crf {:.2f}, optimizer {:.2f}, dev {:.2f})",
                 rec.epoch, rec.train_loss, dev_text, best ? " (best)" : "", rec.frames_per_sec,
                 rec.epoch_seconds, rec.times.data, rec.times.encoder_forward, rec.times.encoder_backward,
                 rec.times.crf, rec.times.optimizer, rec.times.dev_eval);
  else
    spdlog::info("epoch {}: train loss {:.4f}, {}{}, {:.0f} frames/s, {:.1f} s (data wait {:.2f}, "
                 "dev {:.2f}; per-part GPU timings: timitseg bench train)",
                 rec.epoch, rec.train_loss, dev_text, best ? " (best)" : "", rec.frames_per_sec,
                 rec.epoch_seconds, rec.times.data, rec.times.dev_eval);
}

void run_epochs(TrainingRun& r, const TrainData& data, const AfterEpoch& after_epoch, TrainResult& result);

}  // namespace

// The driver: set up the run, then the epochs (run_epochs below); a stop
// caused by another rank is recorded in train.log.
TrainResult train(const config::Config& cfg_in, const TrainData& data, bool resume, const AfterEpoch& after_epoch) {
  TrainingRun r;
  set_up_run(r, cfg_in, data, resume);
  TrainResult result;
  result.run_dir = r.cfg.train_run_dir;
  try {
    run_epochs(r, data, after_epoch, result);
  } catch (const dist::PeerFailure& e) {  // another rank stopped the run: rank 0 records why in train.log
    r.log_error(e.what());
    throw;
  }
  return result;
}

namespace {

// The epochs of train(): per epoch one epoch of steps, the dev evaluation, the
// drift check, the state after the epoch, the checkpoint.
void run_epochs(TrainingRun& r, const TrainData& data, const AfterEpoch& after_epoch, TrainResult& result) {
  for (int epoch = r.state.epoch + 1; epoch <= r.cfg.train_epochs; ++epoch) {
    const auto epoch_t0 = Clock::now();
    const std::string wall_start = iso8601_now();
    EpochRecord rec;
    rec.epoch = epoch;
    if (r.state.dims.gaussian) {  // crf.gaussian_head: the head from the current labels and alignments
      r.stamp("the Gaussian head's re-estimation");
      spdlog::info("epoch {}: {}", epoch, reestimate_gaussian_head(r, data).describe());
    }
    const EpochTotals tot = one_epoch(r, data, epoch, epoch_t0, rec);
    EpochEnd end;  // for after_epoch: the dev segments of this epoch
    const eval::Metrics dev = dev_evaluation(r, rec, after_epoch ? &end : nullptr);
    const bool drift = drift_check(r, epoch, rec, tot);
    r.state.epoch = epoch;
    r.state.dev_per = rec.dev_per;
    const bool best = !r.dev_utts.empty() && rec.dev_per < r.state.best_dev_per;
    if (best) {
      r.state.best_dev_per = rec.dev_per;
      r.state.best_epoch = epoch;
    }
    r.state.rng_state = rng_to_string(r.rng);
    rec.epoch_seconds = since(epoch_t0);
    r.stamp("the checkpoint");
    dist::agree("the checkpoint", [&] {  // rank 0 alone writes the run folder
      if (r.rank0()) checkpoint(r, rec, metrics_line(r, rec, tot, dev, drift, best, wall_start), best);
    });
    result.epochs.push_back(rec);
    if (after_epoch && r.rank0()) {
      end.run_dir = r.cfg.train_run_dir;
      end.epoch = epoch;
      end.best = best;
      end.labels = &r.ls;
      after_epoch(end);
    }
  }
}

}  // namespace

}  // namespace timitseg::train
