// Training loop: batching (seeded shuffle, length bucketing, --fixed-length),
// AdamW + cosine schedule + clipping, dev PER, metrics.jsonl, drift warning,
// checkpoints and --resume, non-finite stop with a crf-replay file.
#include "model/train.h"

#include <spdlog/spdlog.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "common/atomic_file.h"
#include "common/progress.h"
#include "common/version.h"
#include "model/cpu/network.h"
#include "model/duration_model.h"
#include "model/interrupt.h"
#include "model/replay_step.h"
#include "model/device_choice.h"
#include "model/run_folder.h"

namespace fs = std::filesystem;

namespace timitseg::model {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string rng_to_string(const std::mt19937_64& rng) {
  std::ostringstream os;
  os << rng;
  return os.str();
}
void rng_from_string(std::mt19937_64& rng, const std::string& s, const std::string& origin) {
  std::istringstream is(s);
  is >> rng;
  if (!is) throw std::runtime_error(origin + ": corrupt rng_state metadata");
}

// Fisher-Yates with the run's engine (portable: no std distributions).
void shuffle(std::vector<int>& v, std::mt19937_64& rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng() % i]);
}

}  // namespace

std::vector<std::vector<int>> make_epoch_batches(const std::vector<int32_t>& lengths, const Config& cfg,
                                                 std::mt19937_64& rng) {
  std::vector<int> order(lengths.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  shuffle(order, rng);
  const size_t bs = static_cast<size_t>(cfg.train_batch_size);
  if (cfg.train_bucketing) {
    const size_t pool = bs * static_cast<size_t>(cfg.train_bucket_batches);
    for (size_t p = 0; p < order.size(); p += pool) {
      auto b = order.begin() + p, e = order.begin() + std::min(order.size(), p + pool);
      std::stable_sort(b, e, [&](int x, int y) { return lengths[x] < lengths[y]; });
    }
  }
  std::vector<std::vector<int>> batches;
  for (size_t p = 0; p < order.size(); p += bs)
    batches.emplace_back(order.begin() + p, order.begin() + std::min(order.size(), p + bs));
  if (cfg.train_bucketing) {
    std::vector<int> bo(batches.size());
    for (size_t i = 0; i < bo.size(); ++i) bo[i] = static_cast<int>(i);
    shuffle(bo, rng);
    std::vector<std::vector<int>> shuffled;
    for (int i : bo) shuffled.push_back(std::move(batches[i]));
    batches = std::move(shuffled);
  }
  return batches;
}

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// metrics.jsonl lines with epoch <= keep_upto (used on --resume).
std::string metrics_upto(const std::string& path, int keep_upto) {
  std::istringstream in(read_file(path));
  std::string line, out;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      if (nlohmann::json::parse(line).at("epoch").get<int>() <= keep_upto) out += line + "\n";
    } catch (const nlohmann::json::exception&) {
      throw std::runtime_error(path + ": a line is not a metrics JSON object: " + line.substr(0, 80));
    }
  }
  return out;
}

}  // namespace

nlohmann::json TimeBreakdown::to_json() const {
  return {{"data", data},           {"encoder_forward", encoder_forward}, {"encoder_backward", encoder_backward},
          {"crf", crf},             {"optimizer", optimizer},             {"dev_eval", dev_eval}};
}

int set_threads(int threads) {
  int n = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // The CPU encoder's own tasks (model/cpu/network.h); Eigen stays single-threaded.
  // Under a lock: `compare --jobs N` trains on several threads at once, and
  // Eigen's thread setting is a plain static.
  static std::mutex mu;
  std::lock_guard<std::mutex> lk(mu);
  set_default_threads(n);
  Eigen::setNbThreads(1);
  return n;
}

std::string latest_checkpoint(const std::string& run_dir) {
  const fs::path dir = fs::path(run_dir) / "checkpoints";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return "";
  const std::regex re("epoch-([0-9]+)\\.safetensors");
  int best = -1;
  std::string path;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (std::regex_match(name, m, re) && std::stoi(m[1]) > best) {
      best = std::stoi(m[1]);
      path = e.path().string();
    }
  }
  return path;
}

TrainData load_train_data(const Config& cfg) {
  if (cfg.data_workdir.empty()) throw std::invalid_argument("config: data.workdir is required (a prepared WORKDIR)");
  TrainData d;
  d.train = data::load_split(cfg.data_workdir, "train");
  d.dev = data::load_split(cfg.data_workdir, "dev");
  d.features = data::load_feature_options(cfg.data_workdir);
  if (cfg.features_cmvn) {
    d.cmvn = data::load_cmvn(cfg.data_workdir);
    d.has_cmvn = true;
  }
  if (cfg.data_max_train_utterances > 0 && static_cast<int64_t>(d.train.utterances.size()) > cfg.data_max_train_utterances)
    d.train.utterances.resize(static_cast<size_t>(cfg.data_max_train_utterances));
  if (cfg.data_max_dev_utterances > 0 && static_cast<int64_t>(d.dev.utterances.size()) > cfg.data_max_dev_utterances)
    d.dev.utterances.resize(static_cast<size_t>(cfg.data_max_dev_utterances));
  return d;
}

void evaluate_utterances(Executor& exec, const std::vector<const data::Utterance*>& utts, const data::Cmvn* cmvn,
                         const LabelSet& ls, int batch_size, Metrics& metrics, const UtteranceHook& hook,
                         bool want_scores, double* nll_sum) {
  std::vector<const data::Utterance*> sorted = utts;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const data::Utterance* a, const data::Utterance* b) { return a->num_frames < b->num_frames; });
  std::vector<float> scores;
  std::vector<double> nll;
  if (nll_sum) *nll_sum = 0;
  for (size_t p = 0; p < sorted.size(); p += static_cast<size_t>(batch_size)) {
    std::vector<const data::Utterance*> chunk(sorted.begin() + p,
                                              sorted.begin() + std::min(sorted.size(), p + batch_size));
    const Batch batch = make_batch(chunk, cmvn, ls, 0);
    const auto segs = exec.decode(batch, want_scores ? &scores : nullptr, nll_sum ? &nll : nullptr);
    if (nll_sum)
      for (double x : nll) *nll_sum += x;
    for (size_t b = 0; b < chunk.size(); ++b) {
      const int L = batch.input.lengths[b];
      std::vector<int> ref(L), pred(L, -1);
      for (int t = 0; t < L; ++t) ref[t] = ls.to39[batch.labels[b * batch.input.T + t]];
      for (const crf::Segment& s : segs[b])
        for (int t = s.start; t < s.start + s.duration; ++t) pred.at(t) = ls.to39.at(s.label);
      for (int t = 0; t < L; ++t)
        if (pred[t] < 0)
          throw std::logic_error("Viterbi segments do not cover frame " + std::to_string(t) + " of " + chunk[b]->id);
      metrics.add(ref, pred);
      if (hook) hook(*chunk[b], batch, static_cast<int>(b), want_scores ? &scores : nullptr, segs[b]);
    }
  }
}

void check_fresh_run_dir(const std::string& run_dir) {
  const fs::path dir(run_dir);
  std::error_code ec;
  std::string found;
  // An empty metrics.jsonl (a run stopped in its first epoch, e.g. by a
  // non-finite loss) holds nothing to mix with: retrying the same command works.
  // Nor does a lone line for epoch 1 without checkpoints/epoch-1 (a run killed
  // between the two writes of its first epoch; --resume would drop the line).
  const std::string metrics = (dir / "metrics.jsonl").string();
  if (fs::exists(metrics, ec)) {
    std::istringstream in(read_file(metrics));
    std::string line;
    while (found.empty() && std::getline(in, line)) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      bool first_epoch = false;
      try {
        first_epoch = nlohmann::json::parse(line).at("epoch").get<int>() == 1;
      } catch (const nlohmann::json::exception&) {
      }
      if (!first_epoch || fs::exists(dir / "checkpoints" / "epoch-1.safetensors", ec)) found = metrics;
    }
  }
  if (found.empty() && fs::is_directory(dir / "checkpoints", ec)) {
    static const std::regex epoch_re(R"(epoch-[0-9]+\.safetensors)");
    for (const auto& e : fs::directory_iterator(dir / "checkpoints", ec))
      if (std::regex_match(e.path().filename().string(), epoch_re)) {
        found = e.path().string();
        break;
      }
  }
  if (!found.empty())
    throw std::runtime_error(run_dir + " already holds a training run (" + found +
                             "); continue it with --resume " + run_dir +
                             " or choose another train.run_dir (a fresh run never mixes with an old one)");
}

// Prepares the batches of one epoch on a background thread, `depth` ahead of
// the training loop (make_batch is deterministic and draws no random numbers,
// so prefetching changes no result).
class BatchPrefetcher {
 public:
  BatchPrefetcher(std::function<Batch(size_t)> make, size_t count, size_t depth = 2)
      : make_(std::move(make)), count_(count), depth_(depth), worker_([this] { run(); }) {}
  ~BatchPrefetcher() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  // The next batch in order; rethrows an error of make_batch.
  Batch next() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return !ready_.empty() || err_; });
    if (ready_.empty()) std::rethrow_exception(err_);
    Batch b = std::move(ready_.front());
    ready_.pop_front();
    cv_.notify_all();
    return b;
  }

 private:
  void run() {
    for (size_t i = 0; i < count_; ++i) {
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || ready_.size() < depth_; });
        if (stop_) return;
      }
      try {
        Batch b = make_(i);
        std::lock_guard<std::mutex> lk(mu_);
        ready_.push_back(std::move(b));
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu_);
        err_ = std::current_exception();
        cv_.notify_all();
        return;
      }
      cv_.notify_all();
    }
  }
  std::function<Batch(size_t)> make_;
  size_t count_, depth_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> ready_;
  std::exception_ptr err_;
  bool stop_ = false;
  std::thread worker_;  // last: started after the members it uses
};

TrainResult train(const Config& cfg_in, const TrainData& data, bool resume, const AfterEpoch& after_epoch) {
  Config cfg = cfg_in;
  apply_doctest_limits(cfg);  // TIMITSEG_DOCTEST_MAX_EPOCHS (tests/docs), the one place it is read
  cfg.validate();
  if (cfg.train_run_dir.empty()) throw std::invalid_argument("config: train.run_dir is required");
  if (data.train.utterances.empty()) throw std::invalid_argument("training split is empty");
  // Everything that can fail on the configuration comes before the first write.
  const DeviceChoice choice = resolve_choices(cfg, /*log=*/false);  // `auto` resolved (model/device_choice.h)
  const std::string& device = choice.device;
  const LabelSet ls = LabelSet::make(cfg.data_label_set);
  if (!resume) check_fresh_run_dir(cfg.train_run_dir);
  const int threads = set_threads(cfg.train_threads);

  ModelState state;
  state.dims.input_dim = data.train.utterances[0].dim;
  state.dims.hidden_dim = cfg.model_hidden_dim;
  state.dims.num_layers = cfg.model_num_layers;
  state.dims.num_classes = ls.size();
  state.dims.max_duration = cfg.crf_max_duration;
  state.dims.onset = cfg.onset_enabled();
  state.dims.duration_lognormal = cfg.duration_lognormal();
  state.labels = ls;
  state.features = data.features;
  state.has_cmvn = data.has_cmvn;
  state.cmvn = data.cmvn;
  ExecutorOptions xo;
  xo.threads = threads;
  xo.crf_backend = choice.crf_backend;
  xo.rnn_algo = choice.rnn_algo;
  xo.deterministic = cfg.debug_deterministic;
  xo.phone_bonus = cfg.crf_phone_bonus;  // the per-epoch dev decode
  xo.decode = cfg.crf_decode;
  const FaultSpec fault = FaultSpec::parse(cfg.debug_inject_fault, cfg.model_num_layers, cfg.onset_enabled());
  std::unique_ptr<Executor> exec = make_executor(device, state.dims, xo);
  if (device == "cuda" && choice.crf_backend != "cuda")
    spdlog::warn("crf.backend = {} on the GPU: the CRF runs on the host, with copies every step (the old "
                 "--no-triton); crf.backend=cuda keeps the whole step on the GPU",
                 choice.crf_backend);

  const fs::path run_dir(cfg.train_run_dir);
  const fs::path ckpt_dir = run_dir / "checkpoints";
  fs::create_directories(ckpt_dir);
  // temporaries of a run killed while writing (kill -9, power loss)
  remove_stale_temporaries(run_dir.string());
  remove_stale_temporaries(ckpt_dir.string());
  const LogFile log_file((run_dir / "train.log").string());
  spdlog::info("timitseg {} (commit {}, {} build): {} {}", version(), git_commit(), build_type(),
               resume ? "resuming" : "training", cfg.train_run_dir);
  for (const std::string& pick : choice.picks) spdlog::info("{}", pick);  // one line per `auto`, in train.log too
  write_run_json(run_dir, run_entry(cfg, choice, *exec, threads, resume), resume);
  const std::string metrics_path = (run_dir / "metrics.jsonl").string();
  std::mt19937_64 rng(cfg.train_seed);
  const ParamLayout layout(state.dims);
  std::string metrics_text;
  if (resume) {
    const std::string path = latest_checkpoint(cfg.train_run_dir);
    if (path.empty()) throw std::runtime_error(cfg.train_run_dir + ": no checkpoints/epoch-N.safetensors to resume from");
    ModelState s = load_checkpoint(path);
    if (s.dims.input_dim != state.dims.input_dim || s.dims.hidden_dim != state.dims.hidden_dim ||
        s.dims.num_layers != state.dims.num_layers || s.dims.num_classes != state.dims.num_classes ||
        s.dims.max_duration != state.dims.max_duration || s.dims.onset != state.dims.onset ||
        s.dims.duration_lognormal != state.dims.duration_lognormal)
      throw std::runtime_error(path + ": model dimensions differ from the configuration; cannot resume");
    if (s.optimizer.m.empty()) throw std::runtime_error(path + ": checkpoint has no optimizer state; cannot resume");
    state.params = std::move(s.params);
    state.optimizer = std::move(s.optimizer);
    state.epoch = s.epoch;
    state.best_dev_per = s.best_dev_per;
    state.best_epoch = s.best_epoch;
    rng_from_string(rng, s.rng_state, path);
    metrics_text = metrics_upto(metrics_path, state.epoch);
    spdlog::info("resuming {} after epoch {} (optimizer step {})", path, state.epoch, state.optimizer.step);
    if (state.epoch >= cfg.train_epochs)
      spdlog::warn("run already has {} epochs (train.epochs = {}); nothing to do", state.epoch, cfg.train_epochs);
  } else {
    init_params(layout, rng, state.params, cfg.crf_init_scale);
    if (cfg.crf_duration_init == "data" && state.dims.duration_lognormal) {
      // crf.duration_init = data, crf.duration_model = lognormal: each label's log-normal fitted to its gold pieces
      std::vector<std::vector<int32_t>> classes(data.train.utterances.size());
      for (size_t u = 0; u < classes.size(); ++u)
        for (int32_t l : data.train.utterances[u].labels) classes[u].push_back(ls.from61(l));
      const std::vector<float> fit =
          fit_lognormal_durations(classes, state.dims.max_duration, state.dims.num_classes);
      std::copy(fit.begin(), fit.end(), state.params.begin() + layout.get("crf.duration_lognormal").offset);
      spdlog::info("crf.duration_init = data: crf.duration_lognormal starts at each label's log-normal fit (mean "
                   "and spread of log duration) to the gold segments of the train split (K = {})",
                   state.dims.max_duration);
    } else if (cfg.crf_duration_init == "data") {
      // crf.duration_init = data: the train split's duration distribution, added to the draw above
      std::vector<std::vector<int32_t>> classes(data.train.utterances.size());
      for (size_t u = 0; u < classes.size(); ++u)
        for (int32_t l : data.train.utterances[u].labels) classes[u].push_back(ls.from61(l));
      const DurationPrior prior = duration_log_prior(classes, state.dims.max_duration, state.dims.num_classes);
      const ParamInfo& db = layout.get("crf.duration_bias");
      for (size_t i = 0; i < db.size; ++i) state.params[db.offset + i] += static_cast<float>(prior.log_p[i]);
      if (state.dims.max_duration == 1)  // one duration: log p(1 | label) = 0, nothing added
        spdlog::info("crf.duration_init = data: no effect on the linear CRF (K = 1: every segment is one frame)");
      else
        spdlog::info("crf.duration_init = data: crf.duration_bias starts at log p(duration | label) of the {} gold "
                     "segments of the train split (K = {})",
                     prior.segments, state.dims.max_duration);
    }
    derive_duration_table(layout, state.params.data());  // crf.duration_model = lognormal: the table it implies
    state.optimizer.reset(layout.total());
  }
  state.optimizer.beta1 = cfg.train_beta1;
  state.optimizer.beta2 = cfg.train_beta2;
  state.optimizer.eps = cfg.train_eps;
  state.optimizer.weight_decay = cfg.train_weight_decay;
  state.config = cfg;
  exec->set_state(state.params, state.optimizer);
  write_file_atomic((run_dir / "config.yaml").string(), cfg.to_yaml());
  write_file_atomic(metrics_path, metrics_text);

  const int fixed_length = cfg.debug_fixed_length;
  int inject_epoch = -1, inject_batch = -1;
  if (!cfg.debug_inject_nonfinite.empty()) {
    char c;
    std::istringstream(cfg.debug_inject_nonfinite) >> inject_epoch >> c >> inject_batch;
  }
  const int64_t N = static_cast<int64_t>(data.train.utterances.size());
  std::vector<int32_t> lengths(N);
  for (int64_t i = 0; i < N; ++i) lengths[i] = data.train.utterances[i].num_frames;
  const int64_t batches_per_epoch = (N + cfg.train_batch_size - 1) / cfg.train_batch_size;
  const int64_t total_steps = batches_per_epoch * cfg.train_epochs;
  if (inject_epoch > 0 && (inject_epoch <= state.epoch || inject_epoch > cfg.train_epochs ||
                           inject_batch > batches_per_epoch))
    spdlog::warn("debug.inject_nonfinite = {}: no such step in this run (epochs {}..{}, {} batches per epoch); "
                 "nothing will be injected",
                 cfg.debug_inject_nonfinite, state.epoch + 1, cfg.train_epochs, batches_per_epoch);
  if (!fault.empty() && (fault.step <= state.optimizer.step || fault.step > total_steps))
    spdlog::warn("debug.inject_fault = {}: no such step in this run (steps {}..{}); nothing will be injected",
                 fault.to_string(), state.optimizer.step + 1, total_steps);
  if (!fault.empty() && !cfg.debug_check_numerics)
    spdlog::warn("debug.inject_fault without debug.check_numerics: the fault is planted, but only the older "
                 "checks (CRF input, loss, gradients) can stop the step");
  const data::Cmvn* cmvn = data.has_cmvn ? &data.cmvn : nullptr;
  std::vector<const data::Utterance*> dev_utts;
  for (const auto& u : data.dev.utterances) dev_utts.push_back(&u);
  spdlog::info("training on {}: {} train / {} dev utterances, {} parameters, {} classes, K={}{}", exec->description(),
               N, dev_utts.size(), layout.total(), ls.size(), cfg.crf_max_duration,
               fixed_length > 0 ? ", fixed length " + std::to_string(fixed_length) : std::string());

  TrainResult result;
  result.run_dir = cfg.train_run_dir;
  for (int epoch = state.epoch + 1; epoch <= cfg.train_epochs; ++epoch) {
    const auto epoch_t0 = Clock::now();
    const std::string wall_start = iso8601_now();
    EpochRecord rec;
    rec.epoch = epoch;
    const auto batches = make_epoch_batches(lengths, cfg, rng);
    double loss_sum = 0, grad_norm_sum = 0, grad_norm_max = 0;
    int64_t frames = 0, utts = 0, padded = 0;
    Progress progress("epoch " + std::to_string(epoch) + "/" + std::to_string(cfg.train_epochs),
                      static_cast<int64_t>(batches.size()), "batch");
    double train_seconds = 0;
    BatchPrefetcher prefetch(
        [&](size_t bi) {
          std::vector<const data::Utterance*> chunk;
          for (int i : batches[bi]) chunk.push_back(&data.train.utterances[i]);
          return make_batch(chunk, cmvn, ls, fixed_length);
        },
        batches.size());
    for (size_t bi = 0; bi < batches.size(); ++bi) {
      // SIGINT / SIGTERM (model/interrupt.h): stop between steps, where nothing
      // is being written; --resume goes on from the last finished epoch.
      if (stop_requested()) {
        progress.finish();
        const int sig = stop_signal();
        const std::string at = "interrupted at epoch " + std::to_string(epoch) + ", batch " + std::to_string(bi);
        // epoch - 1 >= 1: checkpoints/epoch-(epoch-1) exists (finished here or resumed from).
        const std::string msg = epoch > 1 ? at + "; resume with: timitseg train --resume " + cfg.train_run_dir
                                          : at + ", before the first epoch finished (nothing to resume); start again "
                                                 "with the same `timitseg train` command";
        log_file.error(msg);
        throw Interrupted(msg, sig > 0 ? 128 + sig : 1);
      }
      const auto t_data = Clock::now();
      const Batch batch = prefetch.next();  // waits only when the prefetch thread is behind
      rec.times.data += since(t_data);
      StepOptions so;
      so.crf_lr_scale = cfg.crf_lr_scale;
      so.lr = scheduled_lr(cfg.train_lr_schedule, cfg.train_lr, cfg.train_min_lr, state.optimizer.step, total_steps,
                           batches_per_epoch);
      so.dropout = cfg.model_dropout;
      so.clip_norm = cfg.train_clip_norm;
      so.crf_reg = cfg.crf_reg;
      so.frame_normalization = cfg.crf_loss_normalization == "frame";
      so.frame_ce_weight = cfg.crf_frame_ce_weight;
      so.check_numerics = cfg.debug_check_numerics;
      so.time_parts = exec->device() == Device::cpu;  // free on the CPU; on the GPU it would serialize the step
      so.rng = &rng;
      so.seed = cfg.train_seed;
      so.step = state.optimizer.step + 1;
      so.fault = fault;
      const std::mt19937_64 rng_before = rng;  // for the dump of a failed step (2.5 KB copy)
      const bool inject = epoch == inject_epoch && static_cast<int>(bi) + 1 == inject_batch;
      if (inject)  // debug.inject_nonfinite: poison one transition entry for this step
        so.poison.emplace_back(layout.get("crf.transition").offset, std::numeric_limits<float>::quiet_NaN());
      StepResult sr;
      try {
        sr = exec->train_step(batch, so);
        ++state.optimizer.step;
      } catch (const NumericsError& e) {
        const NumericsHit& hit = e.hit();
        std::string ids;
        for (const std::string& id : batch.ids) ids += (ids.empty() ? "" : ", ") + id;
        const fs::path dump = run_dir / ("nonfinite-step-" + std::to_string(so.step));
        std::string where;
        try {
          ModelState before = state;  // dims, labels, features, cmvn, config, best so far
          exec->get_state(before.params, before.optimizer);  // the failed step updated nothing
          before.epoch = epoch - 1;
          before.rng_state = rng_to_string(rng_before);
          StepDumpInfo info;
          info.epoch = epoch;
          info.batch = static_cast<int>(bi + 1);
          info.step = so.step;
          info.lr = so.lr;
          info.rng_state = before.rng_state;
          info.fault = fault.step == so.step ? fault : FaultSpec{};
          write_step_dump(dump.string(), batch, cfg, before, info, hit);
          where = "; dump: " + dump.string() + " (batch, state before the step, config, report.json); replay: "
                  "`timitseg replay-step " + dump.string() + "` (docs/debugging.md)";
        } catch (const std::exception& w) {
          where = std::string("; writing the dump folder failed: ") + w.what();
        }
        std::ostringstream os;
        os.precision(6);
        os << "training stopped at epoch " << epoch << ", batch " << bi + 1 << "/" << batches.size() << ", step "
           << so.step << ": non-finite value in layer " << hit.layer << ", " << pass_name(hit.pass)
           << " pass, tensor " << hit.tensor << ": " << hit.stats.nan << " NaN, " << hit.stats.inf << " Inf, ";
        if (hit.stats.finite > 0)
          os << "finite min " << hit.stats.min << ", max " << hit.stats.max;
        else
          os << "no finite value";
        if (hit.layer == "optimizer") os << " (after the update)";
        os << "; utterances: " << ids << where;
        log_file.error(os.str());
        throw std::runtime_error(os.str());
      } catch (const NonFiniteError& e) {
        const std::string replay =
            (run_dir / ("nonfinite-epoch" + std::to_string(epoch) + "-batch" + std::to_string(bi + 1) + ".safetensors"))
                .string();
        std::string ids;
        for (const std::string& id : batch.ids) ids += (ids.empty() ? "" : ", ") + id;
        std::string where;
        try {
          const std::vector<float> cum = exec->last_cum();
          if (cum.size() == static_cast<size_t>(batch.input.B) * (batch.input.T + 1) * ls.size()) {
            std::vector<float> step_params;
            AdamW unused;
            exec->get_state(step_params, unused);
            for (const auto& [k, v] : so.poison) step_params.at(k) = v;
            write_replay(replay, layout, step_params, batch, cum);
            where = "; this batch's CRF inputs are in " + replay + " (reproduce with `timitseg crf replay " + replay +
                    " --backend reference --out OUT.safetensors`)";
          } else {
            where = "; no CRF inputs exist yet for this batch (the forward stopped before cum_scores)";
          }
        } catch (const std::exception& w) {
          where = std::string("; writing the replay file failed: ") + w.what();
        }
        const std::string msg = "training stopped at epoch " + std::to_string(epoch) + ", batch " +
                                std::to_string(bi + 1) + "/" + std::to_string(batches.size()) +
                                ": first non-finite tensor: " + e.tensor() + " (" + e.what() + "); utterances: " +
                                ids + where +
                                ". Debug: --crf-backend reference, --fixed-length N, --crf-reg, docs/training.md";
        log_file.error(msg);
        throw std::runtime_error(msg);
      }
      rec.times.optimizer += sr.times.optimizer;
      rec.times.encoder_forward += sr.times.encoder_forward;
      rec.times.encoder_backward += sr.times.encoder_backward;
      rec.times.crf += sr.times.crf;
      train_seconds = since(epoch_t0);
      loss_sum += sr.loss;
      grad_norm_sum += sr.grad_norm;
      grad_norm_max = std::max(grad_norm_max, sr.grad_norm);
      frames += batch.frames;
      padded += static_cast<int64_t>(batch.input.B) * batch.input.T;
      utts += batch.input.B;
      rec.lr = so.lr;
      {
        std::ostringstream pf;
        pf.precision(4);
        pf << "loss " << loss_sum / (bi + 1) << "  " << static_cast<int64_t>(frames / std::max(1e-9, train_seconds))
           << " frames/s";
        progress.set_postfix(pf.str());
      }
      progress.advance();
      if ((bi + 1) % static_cast<size_t>(cfg.train_log_every) == 0)
        spdlog::debug("epoch {} batch {}/{}: loss {:.5f} (penalty {:.5f}), lr {:.3g}, T {}", epoch, bi + 1,
                      batches.size(), sr.loss, sr.penalty, so.lr, batch.input.T);
    }
    progress.finish();
    rec.train_loss = loss_sum / std::max<size_t>(1, batches.size());
    rec.frames_per_sec = frames / std::max(1e-9, train_seconds);
    rec.utterances_per_sec = utts / std::max(1e-9, train_seconds);
    exec->get_state(state.params, state.optimizer);

    const auto t_dev = Clock::now();
    Metrics dev(ls.names39);
    EpochEnd end;  // for after_epoch: the dev segments of this epoch
    UtteranceHook keep_segments;
    if (after_epoch)
      keep_segments = [&end](const data::Utterance& u, const Batch&, int, const std::vector<float>*,
                             const std::vector<crf::Segment>& segs) { end.dev.emplace_back(&u, segs); };
    if (!dev_utts.empty()) {
      // the dev loss comes from the decoding forward (log Z - gold score, no dropout, no penalty),
      // normalized as the training loss (crf.loss_normalization)
      double nll_sum = 0;
      evaluate_utterances(*exec, dev_utts, cmvn, ls, cfg.train_batch_size, dev, keep_segments, false, &nll_sum);
      rec.dev_per = dev.per();
      int64_t dev_frames = 0;
      for (const data::Utterance* u : dev_utts) dev_frames += u->num_frames;
      rec.dev_loss = nll_sum / (cfg.crf_loss_normalization == "frame" ? double(std::max<int64_t>(1, dev_frames))
                                                                       : double(dev_utts.size()));
    } else {
      rec.dev_per = std::numeric_limits<double>::quiet_NaN();
      rec.dev_loss = std::numeric_limits<double>::quiet_NaN();
    }
    rec.times.dev_eval = since(t_dev);
    const auto [mt, md] = crf_param_maxima(layout, state.params);
    rec.max_abs_transition = mt;
    rec.max_abs_duration_bias = md;
    const double grad_norm_mean = grad_norm_sum / std::max<size_t>(1, batches.size());
    spdlog::debug("epoch {}: max|transition| = {:.4f}, max|duration_bias| = {:.4f}, gradient norm mean {:.4f} max {:.4f}",
                  epoch, mt, md, grad_norm_mean, grad_norm_max);
    // the same numbers as metrics.jsonl's max_abs_transition, max_abs_duration_bias, grad_norm_mean, grad_norm_max
    if (mt > cfg.debug_drift_threshold || md > cfg.debug_drift_threshold)
      spdlog::warn(
          "epoch {}: CRF parameters drifting high: max|transition| = {:.3f}, max|duration_bias| = {:.3f} "
          "(debug.drift_threshold = {}), gradient norm mean {:.3f} max {:.3f}; consider raising --crf-reg (now {})",
          epoch, mt, md, cfg.debug_drift_threshold, grad_norm_mean, grad_norm_max, cfg.crf_reg);

    state.epoch = epoch;
    state.dev_per = rec.dev_per;
    const bool best = !dev_utts.empty() && rec.dev_per < state.best_dev_per;
    if (best) {
      state.best_dev_per = rec.dev_per;
      state.best_epoch = epoch;
    }
    state.rng_state = rng_to_string(rng);
    rec.epoch_seconds = since(epoch_t0);

    nlohmann::json line = {{"epoch", epoch},
                           {"train_loss", rec.train_loss},
                           {"frames_per_sec", rec.frames_per_sec},
                           {"utterances_per_sec", rec.utterances_per_sec},
                           {"epoch_seconds", rec.epoch_seconds},
                           {"lr", rec.lr},
                           {"max_abs_transition", mt},
                           {"max_abs_duration_bias", md},
                           {"grad_norm_mean", grad_norm_mean},
                           {"grad_norm_max", grad_norm_max},
                           {"drift_warning", mt > cfg.debug_drift_threshold || md > cfg.debug_drift_threshold},
                           {"train_frames", frames},
                           {"padding_fraction", padded ? 1.0 - double(frames) / double(padded) : 0.0},
                           {"optimizer_step", state.optimizer.step},
                           {"device", device},
                           {"best", best},
                           {"seconds", rec.times.to_json()},
                           {"wall_clock", {{"start", wall_start}, {"end", iso8601_now()}}}};
    if (!dev_utts.empty()) {  // a metric of a missing split is left out, never NaN or null
      line["dev_per"] = rec.dev_per;
      line["dev_loss"] = rec.dev_loss;
      line["dev_frame_accuracy"] = dev.frame_accuracy();
      line["dev_boundary_f1_tol2"] = dev.boundary(2).f1();
    }
    if (exec->device() != Device::cpu)  // parts are not timed on the GPU (that would serialize the step)
      for (const char* part : {"encoder_forward", "encoder_backward", "crf", "optimizer"}) line["seconds"].erase(part);
    // metrics.jsonl first, then best, then the epoch's checkpoint: an
    // interruption before the last write leaves a line (and a best) for an
    // epoch without a checkpoint, which --resume drops (it keeps lines with
    // epoch <= the checkpoint's) and redoes identically, never a missing line
    // or a best.safetensors older than the checkpoints say.
    metrics_text += line.dump() + "\n";
    write_file_atomic(metrics_path, metrics_text);
    const std::string ckpt = (ckpt_dir / ("epoch-" + std::to_string(epoch) + ".safetensors")).string();
    // best first (the model for evaluate/decode/export, without optimizer state;
    // --resume uses the last epoch-N): a kill between the two files then redoes
    // this epoch on resume and rewrites best identically
    if (best) save_checkpoint((ckpt_dir / "best.safetensors").string(), state, /*with_optimizer=*/false);
    save_checkpoint(ckpt, state);
    prune_checkpoints(ckpt_dir, epoch, cfg.train_keep_checkpoints);
    const std::string dev_text = "dev loss " + format_metric(rec.dev_loss, "%.4f") + ", dev PER " +
                                 format_metric(rec.dev_per, "%.2f%%", 100);
    if (exec->device() == Device::cpu)
      spdlog::info("epoch {}: train loss {:.4f}, {}{}, {:.0f} frames/s, {:.1f} s (data {:.2f}, encoder "
                   "fwd {:.2f} bwd {:.2f}, crf {:.2f}, optimizer {:.2f}, dev {:.2f})",
                   epoch, rec.train_loss, dev_text, best ? " (best)" : "", rec.frames_per_sec,
                   rec.epoch_seconds, rec.times.data, rec.times.encoder_forward, rec.times.encoder_backward,
                   rec.times.crf, rec.times.optimizer, rec.times.dev_eval);
    else
      spdlog::info("epoch {}: train loss {:.4f}, {}{}, {:.0f} frames/s, {:.1f} s (data wait {:.2f}, "
                   "dev {:.2f}; per-part GPU timings: timitseg bench train)",
                   epoch, rec.train_loss, dev_text, best ? " (best)" : "", rec.frames_per_sec,
                   rec.epoch_seconds, rec.times.data, rec.times.dev_eval);
    result.epochs.push_back(rec);
    if (after_epoch) {
      end.run_dir = cfg.train_run_dir;
      end.epoch = epoch;
      end.best = best;
      end.labels = &ls;
      after_epoch(end);
    }
  }
  return result;
}

}  // namespace timitseg::model
