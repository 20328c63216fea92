// Training loop: train() at the end of this file drives the named steps
// above it: set_up_run (config checks, executor, run folder, fresh or resumed
// state, schedule), one_epoch (batches of train/batches.h, one_step each:
// AdamW + cosine schedule + clipping on the executor, interrupts, the
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
#include "model/device_choice.h"
#include "model/drift.h"
#include "model/options.h"
#include "model/step_recipe.h"  // loss_normalization: the step's, once
#include "train/batches.h"
#include "train/distributed.h"
#include "train/interrupt.h"
#include "train/replay_step.h"
#include "train/run_folder.h"
#include "train/step_failure.h"

namespace fs = std::filesystem;

namespace timitseg::train {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void rng_from_string(std::mt19937_64& rng, const std::string& s, const std::string& origin) {
  std::istringstream is(s);
  is >> rng;
  if (!is) throw std::runtime_error(origin + ": corrupt rng_state metadata");
}

}  // namespace

nlohmann::json TimeBreakdown::to_json() const {
  return {{"data", data},           {"encoder_forward", encoder_forward}, {"encoder_backward", encoder_backward},
          {"crf", crf},             {"optimizer", optimizer},             {"dev_eval", dev_eval}};
}

namespace {

// What every step of a run reads: set up once by set_up_run, before the first epoch.
struct TrainingRun {
  config::Config cfg;                 // the caller's, with the doctest limits applied and validated
  model::DeviceChoice choice;        // train.device, crf.backend, train.rnn_algo with `auto` resolved (model/device_choice.h)
  model::Device device = model::Device::cpu;  // choice.device
  model::LabelSet ls;
  int threads = 0;
  config::FaultSpec fault;            // debug.inject_fault
  model::ModelState state;           // dims, labels, features, CMVN, parameters, optimizer, epoch, best so far
  std::unique_ptr<model::Executor> exec;
  std::optional<model::ParamLayout> layout;
  fs::path run_dir, ckpt_dir;
  std::optional<RunLock> lock;       // RUN_DIR/.timitseg.lock (rank 0), for the whole call
  std::optional<LogFile> log_file;  // RUN_DIR/train.log, for the whole call
  std::string metrics_path, metrics_text;
  std::string steps_text;  // debug.step_log: RUN_DIR/steps.jsonl so far
  std::mt19937_64 rng;
  int fixed_length = 0;
  int inject_epoch = -1, inject_batch = -1;  // debug.inject_nonfinite
  std::vector<int32_t> lengths;              // [N] frames of each training utterance
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

// The model's state before the first epoch: dimensions, labels, features and CMVN from the data.
void describe_state(const TrainingRun& r, const TrainData& data, model::ModelState& state) {
  state.dims = model::model_dims(r.cfg, data.train.utterances[0].dim, r.ls.size());  // model/options.h
  state.labels = r.ls;
  state.features = data.features;
  state.has_cmvn = data.has_cmvn;
  state.cmvn = data.cmvn;
}

// --resume: parameters, optimizer, epoch, best so far and rng from the latest
// epoch checkpoint; metrics.jsonl's lines up to its epoch.
void resume_state(TrainingRun& r) {
  model::ModelState& state = r.state;
  const std::string path = latest_checkpoint(r.cfg.train_run_dir);
  if (path.empty()) throw std::runtime_error(r.cfg.train_run_dir + ": no checkpoints/epoch-N.safetensors to resume from");
  model::ModelState s = model::load_checkpoint(path);
  if (s.dims.input_dim != state.dims.input_dim || s.dims.hidden_dim != state.dims.hidden_dim ||
      s.dims.num_layers != state.dims.num_layers || s.dims.num_classes != state.dims.num_classes ||
      s.dims.max_duration != state.dims.max_duration || s.dims.onset != state.dims.onset ||
      s.dims.duration_lognormal != state.dims.duration_lognormal)
    throw std::runtime_error(path + ": model dimensions differ from the configuration; cannot resume");
  model::check_feature_options(s, path, state.features, r.cfg.data_workdir + "/manifest.json");
  if (s.optimizer.m.empty()) throw std::runtime_error(path + ": checkpoint has no optimizer state; cannot resume");
  if (s.labels.spec.digest() != state.labels.spec.digest())  // data.phone_set's file edited since, say
    throw std::runtime_error(path + ": trained on phone set '" + s.labels.spec.name + "' (sha256 " +
                             s.labels.spec.digest().substr(0, 12) + "), the configuration now gives '" +
                             state.labels.spec.name + "' (sha256 " + state.labels.spec.digest().substr(0, 12) +
                             "); cannot resume");
  state.params = std::move(s.params);
  state.optimizer = std::move(s.optimizer);
  state.epoch = s.epoch;
  state.best_dev_per = s.best_dev_per;
  state.best_epoch = s.best_epoch;
  rng_from_string(r.rng, s.rng_state, path);
  r.metrics_text = metrics_upto(r.metrics_path, state.epoch);
  if (r.cfg.debug_step_log) r.steps_text = steps_upto((r.run_dir / "steps.jsonl").string(), state.optimizer.step);
  spdlog::info("resuming {} after epoch {} (optimizer step {})", path, state.epoch, state.optimizer.step);
  if (state.epoch >= r.cfg.train_epochs)
    spdlog::warn("run already has {} epochs (train.epochs = {}); nothing to do", state.epoch, r.cfg.train_epochs);
}

// A fresh run: parameters drawn from the run's rng (crf.duration_init = data
// adds the train split's duration distribution), a zero optimizer.
void fresh_state(TrainingRun& r, const TrainData& data) {
  model::ModelState& state = r.state;
  model::init_params(*r.layout, r.rng, state.params, r.cfg.crf_init_scale);
  if (r.cfg.crf_duration_init == config::DurationInit::data && state.dims.duration_lognormal) {
    // crf.duration_init = data, crf.duration_model = lognormal: each label's log-normal fitted to its gold pieces
    std::vector<std::vector<int32_t>> classes(data.train.utterances.size());
    for (size_t u = 0; u < classes.size(); ++u)
      for (int32_t l : data.train.utterances[u].labels) classes[u].push_back(r.ls.from61(l));
    const std::vector<float> fit = crf::fit_lognormal_durations(classes, state.dims.max_duration, state.dims.num_classes);
    std::copy(fit.begin(), fit.end(), state.params.begin() + r.layout->get("crf.duration_lognormal").offset);
    spdlog::info("crf.duration_init = data: crf.duration_lognormal starts at each label's log-normal fit (mean "
                 "and spread of log duration) to the gold segments of the train split (K = {})",
                 state.dims.max_duration);
  } else if (r.cfg.crf_duration_init == config::DurationInit::data) {
    // crf.duration_init = data: the train split's duration distribution, added to the draw above
    std::vector<std::vector<int32_t>> classes(data.train.utterances.size());
    for (size_t u = 0; u < classes.size(); ++u)
      for (int32_t l : data.train.utterances[u].labels) classes[u].push_back(r.ls.from61(l));
    const model::DurationPrior prior = model::duration_log_prior(classes, state.dims.max_duration, state.dims.num_classes);
    const model::ParamInfo& db = r.layout->get("crf.duration_bias");
    for (size_t i = 0; i < db.size; ++i) state.params[db.offset + i] += static_cast<float>(prior.log_p[i]);
    if (state.dims.max_duration == 1)  // one duration: log p(1 | label) = 0, nothing added
      spdlog::info("crf.duration_init = data: no effect on the linear CRF (K = 1: every segment is one frame)");
    else
      spdlog::info("crf.duration_init = data: crf.duration_bias starts at log p(duration | label) of the {} gold "
                   "segments of the train split (K = {})",
                   prior.segments, state.dims.max_duration);
  }
  model::derive_duration_table(*r.layout, state.params.data());  // crf.duration_model = lognormal: the table it implies
  state.optimizer.reset(r.layout->total());
}

// The schedule of the run (batches per epoch, steps) and the debug injections, with warnings for ones that never fire.
void plan_schedule(TrainingRun& r, const TrainData& data) {
  const config::Config& cfg = r.cfg;
  r.fixed_length = cfg.debug_fixed_length;
  if (!cfg.debug_inject_nonfinite.empty() && fault_on_this_rank(cfg, *r.world)) {
    const config::NonfiniteStep at = cfg.inject_nonfinite().value_or(config::NonfiniteStep{});  // validated
    r.inject_epoch = at.epoch;
    r.inject_batch = at.batch;
  }
  const int64_t N = static_cast<int64_t>(data.train.utterances.size());
  r.lengths.resize(N);
  for (int64_t i = 0; i < N; ++i) r.lengths[i] = data.train.utterances[i].num_frames;
  r.batches_per_epoch = (N + cfg.train_batch_size - 1) / cfg.train_batch_size;
  r.total_steps = r.batches_per_epoch * cfg.train_epochs;
  if (r.inject_epoch > 0 && (r.inject_epoch <= r.state.epoch || r.inject_epoch > cfg.train_epochs ||
                             r.inject_batch > r.batches_per_epoch))
    spdlog::warn("debug.inject_nonfinite = {}: no such step in this run (epochs {}..{}, {} batches per epoch); "
                 "nothing will be injected",
                 cfg.debug_inject_nonfinite, r.state.epoch + 1, cfg.train_epochs, r.batches_per_epoch);
  if (!r.fault.empty() && (r.fault.step <= r.state.optimizer.step || r.fault.step > r.total_steps))
    spdlog::warn("debug.inject_fault = {}: no such step in this run (steps {}..{}); nothing will be injected",
                 r.fault.to_string(), r.state.optimizer.step + 1, r.total_steps);
  if (!r.fault.empty() && !cfg.debug_check_numerics)
    spdlog::warn("debug.inject_fault without debug.check_numerics: the fault is planted, but only the older "
                 "checks (CRF input, loss, gradients) can stop the step");
  r.cmvn = data.has_cmvn ? &data.cmvn : nullptr;
  for (const auto& u : data.dev.utterances) r.dev_utts.push_back(&u);
  r.inject_exit = cfg.inject_exit();
  const std::string ranks = r.world->size() > 1 ? " on " + std::to_string(r.world->size()) + " ranks (" +
                                                      r.world->launch().launcher + ", " + r.world->library() + ")"
                                                : std::string();
  spdlog::info("training on {}{}: {} train / {} dev utterances, {} parameters, {} classes, K={}{}",
               r.exec->description(), ranks, N, r.dev_utts.size(), r.layout->total(), r.ls.size(), cfg.crf_max_duration,
               r.fixed_length > 0 ? ", fixed length " + std::to_string(r.fixed_length) : std::string());
}

// Set up the run: everything that can fail on the configuration before the
// first write, the executor, the run folder (train.log, run.json,
// config.yaml, metrics.jsonl), the state (fresh or resumed) on the executor.
void set_up_run(TrainingRun& r, const config::Config& cfg_in, const TrainData& data, bool resume) {
  r.cfg = cfg_in;
  config::Config& cfg = r.cfg;
  config::apply_doctest_limits(cfg);  // TIMITSEG_DOCTEST_MAX_EPOCHS (tests/docs), the one place it is read
  cfg.validate();
  if (cfg.train_run_dir.empty()) throw std::invalid_argument("config: train.run_dir is required");
  if (data.train.utterances.empty()) throw std::invalid_argument("training split is empty");
  r.choice = model::resolve_choices(cfg, /*log=*/false);  // `auto` resolved (model/device_choice.h)
  r.device = r.choice.device;
  r.ls = model::training_label_set(cfg, data.phone_set, cfg.data_workdir);  // model/labels.h
  spdlog::info("phone set {}: {} classes, scored on {} labels (sha256 {})", r.ls.spec.name, r.ls.size(),
               r.ls.names39.size(), r.ls.spec.digest().substr(0, 12));
  r.world = &dist::world();
  // one writer per run folder: rank 0 takes its lock, then the fresh-run check (train/run_folder.h)
  dist::agree("the run folder's lock", [&] { lock_run_folder(r.lock, cfg, resume, r.rank0()); });
  r.world->set_timeout(cfg.train_dist_timeout);
  if (r.world->size() > 1) r.watchdog = std::make_unique<dist::Watchdog>(2 * cfg.train_dist_timeout);
  set_up_ranks(r.cfg, data, r.device, *r.world);
  r.threads = model::set_threads(threads_of_rank(cfg.train_threads, r.world->launch()));
  describe_state(r, data, r.state);
  model::ExecutorOptions xo = model::executor_options(cfg, r.choice, r.threads);  // model/options.h
  if (fault_on_this_rank(cfg, *r.world))
    r.fault = cfg.inject_fault();
  xo.world = r.world;
  r.exec = model::make_executor(r.device, r.state.dims, xo);
  if (r.device == model::Device::cuda && r.choice.crf_backend != crf::BackendKind::cuda)
    spdlog::warn("crf.backend = {} on the GPU: the CRF runs on the host, with copies every step (the old "
                 "--no-triton); crf.backend=cuda keeps the whole step on the GPU",
                 crf::to_string(r.choice.crf_backend));

  r.run_dir = fs::path(cfg.train_run_dir);
  r.ckpt_dir = r.run_dir / "checkpoints";
  r.metrics_path = (r.run_dir / "metrics.jsonl").string();
  dist::agree("the run folder's set-up", [&] {
    if (!r.rank0()) return;  // rank 0 alone writes the run folder
    fs::create_directories(r.ckpt_dir);
    // temporaries of a run killed while writing (kill -9, power loss)
    remove_stale_temporaries(r.run_dir.string());
    remove_stale_temporaries(r.ckpt_dir.string());
    r.log_file.emplace((r.run_dir / "train.log").string());
    spdlog::info("timitseg {} (commit {}, {} build): {} {}", version(), git_commit(), build_type(),
                 resume ? "resuming" : "training", cfg.train_run_dir);
    for (const std::string& pick : r.choice.picks) spdlog::info("{}", pick);  // one line per `auto`, in train.log too
    write_run_json(r.run_dir, run_entry(cfg, r.choice, *r.exec, r.threads, resume), resume);
  });
  r.rng.seed(cfg.train_seed);
  r.layout.emplace(r.state.dims);
  dist::agree("the state before the first epoch", [&] {
    if (resume)
      resume_state(r);
    else
      fresh_state(r, data);
  });
  check_state_agrees(r.state.params, r.state.optimizer.m, r.state.optimizer.v, "before the first epoch");
  model::set_optimizer_settings(cfg, r.state.optimizer);
  r.state.config = cfg;
  r.exec->set_state(r.state.params, r.state.optimizer);
  dist::agree("the run folder's set-up", [&] {
    if (!r.rank0()) return;
    write_file_atomic((r.run_dir / "config.yaml").string(), cfg.to_yaml());
    write_file_atomic(r.metrics_path, r.metrics_text);
  });
  plan_schedule(r, data);
}

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
model::StepResult one_step(TrainingRun& r, const model::Batch& batch, int epoch, size_t bi, size_t nbatches, model::StepOptions& so,
                    const BatchShare& share) {
  const config::Config& cfg = r.cfg;
  so = model::step_options(cfg);  // model/options.h
  so.lr = model::scheduled_lr(cfg.train_lr_schedule, cfg.train_lr, cfg.train_min_lr, r.state.optimizer.step, r.total_steps,
                       r.batches_per_epoch);
  so.time_parts = r.exec->device() == model::Device::cpu;  // free on the CPU; on the GPU it would serialize the step
  so.rng = &r.rng;
  so.step = r.state.optimizer.step + 1;
  so.fault = r.fault;
  if (r.world->size() > 1)  // every rank divides by the global batch's norm (model/dist_step.h)
    so.loss_norm = model::loss_normalization(so.frame_normalization, share.global_B, share.global_frames);
  inject_exit(r.inject_exit, *r.world, so.step);
  const std::mt19937_64 rng_before = r.rng;  // for the dump of a failed step (2.5 KB copy)
  const bool inject = epoch == r.inject_epoch && static_cast<int>(bi) + 1 == r.inject_batch;
  if (inject)  // debug.inject_nonfinite: poison one transition entry for this step
    so.poison.emplace_back(r.layout->get("crf.transition").offset, std::numeric_limits<float>::quiet_NaN());
  model::StepResult sr;
  try {
    sr = r.exec->train_step(batch, so);
    ++r.state.optimizer.step;
  } catch (const model::NumericsError& e) {
    stop_on_numerics(failed_step(r, epoch, bi, nbatches), e, batch, so, rng_before);
  } catch (const model::NonFiniteError& e) {
    stop_on_nonfinite(failed_step(r, epoch, bi, nbatches), e, batch, so);
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
  const auto batches = make_epoch_batches(r.lengths, r.cfg, r.rng);  // the global batches: the same on every rank
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
        model::Batch batch = chunk.empty() ? model::Batch{} : model::make_batch(chunk, r.cmvn, r.ls, r.fixed_length);
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
    model::StepOptions so;
    const model::StepResult sr = one_step(r, batch, epoch, bi, batches.size(), so, shares[bi]);
    rec.times.optimizer += sr.times.optimizer;
    rec.times.encoder_forward += sr.times.encoder_forward;
    rec.times.encoder_backward += sr.times.encoder_backward;
    rec.times.crf += sr.times.crf;
    train_seconds = since(epoch_t0);
    tot.loss_sum += sr.loss;
    if (r.cfg.debug_step_log) r.steps_text += step_line(so.step, sr);
    tot.grad_norm_sum += sr.grad_norm;
    tot.grad_norm_max = std::max(tot.grad_norm_max, sr.grad_norm);
    tot.frames += shares[bi].global_frames;  // the global batch's (every rank counts the same)
    tot.padded += static_cast<int64_t>(shares[bi].global_B) * shares[bi].global_T;
    tot.utts += shares[bi].global_B;
    rec.lr = so.lr;
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
                    batches.size(), sr.loss, sr.penalty, so.lr, batch.input.T);
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
  eval::Metrics dev(r.ls.names39);
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
    int64_t dev_frames = 0;
    for (const data::Utterance* u : r.dev_utts) dev_frames += u->num_frames;
    rec.dev_loss = nll_sum / model::loss_normalization(r.cfg.crf_loss_normalization == config::LossNormalization::frame,
                                                       static_cast<int64_t>(r.dev_utts.size()),
                                                       std::max<int64_t>(1, dev_frames));
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
    line["dev_frame_accuracy"] = dev.frame_accuracy();
    line["dev_boundary_f1_tol2"] = dev.boundary(2).f1();
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
