// set_up_run (train/training_run.h): the first named step of train(), split
// from train/train.cpp's loop: the state described, fresh or resumed, and the
// schedule planned, before the first epoch.
#include "train/training_run.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "common/atomic_file.h"
#include "common/version.h"
#include "crf/duration.h"
#include "model/feature_check.h"
#include "model/make_executor.h"
#include "options/options.h"
#include "train/batches.h"
#include "train/duration_start.h"
#include "train/distributed.h"
#include "train/train.h"  // latest_checkpoint

namespace fs = std::filesystem;

namespace timitseg::train::detail {
namespace {

void rng_from_string(std::mt19937_64& rng, const std::string& s, const std::string& origin) {
  std::istringstream is(s);
  is >> rng;
  if (!is) throw std::runtime_error(origin + ": corrupt rng_state metadata");
}

// The model's state before the first epoch: dimensions, labels, features and CMVN from the data.
void describe_state(const TrainingRun& r, const TrainData& data, model::ModelState& state) {
  state.dims = options::model_dims(r.cfg, data.train.utterances[0].dim, r.ls.size(),  // options/options.h
                                   any_trains_on_transcript(r.cfg, data.train));
  state.labels = r.ls;
  state.transcript_trained = any_trains_on_transcript(r.cfg, data.train);  // silence edges by default (eval/silence_edges.h)
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
      s.dims.end != state.dims.end || s.dims.gaussian != state.dims.gaussian ||
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
  if (r.cfg.crf_duration_init == config::DurationInit::data) {
    // the train split's durations: gold segments, the flat start of the transcripts (train/duration_start.h)
    const int K = state.dims.max_duration;
    const DurationStart start = duration_start(r.cfg, data.train.utterances, r.ls, K);
    if (start.segments() == 0) {  // e.g. a transcripts-only corpus with crf.flat_start: false
      spdlog::info("crf.duration_init = data: nothing to count in {}: crf.duration_bias keeps the crf.init_scale draw",
                   start.describe(K));
    } else if (state.dims.duration_lognormal) {  // crf.duration_model = lognormal: each label's log-normal fitted to them
      const std::vector<float> fit = crf::fit_lognormal_durations(start.classes, K, state.dims.num_classes);
      std::copy(fit.begin(), fit.end(), state.params.begin() + r.layout->crf().duration_lognormal.offset);
      spdlog::info("crf.duration_init = data: crf.duration_lognormal starts at each label's log-normal fit (mean "
                   "and spread of log duration) to {}",
                   start.describe(K));
    } else if (K == 1) {  // one duration: log p(1 | label) = 0, nothing added
      spdlog::info("crf.duration_init = data: no effect on the linear CRF (K = 1: every segment is one frame)");
    } else {  // the durations' distribution, added to the draw above
      const model::DurationPrior prior = model::duration_log_prior(start.classes, K, state.dims.num_classes);
      const model::CrfTensor& db = r.layout->crf().duration_bias;
      float* table = db.in(state.params);
      for (size_t i = 0; i < db.size; ++i) table[i] += static_cast<float>(prior.log_p[i]);
      spdlog::info("crf.duration_init = data: crf.duration_bias starts at log p(duration | label) of {}",
                   start.describe(K));
    }
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
  r.by_transcript.resize(N);
  for (int64_t i = 0; i < N; ++i) {
    r.lengths[i] = data.train.utterances[i].num_frames;
    r.by_transcript[i] = trains_on_transcript(cfg, data.train.utterances[i]) ? 1 : 0;
  }
  r.batches_per_epoch = static_cast<int64_t>(epoch_batch_count(static_cast<size_t>(N), cfg, r.by_transcript));
  if (const int64_t nt = std::count(r.by_transcript.begin(), r.by_transcript.end(), 1); nt > 0)
    spdlog::info("crf.supervision = {}: {} of {} train utterances train on their phone sequence (the transcript "
                 "NLL), {} on their phone times",
                 config::to_string(cfg.crf_supervision), nt, N, N - nt);
  int64_t graphs = 0;  // transcripts with several pronunciations of a word (docs/training.md)
  for (int64_t i = 0; i < N; ++i) graphs += r.by_transcript[i] && !data.train.utterances[i].transcript_slot.empty();
  if (graphs > 0)
    spdlog::info("{} of them offer several pronunciations of a word: the loss sums over every path of their phone "
                 "graph", graphs);
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
  size_t dev_untimed = 0;
  for (const auto& u : data.dev.utterances) {
    if (!u.has_times() && r.world->size() > 1) {  // several processes: the dev PER of times only
      ++dev_untimed;
      continue;
    }
    r.dev_utts.push_back(&u);
  }
  if (dev_untimed > 0)
    spdlog::warn("{} dev utterances without phone times are left out of the dev evaluation on several processes "
                 "(one process scores their PER against the transcript)",
                 dev_untimed);
  r.inject_exit = cfg.inject_exit();
  const std::string ranks = r.world->size() > 1 ? " on " + std::to_string(r.world->size()) + " ranks (" +
                                                      common::to_string(r.world->launch().launcher) + ", " + r.world->library() + ")"
                                                : std::string();
  spdlog::info("training on {}{}: {} train / {} dev utterances, {} parameters, {} classes, K={}{}",
               r.exec->description(), ranks, N, r.dev_utts.size(), r.layout->total(), r.ls.size(), cfg.crf_max_duration,
               r.fixed_length > 0 ? ", fixed length " + std::to_string(r.fixed_length) : std::string());
}

}  // namespace

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
  r.choice = options::resolve_choices(cfg, /*log=*/false);  // `auto` resolved (options/device_choice.h)
  r.device = r.choice.device;
  r.ls = model::training_label_set(cfg, data.phone_set, cfg.data_workdir);  // model/labels.h
  spdlog::info("phone set {}: {} classes, scored on {} labels (sha256 {})", r.ls.spec.name, r.ls.size(),
               r.ls.scoring_names.size(), r.ls.spec.digest().substr(0, 12));
  r.world = &dist::world();
  // one writer per run folder: rank 0 takes its lock, then the fresh-run check (train/run_folder.h)
  dist::agree("the run folder's lock", [&] { lock_run_folder(r.lock, cfg, resume, r.rank0()); });
  r.world->set_timeout(cfg.train_dist_timeout);
  if (r.world->size() > 1) r.watchdog = std::make_unique<dist::Watchdog>(2 * cfg.train_dist_timeout);
  set_up_ranks(r.cfg, data, r.device, *r.world);
  r.threads = model::set_threads(threads_of_rank(cfg.train_threads, r.world->launch()));
  describe_state(r, data, r.state);
  model::ExecutorOptions executor_opts = options::executor_options(cfg, r.choice, r.threads);  // options/options.h
  if (fault_on_this_rank(cfg, *r.world))
    r.fault = cfg.inject_fault();
  executor_opts.world = r.world;
  r.exec = model::make_executor(r.device, r.state.dims, executor_opts);
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
    if (cfg.crf_gaussian_head == config::OnsetFeatures::automatic && r.state.dims.gaussian)
      spdlog::info("crf.gaussian_head = auto: on (train utterances train on their transcript), crf.gaussian_weight {}",
                   cfg.crf_gaussian_weight);
    else if (cfg.crf_gaussian_head == config::OnsetFeatures::automatic)
      spdlog::info("crf.gaussian_head = auto: off (every train utterance trains on its times)");
    nlohmann::json entry = run_entry(cfg, r.choice, *r.exec, r.threads, resume);
    entry["crf_gaussian_head"] = r.state.dims.gaussian;  // resolved (auto: on when transcripts train)
    write_run_json(r.run_dir, entry, resume);
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
  options::set_optimizer_settings(cfg, r.state.optimizer);
  r.state.config = cfg;
  r.exec->set_state(r.state.params, r.state.optimizer);
  dist::agree("the run folder's set-up", [&] {
    if (!r.rank0()) return;
    write_file_atomic((r.run_dir / "config.yaml").string(), cfg.to_yaml());
    write_file_atomic(r.metrics_path, r.metrics_text);
  });
  plan_schedule(r, data);
}

}  // namespace timitseg::train::detail
