// `timitseg compare`: the linear CRF (crf.max_duration = 1) against the
// semi-CRF (K from the config), trained with the same encoder, data, seed(s)
// and schedule, each in its own run folder under train.run_dir, evaluated on
// dev and core-test, printed as one table with the paired significance of
// the differences, and overlaid in RUN_DIR/report.html (docs/training.md
// "Comparing the linear CRF and the semi-CRF"). A folder is reused only when
// its saved config equals the requested one; --force retrains it; --jobs runs
// several trainings at once in this process.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "app/commands.h"
#include "common/files.h"
#include "app/report/report.h"
#include "app/report/significance.h"
#include "common/atomic_file.h"
#include "common/cuda.h"
#include "common/progress.h"
#include "model/align.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/device_choice.h"
#include "model/executor.h"
#include "model/interrupt.h"
#include "model/metrics.h"
#include "model/cuda/lstm_fused.h"
#include "model/params.h"
#include "model/run_folder.h"
#include "model/train.h"

namespace fs = std::filesystem;

namespace timitseg::app {

namespace {

struct CompareArgs {
  std::string config;
  std::vector<std::string> sets;
  std::string json_out;
  std::string seeds;  // "" = train.seed; "N" = N seeds from train.seed; "1,2,3" = these
  bool force = false;  // --force: retrain runs whose folder holds another configuration
  int jobs = 0;        // --jobs: runs at once (0: the default of default_jobs)
};

// --seeds: "" -> {base}; "N" (no comma) -> base, base+1, ..., base+N-1; "a,b,c" -> {a, b, c}.
std::vector<uint64_t> parse_seeds(const std::string& spec, uint64_t base) {
  if (spec.empty()) return {base};
  auto number = [&](const std::string& t) -> uint64_t {
    size_t used = 0;
    unsigned long long v = 0;
    try {
      if (t.empty() || t[0] == '-') throw std::invalid_argument("negative");
      v = std::stoull(t, &used);
    } catch (const std::exception&) {
      used = std::string::npos;
    }
    if (used != t.size())
      throw std::invalid_argument("--seeds " + spec + ": '" + t +
                                  "' is not a non-negative integer (use --seeds N or --seeds 1,2,3)");
    return v;
  };
  std::vector<uint64_t> out;
  if (spec.find(',') == std::string::npos) {
    const uint64_t n = number(spec);
    if (n < 1 || n > 1000) throw std::invalid_argument("--seeds " + spec + ": the number of seeds must be in [1, 1000]");
    for (uint64_t i = 0; i < n; ++i) out.push_back(base + i);
  } else {
    std::istringstream in(spec);
    std::string t;
    while (std::getline(in, t, ',')) {
      const uint64_t s = number(t);
      for (uint64_t x : out)
        if (x == s) throw std::invalid_argument("--seeds " + spec + ": seed " + t + " is listed twice");
      out.push_back(s);
    }
  }
  return out;
}

const char* kSplits[] = {"dev", "core-test"};
// Metric keys of the table and JSON, in order: (key, row label, scale for the table, printf format).
struct MetricRow {
  const char* key;
  const char* label;
  double scale;
  const char* format;
};
const MetricRow kRows[] = {
    {"per", "PER %", 100, "%.2f"},
    {"boundary_f1_tol0", "boundary F1 tol 0 %", 100, "%.2f"},
    {"boundary_f1_tol1", "boundary F1 tol 1 %", 100, "%.2f"},
    {"boundary_f1_tol2", "boundary F1 tol 2 %", 100, "%.2f"},
    // at 20 ms, one-to-one (Metrics::to_json's boundary_20ms): shown when present
    {"boundary_20ms_precision", "boundary P 20 ms %", 100, "%.2f"},
    {"boundary_20ms_recall", "boundary R 20 ms %", 100, "%.2f"},
    {"boundary_20ms_f1", "boundary F1 20 ms %", 100, "%.2f"},
    {"boundary_20ms_r_value", "boundary R-value 20 ms %", 100, "%.2f"},
    {"segment_f1", "segment F1 %", 100, "%.2f"},
    {"duration_mae", "duration MAE (frames)", 1, "%.3f"},
    {"duration_kl", "duration KL", 1, "%.4f"},
    {"frame_accuracy", "frame accuracy %", 100, "%.2f"},
    // forced alignment of the reference phone sequences (model::align_utterances, docs/align.md)
    {"align_within_10ms", "align within 10 ms %", 100, "%.2f"},
    {"align_within_20ms", "align within 20 ms %", 100, "%.2f"},
    {"align_within_25ms", "align within 25 ms %", 100, "%.2f"},
    {"align_within_50ms", "align within 50 ms %", 100, "%.2f"},
    {"align_mean_abs_ms", "align mean |error| ms", 1, "%.2f"},
    {"align_median_abs_ms", "align median |error| ms", 1, "%.2f"},
    {"decode_seconds", "decode time (s)", 1, "%.2f"},
};

// One trained model's numbers: per split (absent when the split is empty) and training speed.
struct RunNumbers {
  std::map<std::string, std::map<std::string, double>> splits;  // split -> key -> value
  double train_frames_per_sec = std::nan("");
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// Mean training frames/s over the epochs of RUN_DIR/metrics.jsonl (NaN when none).
double mean_train_fps(const fs::path& run_dir) {
  std::istringstream in(slurp(run_dir / "metrics.jsonl"));
  std::string line;
  double sum = 0;
  int n = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      sum += nlohmann::json::parse(line).at("frames_per_sec").get<double>();
      ++n;
    } catch (const nlohmann::json::exception&) {
      throw std::runtime_error((run_dir / "metrics.jsonl").string() + ": a line is not a metrics JSON object");
    }
  }
  return n ? sum / n : std::nan("");
}

// Keys that change how a run is logged, checked or kept, never what it
// computes: a run folder whose saved config differs from the requested one
// only in these is still the same run. train.run_dir is where the folder is
// (a moved folder holds the same run).
const char* kIgnoredKeys[] = {"train.run_dir",        "train.log_every",      "train.threads",
                              "train.keep_checkpoints", "debug.drift_threshold", "debug.check_numerics"};

// Every key (section.key) whose value differs between the run's saved config
// and the requested one, as "key: old -> new".
// train.device, train.rnn_algo and crf.backend are compared resolved on this
// machine (model/device_choice.h): `auto` stands for its pick here, so a run
// saved with `auto` and a request for `cpu` on the CPU (or the reverse) are the
// same run; an explicit value that differs from the pick is a difference.
std::vector<std::string> differences(const model::Config& saved, const model::Config& requested) {
  const model::DeviceFacts facts = model::probe_device_facts();
  nlohmann::json ja = model::with_choices(saved, facts).to_json(), jb = model::with_choices(requested, facts).to_json();
  std::vector<std::string> out;
  for (const std::string& k : model::Config::keys()) {
    if (std::find(std::begin(kIgnoredKeys), std::end(kIgnoredKeys), k) != std::end(kIgnoredKeys)) continue;
    const std::string sec = k.substr(0, k.find('.')), key = k.substr(k.find('.') + 1);
    const nlohmann::json va = ja.contains(sec) && ja[sec].contains(key) ? ja[sec][key] : nlohmann::json();
    const nlohmann::json vb = jb.contains(sec) && jb[sec].contains(key) ? jb[sec][key] : nlohmann::json();
    if (va != vb) out.push_back(k + ": " + va.dump() + " -> " + vb.dump());
  }
  return out;
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (const std::string& x : v) out += (out.empty() ? "" : sep) + x;
  return out;
}

// One run of the comparison and what compare does with its folder.
struct Job {
  enum class Action { reuse, fresh, resume, replace };
  model::Config cfg;
  std::string name;  // "linear", "seed-3/semicrf": the log prefix with --jobs > 1
  Action action = Action::fresh;
  std::string why;   // replace: the differences (or the leftover) that --force overrides
  std::string error; // after training: the failure, "" when it trained
  bool interrupted = false;
  int interrupt_code = 0;
};

// The folder an old run waits in while `compare --force` trains its
// replacement's first epoch (docs/training.md).
fs::path replaced_path(const std::string& run_dir) {
  fs::path p = fs::path(run_dir);
  if (p.filename().empty()) p = p.parent_path();  // a trailing slash
  return p.parent_path() / (p.filename().string() + ".replaced");
}

// What to do with job.cfg's folder: reuse it (same config, finished), resume it
// (same config, unfinished), train it (nothing there), or replace it (another
// config, --force). Returns the conflict ("" when none) when it may not be touched.
std::string plan(Job& job, bool force) {
  const std::string& dir = job.cfg.train_run_dir;
  std::error_code ec;
  if (fs::exists(replaced_path(dir), ec))
    throw std::runtime_error(replaced_path(dir).string() + " exists: it holds the old run that a `compare --force` "
                             "was replacing when it was killed; delete it, or move it back to " + dir);
  const std::string ckpt = model::latest_checkpoint(dir);
  if (ckpt.empty()) {
    try {
      model::check_fresh_run_dir(dir);
      job.action = Job::Action::fresh;
    } catch (const std::exception& e) {
      if (!force) return e.what();
      job.action = Job::Action::replace;
      job.why = "metrics.jsonl without checkpoints";
    }
    return "";
  }
  // The requested config as train() would save it (the documentation test's epoch cap applied).
  model::Config requested = job.cfg;
  model::apply_doctest_limits(requested);
  const model::ModelState s = model::load_checkpoint(ckpt);
  const std::vector<std::string> diff = differences(s.config, requested);
  if (!diff.empty()) {
    if (!force) return dir + " (" + join(diff, ", ") + ")";
    job.action = Job::Action::replace;
    job.why = join(diff, ", ");
    return "";
  }
  if (s.epoch >= requested.train_epochs) {
    job.action = Job::Action::reuse;
    spdlog::info("compare: {} is finished (epoch {}/{}): reused", dir, s.epoch, requested.train_epochs);
  } else {
    job.action = Job::Action::resume;
  }
  return "";
}

// Trains job.cfg (fresh, resumed or replacing the old folder); RUN_DIR/report.html after every epoch.
void execute(const Job& job, const model::TrainData& data) {
  const model::Config& cfg = job.cfg;
  const std::string& dir = cfg.train_run_dir;
  switch (job.action) {
    case Job::Action::reuse:
      return;
    case Job::Action::fresh:
      spdlog::info("compare: training {} (K={}, seed {})", dir, cfg.crf_max_duration, cfg.train_seed);
      model::train(cfg, data, false, train_report_refresher(data, cfg.train_threads));
      return;
    case Job::Action::resume: {
      const model::ModelState s = model::load_checkpoint(model::latest_checkpoint(dir));
      spdlog::info("compare: {} stopped after epoch {}/{}: resuming", dir, s.epoch, cfg.train_epochs);
      model::train(cfg, data, true, train_report_refresher(data, cfg.train_threads));
      return;
    }
    case Job::Action::replace: {
      // The old folder moves aside (one rename) and comes back if the new run
      // fails before its first epoch is written; after that it is deleted.
      const fs::path aside = replaced_path(dir);
      spdlog::warn("compare: --force: {} holds another run ({}): training it afresh; the old run waits in {} until "
                   "the new one has finished its first epoch",
                   dir, job.why, aside.string());
      fs::rename(dir, aside);
      bool old_deleted = false;
      model::AfterEpoch report = train_report_refresher(data, cfg.train_threads);
      auto after = [&](const model::EpochEnd& e) {
        if (!old_deleted) {
          std::error_code ec;
          fs::remove_all(aside, ec);
          if (ec) spdlog::warn("compare: cannot delete the replaced run {}: {}", aside.string(), ec.message());
          else spdlog::info("compare: {}: the new run finished its first epoch; the old run ({}) is deleted", dir,
                            aside.string());
          old_deleted = true;
        }
        report(e);
      };
      try {
        model::train(cfg, data, false, after);
      } catch (...) {
        if (!old_deleted) {
          std::error_code ec;
          fs::remove_all(dir, ec);
          fs::rename(aside, dir, ec);
          if (ec)
            spdlog::error("compare: cannot move the old run back from {} to {}: {}", aside.string(), dir, ec.message());
          else
            spdlog::warn("compare: the new run of {} failed before its first epoch: the old run is back in place", dir);
        }
        throw;
      }
      return;
    }
  }
}

// Runs the jobs that train, `jobs` at a time (one thread each; each run's
// executor has its own CUDA stream and handles), the others finishing when
// one fails. Fills job.error / job.interrupted.
void train_all(std::vector<Job>& all, const model::TrainData& data, int jobs) {
  std::vector<Job*> todo;
  for (Job& j : all)
    if (j.action != Job::Action::reuse) todo.push_back(&j);
  auto run_one = [&](Job& j) {
    if (model::stop_requested()) {
      j.interrupted = true;
      j.interrupt_code = model::stop_signal() > 0 ? 128 + model::stop_signal() : 1;
      j.error = "not started (interrupted)";
      return;
    }
    try {
      execute(j, data);
    } catch (const model::Interrupted& e) {
      j.interrupted = true;
      j.interrupt_code = e.exit_code();
      j.error = e.what();
    } catch (const std::exception& e) {
      j.error = e.what();
      spdlog::error("compare: {} failed: {}", j.cfg.train_run_dir, e.what());
    }
  };
  if (jobs <= 1 || todo.size() <= 1) {
    for (Job* j : todo) run_one(*j);
    return;
  }
  // Concurrent runs: console lines tagged with the run, one train.log each,
  // no redrawn progress bars (the epoch lines say where each run is).
  model::prepare_concurrent_logging();
  Progress::set_enabled(false);
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < jobs && w < static_cast<int>(todo.size()); ++w)
    workers.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < todo.size();) {
        model::LogTag tag(todo[i]->name);
        run_one(*todo[i]);
      }
    });
  for (std::thread& t : workers) t.join();
}

// The default --jobs: 1 on the CPU; on the GPU as many runs as fill its SMs twice
// (a fused run occupies fused::grid_ctas(B, H) SMs, one CTA each) and fit in
// its free memory, the memory of one run measured with one training step and
// one decode of the longest batch on a probe executor.
int default_jobs(const std::string& device, const model::Config& cfg, const model::TrainData& data, int to_train) {
  if (device != "cuda" || to_train <= 1) return 1;
  const model::LabelSet ls = model::LabelSet::make(cfg.data_label_set);
  model::ModelDims dims;
  dims.input_dim = data.train.utterances.at(0).dim;
  dims.hidden_dim = cfg.model_hidden_dim;
  dims.num_layers = cfg.model_num_layers;
  dims.num_classes = ls.size();
  dims.max_duration = cfg.crf_max_duration;
  dims.onset = cfg.onset_enabled();
  dims.duration_lognormal = cfg.duration_lognormal();
  model::ExecutorOptions xo;
  xo.threads = model::set_threads(cfg.train_threads);
  const model::DeviceChoice choice = model::resolve_choices(cfg, /*log=*/false);
  xo.crf_backend = choice.crf_backend;
  xo.rnn_algo = choice.rnn_algo;
  xo.deterministic = cfg.debug_deterministic;
  size_t free0 = 0, free1 = 0, total = 0;
  std::string algo;
  try {
    cuda::memory_info(&free0, &total);
    {
      std::unique_ptr<model::Executor> exec = model::make_executor(device, dims, xo);
      algo = exec->description();
      const model::ParamLayout layout(dims);
      std::mt19937_64 rng(cfg.train_seed);
      std::vector<float> params;
      model::init_params(layout, rng, params, cfg.crf_init_scale);
      model::AdamW opt;
      opt.reset(layout.total());
      exec->set_state(params, opt);
      // the batch of the longest utterances of train and dev
      std::vector<const data::Utterance*> utts;
      for (const auto& u : data.train.utterances) utts.push_back(&u);
      for (const auto& u : data.dev.utterances) utts.push_back(&u);
      std::stable_sort(utts.begin(), utts.end(), [](const data::Utterance* a, const data::Utterance* b) {
        return a->num_frames > b->num_frames;
      });
      utts.resize(std::min<size_t>(utts.size(), static_cast<size_t>(cfg.train_batch_size)));
      const model::Batch batch =
          model::make_batch(utts, data.has_cmvn ? &data.cmvn : nullptr, ls, cfg.debug_fixed_length);
      model::StepOptions so;
      so.lr = 0;  // the probe's parameters are thrown away; lr 0 keeps them finite
      so.dropout = cfg.model_dropout;
      so.rng = &rng;
      so.seed = cfg.train_seed;
      so.step = 1;
      so.check_numerics = false;
      exec->train_step(batch, so);
      exec->decode(batch, nullptr, nullptr);
      cuda::synchronize();
      cuda::memory_info(&free1, &total);
    }
  } catch (const std::exception& e) {
    spdlog::warn("compare: measuring one run's GPU footprint failed ({}): --jobs 1 (set --jobs N to choose)",
                 e.what());
    return 1;
  }
  const double per_run = std::max<double>(1.0, static_cast<double>(free0) - static_cast<double>(free1));
  const int by_memory = std::max(1, static_cast<int>(0.9 * static_cast<double>(free0) / per_run));
  const int sms = cuda::sm_count();
  const int ctas = model::fused::grid_ctas(cfg.train_batch_size, cfg.model_hidden_dim);
  const bool fused = algo.find("fused") != std::string::npos && ctas > 0;
  // fused: enough runs to cover every SM twice (a run keeps its SMs busy only part of each step: host read-back
  // of the step's scalars, batch staging, dev evaluation; measured on one H100, compare --seeds 3 of
  // configs/timit.yaml, 6 runs of 64 CTAs: --jobs 1/2/3/6 took 33.8/18.9/13.6/9.9 s, docs/training.md);
  // cuDNN's kernels: no per-run figure, memory decides
  const int by_sms = fused ? 2 * ((sms + ctas - 1) / ctas) : to_train;
  const int jobs = std::max(1, std::min({to_train, by_memory, by_sms}));
  spdlog::info("compare: --jobs {} by default ({} runs to train; {}; one run takes {:.0f} MiB of the {:.0f} MiB free "
               "GPU memory, room for {})",
               jobs, to_train,
               fused ? "a fused run occupies " + std::to_string(ctas) + " of " + std::to_string(sms) +
                           " SMs, " + std::to_string(by_sms) + " cover them twice"
                     : "cuDNN LSTM: no per-run SM figure",
               per_run / (1 << 20), free0 / double(1 << 20), by_memory);
  return jobs;
}

// Evaluates the run's best checkpoint (the last epoch when there is no best: no dev split) on dev and core-test;
// *dev_report: the dev split's decoded labels for the report; *names39 (optional): the run's phone names.
RunNumbers evaluate_run(const model::Config& cfg, const std::map<std::string, data::Split>& splits,
                        report::RunReport* dev_report, std::vector<std::string>* names39) {
  const fs::path ckpt_dir = fs::path(cfg.train_run_dir) / "checkpoints";
  std::string ckpt = (ckpt_dir / "best.safetensors").string();
  if (!fs::exists(ckpt)) ckpt = model::latest_checkpoint(cfg.train_run_dir);
  if (ckpt.empty()) throw std::runtime_error(cfg.train_run_dir + ": no checkpoint to evaluate");
  const model::ModelState s = model::load_checkpoint(ckpt);
  const model::DeviceChoice choice = model::resolve_choices(cfg, /*log=*/false);
  const std::string& device = choice.device;
  model::ExecutorOptions xo;
  xo.threads = model::set_threads(cfg.train_threads);
  xo.rnn_algo = choice.rnn_algo;
  // as evaluate: the GPU decodes with the cuda backend, the CPU with the run's host backend
  xo.crf_backend = device == "cuda" ? "cuda" : (choice.crf_backend == "cuda" ? "cpu" : choice.crf_backend);
  xo.phone_bonus = s.config.crf_phone_bonus;
  xo.decode = s.config.crf_decode;
  std::unique_ptr<model::Executor> exec = model::make_executor(device, s.dims, xo);
  exec->set_state(s.params, s.optimizer);
  RunNumbers out;
  out.train_frames_per_sec = mean_train_fps(cfg.train_run_dir);
  if (names39) *names39 = s.labels.names39;
  dev_report->run_dir = cfg.train_run_dir;
  dev_report->has_predictions = false;
  dev_report->predictions_note = "no dev split";
  for (const auto& [name, split] : splits) {
    if (split.utterances.empty()) continue;  // n/a
    std::vector<const data::Utterance*> utts;
    for (const auto& u : split.utterances) utts.push_back(&u);
    model::Metrics m(s.labels.names39);
    std::vector<std::pair<const data::Utterance*, std::vector<crf::Segment>>> decoded;
    model::UtteranceHook keep;
    if (name == "dev")
      keep = [&decoded](const data::Utterance& u, const model::Batch&, int, const std::vector<float>*,
                        const std::vector<crf::Segment>& segs) { decoded.emplace_back(&u, segs); };
    const auto t0 = std::chrono::steady_clock::now();
    model::evaluate_utterances(*exec, utts, s.has_cmvn ? &s.cmvn : nullptr, s.labels, cfg.train_batch_size, m, keep);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (name == "dev") {
      dev_report->predictions = report::predictions_from_segments(
          s.labels, decoded,
          fs::path(ckpt).filename().string() + " (epoch " + std::to_string(s.epoch) + "), dev split, " +
              std::to_string(decoded.size()) + " utterances");
      dev_report->has_predictions = true;
    }
    const nlohmann::json j = m.to_json();
    auto& v = out.splits[name];
    v["per"] = m.per();
    for (int tol = 0; tol <= 2; ++tol) v["boundary_f1_tol" + std::to_string(tol)] = m.boundary(tol).f1();
    if (j.contains("boundary_20ms"))  // the field's boundary metrics at 20 ms (Metrics::to_json)
      for (const char* k : {"precision", "recall", "f1", "r_value"})
        if (j["boundary_20ms"].contains(k)) v[std::string("boundary_20ms_") + k] = j["boundary_20ms"][k].get<double>();
    v["segment_f1"] = m.segment().f1();
    v["duration_mae"] = j.at("duration_mean_mae").get<double>();
    v["duration_kl"] = j.at("duration_kl").get<double>();
    v["frame_accuracy"] = m.frame_accuracy();
    v["decode_seconds"] = secs;
    // Forced alignment of the split's reference phone sequences (the field's metric; docs/align.md).
    const nlohmann::json al = model::align_utterances(*exec, utts, s, cfg.train_batch_size).to_json();
    if (al.contains("within_ms")) {
      for (const char* tol : {"10", "20", "25", "50"})
        v[std::string("align_within_") + tol + "ms"] = al["within_ms"][tol].get<double>();
      v["align_mean_abs_ms"] = al["mean_abs_ms"].get<double>();
      v["align_median_abs_ms"] = al["median_abs_ms"].get<double>();
    }
    spdlog::info("compare: {} on {}: PER {:.2f}%, {} utterances decoded in {:.2f} s ({})", ckpt, name, 100 * m.per(),
                 utts.size(), secs, exec->description());
  }
  return out;
}

struct Summary {
  std::vector<double> values;
  double mean() const {
    double s = 0;
    for (double v : values) s += v;
    return s / values.size();
  }
  double std() const {  // sample standard deviation (n - 1)
    const double m = mean();
    double s = 0;
    for (double v : values) s += (v - m) * (v - m);
    return std::sqrt(s / (values.size() - 1));
  }
  nlohmann::json to_json() const {
    nlohmann::json j = {{"mean", mean()}, {"n", values.size()}, {"values", values}};
    if (values.size() > 1) j["std"] = std();  // with one seed there is no spread: left out
    return j;
  }
  std::string text(double scale, const char* format) const {
    if (values.empty()) return "n/a";
    std::string t = model::format_metric(mean(), format, scale);
    if (values.size() > 1) t += " ± " + model::format_metric(std(), format, scale);
    return t;
  }
};

void run_compare(const CompareArgs& a) {
  if (a.config.empty()) throw std::invalid_argument("compare: --config FILE.yaml is required");
  const model::Config base = model::Config::load(a.config, a.sets);
  if (base.train_run_dir.empty()) throw std::invalid_argument(a.config + ": train.run_dir is required (the runs go "
                                                               "into RUN_DIR/linear and RUN_DIR/semicrf)");
  if (base.data_workdir.empty()) throw std::invalid_argument(a.config + ": data.workdir is required");
  const std::vector<uint64_t> seeds = parse_seeds(a.seeds, base.train_seed);
  if (!a.json_out.empty()) check_output_file("--json", a.json_out, "compare.json");
  const int K = base.crf_max_duration;
  if (K == 1) spdlog::warn("compare: crf.max_duration is 1 in {}: the semi-CRF run is a linear CRF too", a.config);
  // no GPU for train.device=cuda: one line, before anything is written
  const std::string device = model::resolve_device(base.train_device);
  model::install_stop_handlers();

  struct Variant {
    std::string name, title;
    int K;
  };
  const std::vector<Variant> variants = {{"linear", "linear CRF (K=1)", 1},
                                         {"semicrf", "semi-CRF (K=" + std::to_string(K) + ")", K}};
  const bool seed_dirs = !(seeds.size() == 1 && a.seeds.empty());
  // jobs[s * 2 + v]: seed s, variant v (the training order of --jobs 1)
  std::vector<Job> jobs;
  for (uint64_t seed : seeds)
    for (const Variant& var : variants) {
      std::vector<std::string> sets = a.sets;
      const fs::path dir = seed_dirs ? fs::path(base.train_run_dir) / ("seed-" + std::to_string(seed)) / var.name
                                     : fs::path(base.train_run_dir) / var.name;
      sets.push_back("crf.max_duration=" + std::to_string(var.K));
      sets.push_back("train.seed=" + std::to_string(seed));
      sets.push_back("train.run_dir=\"" + dir.string() + "\"");
      Job j;
      j.cfg = model::Config::load(a.config, sets);
      j.name = seed_dirs ? "seed-" + std::to_string(seed) + "/" + var.name : var.name;
      jobs.push_back(std::move(j));
    }
  auto job_of = [&](size_t v, size_t s) -> const Job& { return jobs[s * variants.size() + v]; };

  // Every folder is checked before anything is trained: one error line for all conflicts.
  std::vector<std::string> conflicts;
  for (Job& j : jobs) {
    const std::string c = plan(j, a.force);
    if (!c.empty()) conflicts.push_back(c);
  }
  if (!conflicts.empty())
    throw std::runtime_error(
        "compare: " + std::string(conflicts.size() == 1 ? "a run folder holds" : "run folders hold") +
        " a run of another configuration, which compare never extends or mixes: " + join(conflicts, "; ") +
        ". Run again with --force to train " + (conflicts.size() == 1 ? "it" : "them") +
        " afresh (the old run is deleted once the new one has finished its first epoch), or choose another "
        "train.run_dir");
  int to_train = 0;
  for (const Job& j : jobs) to_train += j.action != Job::Action::reuse;

  double train_wall = 0;
  int jobs_used = 1;
  if (to_train > 0) {
    const model::TrainData data = model::load_train_data(base);
    jobs_used = a.jobs > 0 ? a.jobs : default_jobs(device, base, data, to_train);
    jobs_used = std::max(1, std::min(jobs_used, to_train));
    spdlog::info("compare: training {} of {} runs, {} at a time on {}{}", to_train, jobs.size(), jobs_used, device,
                 device == "cpu" && jobs_used > 1 ? " (their parallel sections share one thread pool)" : "");
    const auto t0 = std::chrono::steady_clock::now();
    train_all(jobs, data, jobs_used);
    train_wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::vector<std::string> failed;
    int interrupt_code = 0;
    for (const Job& j : jobs) {
      if (j.error.empty()) continue;
      failed.push_back(j.cfg.train_run_dir + ": " + j.error);
      if (j.interrupted) interrupt_code = j.interrupt_code;
    }
    if (!failed.empty()) {
      const std::string msg = "compare: " + std::to_string(failed.size()) + " of " + std::to_string(to_train) +
                              " runs did not finish (the others did; run compare again to resume or retrain "
                              "them): " + join(failed, "; ");
      if (interrupt_code) throw model::Interrupted(msg, interrupt_code);
      throw std::runtime_error(msg);
    }
    spdlog::info("compare: trained {} runs in {:.1f} s, {} at a time", to_train, train_wall, jobs_used);
  }

  std::map<std::string, data::Split> splits;
  for (const char* name : kSplits) splits[name] = data::load_split(base.data_workdir, name);

  // numbers[v][s]; the report's runs in the same order
  std::vector<std::vector<RunNumbers>> numbers(variants.size(), std::vector<RunNumbers>(seeds.size()));
  report::ReportInput overlay;
  for (size_t s = 0; s < seeds.size(); ++s)
    for (size_t v = 0; v < variants.size(); ++v) {
      report::RunReport rr;
      numbers[v][s] = evaluate_run(job_of(v, s).cfg, splits, &rr, overlay.names39.empty() ? &overlay.names39 : nullptr);
      overlay.runs.push_back(std::move(rr));
    }
  // summaries[v][split][key]
  std::vector<std::map<std::string, std::map<std::string, Summary>>> sums(variants.size());
  std::vector<Summary> fps(variants.size());
  for (size_t v = 0; v < variants.size(); ++v)
    for (size_t s = 0; s < seeds.size(); ++s) {
      const RunNumbers& r = numbers[v][s];
      for (const auto& [split, vals] : r.splits)
        for (const auto& [k, x] : vals) sums[v][split][k].values.push_back(x);
      if (!std::isnan(r.train_frames_per_sec)) fps[v].values.push_back(r.train_frames_per_sec);
    }
  // tests[split][key]: semi-CRF minus linear CRF, paired by seed (seeds where both runs have the metric)
  std::map<std::string, std::map<std::string, report::PairedTest>> tests;
  for (const char* split : kSplits)
    for (const MetricRow& row : kRows) {
      if (std::string(row.key) == "decode_seconds") continue;  // a time, not a result
      std::vector<double> lin, semi;
      for (size_t s = 0; s < seeds.size(); ++s) {
        const auto a0 = numbers[0][s].splits.find(split), a1 = numbers[1][s].splits.find(split);
        if (a0 == numbers[0][s].splits.end() || a1 == numbers[1][s].splits.end()) continue;
        if (!a0->second.count(row.key) || !a1->second.count(row.key)) continue;
        lin.push_back(a0->second.at(row.key));
        semi.push_back(a1->second.at(row.key));
      }
      if (!lin.empty()) tests[split][row.key] = report::paired_test(lin, semi);
    }
  auto present = [&](const MetricRow& row) {  // a row some run has (boundary_20ms only with that metric)
    for (size_t v = 0; v < variants.size(); ++v)
      for (const auto& [split, m] : sums[v])
        if (m.count(row.key)) return true;
    return false;
  };

  // ---- the table --------------------------------------------------------------
  const std::string seeds_text =
      seeds.size() == 1 ? "1 seed (" + std::to_string(seeds[0]) + "): a single run, no spread; use --seeds N"
                        : std::to_string(seeds.size()) + " seeds, mean ± std";
  std::ostringstream os;
  os << "compare: " << variants[0].title << " vs " << variants[1].title << ", " << base.train_epochs
     << " epochs, " << seeds_text << "\n";
  char buf[512];
  std::vector<std::string> cols;
  for (const char* split : kSplits)
    for (const Variant& var : variants) cols.push_back(var.name + " " + split);
  std::snprintf(buf, sizeof buf, "%-26s", "metric");
  os << buf;
  for (const std::string& c : cols) {
    std::snprintf(buf, sizeof buf, " %20s", c.c_str());
    os << buf;
  }
  os << "\n";
  for (const MetricRow& row : kRows) {
    if (!present(row)) continue;
    std::snprintf(buf, sizeof buf, "%-26s", row.label);
    os << buf;
    for (const char* split : kSplits)
      for (size_t v = 0; v < variants.size(); ++v) {
        const auto sp = sums[v].find(split);
        const std::string t = sp == sums[v].end() || !sp->second.count(row.key)
                                  ? "n/a"
                                  : sp->second.at(row.key).text(row.scale, row.format);
        std::snprintf(buf, sizeof buf, " %20s", t.c_str());
        os << buf;
      }
    os << "\n";
  }
  std::snprintf(buf, sizeof buf, "%-26s", "train frames/s");
  os << buf;
  for (size_t i = 0; i < std::size(kSplits); ++i)
    for (size_t v = 0; v < variants.size(); ++v) {
      std::snprintf(buf, sizeof buf, " %20s", fps[v].text(1, "%.0f").c_str());
      os << buf;
    }
  os << "\n\nsemi-CRF minus linear CRF, paired by seed (" << seeds.size() << (seeds.size() == 1 ? " seed" : " seeds")
     << "): mean difference ± std of the differences, paired t-test (t, degrees of freedom, two-sided p) and exact "
        "sign test (two-sided p, seeds where the semi-CRF is higher+/lower-)\n";
  std::snprintf(buf, sizeof buf, "%-26s %-10s %18s %16s %14s %18s\n", "metric", "split", "mean diff ± std", "t (df)",
                "p (t-test)", "p (sign test)");
  os << buf;
  std::vector<std::vector<std::string>> sig_rows;
  for (const MetricRow& row : kRows)
    for (const char* split : kSplits) {
      const auto sp = tests.find(split);
      if (sp == tests.end() || !sp->second.count(row.key)) continue;
      const report::PairedTest& t = sp->second.at(row.key);
      const std::vector<std::string> cells = {row.label, split, report::mean_text(t, row.scale, row.format),
                                              report::t_text(t), report::p_t_text(t), report::p_sign_text(t)};
      std::snprintf(buf, sizeof buf, "%-26s %-10s %18s %16s %14s %18s\n", cells[0].c_str(), cells[1].c_str(),
                    cells[2].c_str(), cells[3].c_str(), cells[4].c_str(), cells[5].c_str());
      os << buf;
      sig_rows.push_back(cells);
    }
  os << "\nrun folders: " << (fs::path(base.train_run_dir) / "{linear,semicrf}").string()
     << (seed_dirs ? " under seed-S/" : "") << "\n";
  if (to_train > 0) {
    std::snprintf(buf, sizeof buf, "training wall time: %.1f s for %d run(s), %d at a time (--jobs %d)\n", train_wall,
                  to_train, jobs_used, jobs_used);
    os << buf;
  } else {
    os << "training wall time: 0 s (every run reused)\n";
  }

  // ---- the overlay report -------------------------------------------------------
  const std::string report_path = (fs::path(base.train_run_dir) / "report.html").string();
  {
    std::vector<const data::Utterance*> dev_utts;
    for (const auto& u : splits["dev"].utterances) dev_utts.push_back(&u);
    overlay.drawn = report::pick_drawn(dev_utts, data::load_feature_options(base.data_workdir));
    report::ReportTable means;
    means.id = "compare";
    means.title = "compare: " + variants[0].title + " vs " + variants[1].title;
    means.note = std::to_string(base.train_epochs) + " epochs, " + seeds_text +
                 "; each run evaluated with its best checkpoint (the last without a dev split).";
    means.header = {"metric"};
    for (const std::string& c : cols) means.header.push_back(c);
    for (const MetricRow& row : kRows) {
      if (!present(row)) continue;
      std::vector<std::string> r = {row.label};
      for (const char* split : kSplits)
        for (size_t v = 0; v < variants.size(); ++v) {
          const auto sp = sums[v].find(split);
          r.push_back(sp == sums[v].end() || !sp->second.count(row.key) ? "n/a"
                                                                        : sp->second.at(row.key).text(row.scale, row.format));
        }
      means.rows.push_back(r);
    }
    report::ReportTable sig;
    sig.id = "significance";
    sig.title = "Significance: semi-CRF minus linear CRF, paired by seed";
    sig.note = "Per metric and split: the mean over seeds of (semi-CRF - linear CRF) on the same seed, the sample "
               "std of those differences, a paired two-sided t-test and the exact two-sided sign test (docs/"
               "training.md). With 1 seed there is no test: n/a (1 seed).";
    sig.header = {"metric", "split", "mean diff ± std", "t (df)", "p (t-test)", "p (sign test)"};
    sig.rows = sig_rows;
    overlay.tables = {means, sig};
    report::write_report(overlay, report_path);
    // a reused run from before compare wrote report.html gets its own too
    for (const report::RunReport& rr : overlay.runs) {
      const fs::path own = fs::path(rr.run_dir) / "report.html";
      std::error_code ec;
      if (fs::exists(own, ec)) continue;
      report::ReportInput one;
      one.names39 = overlay.names39;
      one.runs = {rr};
      one.drawn = overlay.drawn;
      report::write_report(one, own.string());
    }
  }
  os << "report: " << report_path << "\n";
  std::printf("%s", os.str().c_str());
  std::fflush(stdout);

  // ---- JSON ---------------------------------------------------------------------
  if (!a.json_out.empty()) {
    nlohmann::json j;
    j["config"] = a.config;
    j["epochs"] = base.train_epochs;
    j["seeds"] = seeds;
    j["report"] = report_path;
    j["jobs"] = jobs_used;
    j["runs_trained"] = to_train;
    j["train_wall_seconds"] = train_wall;
    for (size_t v = 0; v < variants.size(); ++v) {
      nlohmann::json r;
      r["title"] = variants[v].title;
      r["max_duration"] = variants[v].K;
      std::vector<std::string> dirs;
      for (size_t s = 0; s < seeds.size(); ++s) dirs.push_back(job_of(v, s).cfg.train_run_dir);
      r["run_dirs"] = dirs;
      if (!fps[v].values.empty()) r["train_frames_per_sec"] = fps[v].to_json();
      for (const char* split : kSplits) {
        const auto sp = sums[v].find(split);
        if (sp == sums[v].end()) continue;  // an empty split: its metrics are left out, never NaN
        for (const auto& [k, sum] : sp->second) r[split][k] = sum.to_json();
      }
      j["runs"][variants[v].name] = r;
    }
    for (const auto& [split, m] : tests)
      for (const auto& [k, t] : m) j["significance"][split][k] = report::to_json(t);
    write_file_atomic(a.json_out, j.dump(2) + "\n");
    spdlog::info("compare: table written to {}", a.json_out);
  }
}

}  // namespace

void add_compare_command(CLI::App& app) {
  auto a = std::make_shared<CompareArgs>();
  CLI::App* c = app.add_subcommand(
      "compare",
      "Train the linear CRF (crf.max_duration=1) and the semi-CRF (K from the config) with the same encoder, data, "
      "seed(s) and schedule into TRAIN.RUN_DIR/linear and TRAIN.RUN_DIR/semicrf, evaluate both (best checkpoint) on "
      "dev and core-test and print one table: PER, boundary F1 at 0/1/2 frames (and P/R/F1/R-value at 20 ms), "
      "segment F1, duration mean absolute error and KL, frame accuracy, forced alignment of the reference phones "
      "(fraction of boundaries within 10/20/25/50 ms, mean and median error; docs/align.md), training frames/s, "
      "decode time; then the "
      "semi-CRF minus linear CRF differences paired by seed with a t-test and a sign test, and "
      "TRAIN.RUN_DIR/report.html overlaying every run. A run folder is reused only when its saved config equals "
      "the requested one (resumed when unfinished); otherwise compare names the keys that differ and stops "
      "(docs/training.md)");
  c->add_option("--config", a->config, "YAML config file, as for train (train.run_dir is the parent of the runs)")
      ->required();
  c->add_option("--set", a->sets,
                "Override one config key for both runs, KEY=VALUE with VALUE in YAML syntax (repeatable)");
  c->add_option("--json", a->json_out,
                "Also write the table as JSON (atomically): runs.{linear,semicrf}.{dev,core-test}.METRIC and "
                "train_frames_per_sec, each {mean, n, values, std (2 seeds or more)}; significance.SPLIT.METRIC "
                "{n, mean_difference, std, t_test {t, df, p}, sign_test {positive, negative, zero, p}}; jobs, "
                "train_wall_seconds, report; metrics of an empty split are left out");
  c->add_option("--seeds", a->seeds,
                "Train every model with several seeds and show mean ± std: N (train.seed, train.seed+1, ...) or a "
                "list 1,2,3; the runs go into TRAIN.RUN_DIR/seed-S/{linear,semicrf}. Default: one run per model "
                "with train.seed (the table says '1 seed')");
  c->add_flag("--force", a->force,
              "Train afresh every run whose folder holds a run of another configuration (without it compare stops "
              "and names the keys that differ); the old folder moves to RUN.replaced and is deleted once the new "
              "run has finished its first epoch, or moved back if the new run fails before that");
  c->add_option("--jobs", a->jobs,
                "Runs trained at once, in this one process (one thread and one CUDA stream each). 0 = the default: "
                "on the GPU as many as fill its SMs (a fused run occupies ceil(batch/8)*2*4 SMs at H=128) and fit "
                "in free GPU memory (one run's use measured first); 1 on the CPU, where concurrent runs share one "
                "thread pool. Results do not depend on it")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  c->callback([a] { run_compare(*a); });
}

}  // namespace timitseg::app
