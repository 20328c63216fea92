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

#include "app/cmd_compare.h"
#include "app/commands.h"
#include "app/enum_flags.h"
#include "common/files.h"
#include "app/report/report.h"
#include "app/report/significance.h"
#include "common/atomic_file.h"
#include "common/cuda.h"
#include "common/progress.h"
#include "common/run_lock.h"
#include "common/walk.h"
#include "model/checkpoint.h"
#include "config/config.h"
#include "options/device_choice.h"
#include "model/executor.h"
#include "options/options.h"
#include "model/feature_check.h"
#include "train/interrupt.h"
#include "eval/metrics.h"
#include "model/params.h"
#include "train/run_folder.h"
#include "train/train.h"

namespace fs = std::filesystem;

namespace timitseg::app {

namespace {

struct CompareArgs {
  std::string config;
  std::vector<std::string> sets;
  std::string json_out;
  std::string seeds;  // "" = train.seed; "N" = N seeds from train.seed; "1,2,3" = these
  bool force = false;  // --force: retrain runs whose folder holds another configuration
  int jobs = 0;        // --jobs: runs at once (0: the default of default_jobs, cmd_compare_jobs.cpp)
  std::string device;  // --device: train.device for every run ("" = the config's)
};

// --set KEY=VALUE of every run, --device as train.device=NAME last.
std::vector<std::string> config_sets(const CompareArgs& a) {
  std::vector<std::string> sets = a.sets;
  if (!a.device.empty()) sets.push_back("train.device=" + a.device);
  return sets;
}

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

// Keys that change how a run is logged, checked or kept, never what it
// computes: a run folder whose saved config differs from the requested one
// only in these is still the same run. train.run_dir is where the folder is
// (a moved folder holds the same run).
const char* kIgnoredKeys[] = {"train.run_dir",        "train.log_every",      "train.threads",
                              "train.keep_checkpoints", "debug.drift_threshold", "debug.check_numerics"};

// Every key (section.key) whose value differs between the run's saved config
// and the requested one, as "key: old -> new".
// train.device, train.rnn_algo and crf.backend are compared resolved on this
// machine (options/device_choice.h): `auto` stands for its pick here, so a run
// saved with `auto` and a request for `cpu` on the CPU (or the reverse) are the
// same run; an explicit value that differs from the pick is a difference.
std::vector<std::string> differences(const config::Config& saved_as_is, const config::Config& requested) {
  const options::DeviceFacts facts = options::probe_device_facts();
  // a saved run whose data.workdir is relative: the path is taken from here, as
  // the requested one was
  config::Config saved = saved_as_is;
  if (!saved.data_workdir.empty() && fs::path(saved.data_workdir).is_relative()) {
    fs::path abs = fs::absolute(saved.data_workdir).lexically_normal();
    if (!abs.has_filename()) abs = abs.parent_path();
    saved.data_workdir = abs.string();
  }
  nlohmann::json ja = options::with_choices(saved, facts).to_json();
  nlohmann::json jb = options::with_choices(requested, facts).to_json();
  std::vector<std::string> out;
  for (const std::string& k : config::Config::keys()) {
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
  config::Config cfg;
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
  const std::string ckpt = train::latest_checkpoint(dir);
  if (ckpt.empty()) {
    try {
      train::check_fresh_run_dir(dir);
      job.action = Job::Action::fresh;
    } catch (const std::exception& e) {
      if (!force) return e.what();
      job.action = Job::Action::replace;
      job.why = "metrics.jsonl without checkpoints";
    }
    return "";
  }
  // The requested config as train() would save it (the documentation test's epoch cap applied).
  config::Config requested = job.cfg;
  config::apply_doctest_limits(requested);
  const model::ModelState s = model::load_checkpoint(ckpt);
  std::vector<std::string> diff = differences(s.config, requested);
  // The same data.workdir path may hold features prepared anew with other options.
  if (const auto fd = model::feature_option_differences(s.features, data::load_feature_options(requested.data_workdir));
      !fd.empty())
    diff.push_back("trained on " + model::describe_feature_options(s.features, fd) + ", " + requested.data_workdir +
                   " holds " + model::describe_feature_options(data::load_feature_options(requested.data_workdir), fd));
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
void execute(const Job& job, const train::TrainData& data) {
  const config::Config& cfg = job.cfg;
  const std::string& dir = cfg.train_run_dir;
  switch (job.action) {
    case Job::Action::reuse:
      return;
    case Job::Action::fresh:
      spdlog::info("compare: training {} (K={}, seed {})", dir, cfg.crf_max_duration, cfg.train_seed);
      train::train(cfg, data, false, train_report_refresher(data, cfg.train_threads));
      return;
    case Job::Action::resume: {
      const model::ModelState s = model::load_checkpoint(train::latest_checkpoint(dir));
      spdlog::info("compare: {} stopped after epoch {}/{}: resuming", dir, s.epoch, cfg.train_epochs);
      train::train(cfg, data, true, train_report_refresher(data, cfg.train_threads));
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
      train::AfterEpoch report = train_report_refresher(data, cfg.train_threads);
      auto after = [&](const train::EpochEnd& e) {
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
        train::train(cfg, data, false, after);
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
void train_all(std::vector<Job>& all, const train::TrainData& data, int jobs) {
  std::vector<Job*> todo;
  for (Job& j : all)
    if (j.action != Job::Action::reuse) todo.push_back(&j);
  auto run_one = [&](Job& j) {
    if (train::stop_requested()) {
      j.interrupted = true;
      j.interrupt_code = train::stop_signal() > 0 ? 128 + train::stop_signal() : 1;
      j.error = "not started (interrupted)";
      return;
    }
    try {
      execute(j, data);
    } catch (const train::Interrupted& e) {
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
  train::prepare_concurrent_logging();
  Progress::set_enabled(false);
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < jobs && w < static_cast<int>(todo.size()); ++w)
    workers.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < todo.size();) {
        train::LogTag tag(todo[i]->name);
        run_one(*todo[i]);
      }
    });
  for (std::thread& t : workers) t.join();
}

// The jobs of the comparison, jobs[s * variants + v]: seed s, variant v (the training order of --jobs 1).
std::vector<Job> make_jobs(const CompareArgs& a, const config::Config& base, const std::vector<uint64_t>& seeds,
                           const std::vector<compare::Variant>& variants, bool seed_dirs) {
  std::vector<Job> jobs;
  for (uint64_t seed : seeds)
    for (const compare::Variant& var : variants) {
      std::vector<std::string> sets = config_sets(a);
      const fs::path dir = seed_dirs ? fs::path(base.train_run_dir) / ("seed-" + std::to_string(seed)) / var.name
                                     : fs::path(base.train_run_dir) / var.name;
      sets.push_back("crf.max_duration=" + std::to_string(var.K));
      sets.push_back("train.seed=" + std::to_string(seed));
      sets.push_back("train.run_dir=\"" + dir.string() + "\"");
      Job j;
      j.cfg = config::Config::load(a.config, sets);
      j.name = seed_dirs ? "seed-" + std::to_string(seed) + "/" + var.name : var.name;
      jobs.push_back(std::move(j));
    }
  return jobs;
}

// What to do with every folder (plan), checked before anything is trained: one error line for all conflicts.
void check_conflicts(std::vector<Job>& jobs, bool force) {
  std::vector<std::string> conflicts;
  for (Job& j : jobs) {
    const std::string c = plan(j, force);
    if (!c.empty()) conflicts.push_back(c);
  }
  if (!conflicts.empty())
    throw std::runtime_error(
        "compare: " + std::string(conflicts.size() == 1 ? "a run folder holds" : "run folders hold") +
        " a run of another configuration, which compare never extends or mixes: " + join(conflicts, "; ") +
        ". Run again with --force to train " + (conflicts.size() == 1 ? "it" : "them") +
        " afresh (the old run is deleted once the new one has finished its first epoch), or choose another "
        "train.run_dir");
}

// The training part of compare: how many runs trained, how many at a time, how long.
struct TrainingDone {
  int to_train = 0, jobs_used = 1;
  double wall_seconds = 0;
};

// Trains the jobs that are not reused (--jobs at a time); one error naming every run that did not finish.
TrainingDone train_jobs(std::vector<Job>& jobs, const config::Config& base, model::Device device, int jobs_arg) {
  TrainingDone done;
  int& to_train = done.to_train;
  int& jobs_used = done.jobs_used;
  double& train_wall = done.wall_seconds;
  for (const Job& j : jobs) to_train += j.action != Job::Action::reuse;

  if (to_train > 0) {
    const train::TrainData data = train::load_train_data(base);
    jobs_used = jobs_arg > 0 ? jobs_arg : compare::default_jobs(device, base, data, to_train);
    jobs_used = std::max(1, std::min(jobs_used, to_train));
    spdlog::info("compare: training {} of {} runs, {} at a time on {}{}", to_train, jobs.size(), jobs_used,
                 model::device_name(device), device == model::Device::cpu && jobs_used > 1 ? " (their parallel sections share one thread pool)" : "");
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
      if (interrupt_code) throw train::Interrupted(msg, interrupt_code);
      throw std::runtime_error(msg);
    }
    spdlog::info("compare: trained {} runs in {:.1f} s, {} at a time", to_train, train_wall, jobs_used);
  }
  return done;
}

// The driver: the jobs (one per variant and seed), their folders checked,
// the training, then evaluation, table, overlay report and JSON (app/cmd_compare_results.cpp).
void run_compare(const CompareArgs& a) {
  if (a.config.empty()) throw std::invalid_argument("compare: --config FILE.yaml is required");
  const config::Config base = config::Config::load(a.config, config_sets(a));
  if (base.train_run_dir.empty()) throw std::invalid_argument(a.config + ": train.run_dir is required (the runs go "
                                                               "into RUN_DIR/linear and RUN_DIR/semicrf)");
  if (base.data_workdir.empty()) throw std::invalid_argument(a.config + ": data.workdir is required");
  const std::vector<uint64_t> seeds = parse_seeds(a.seeds, base.train_seed);
  if (!a.json_out.empty()) check_output_file("--json", a.json_out, "compare.json");
  const int K = base.crf_max_duration;
  if (K == 1) spdlog::warn("compare: crf.max_duration is 1 in {}: the semi-CRF run is a linear CRF too", a.config);
  // no GPU for train.device=cuda: one line, before anything is written
  const model::Device device = model::resolve_device(base.train_device);
  train::install_stop_handlers();

  const std::vector<compare::Variant> variants = {{"linear", "linear CRF (K=1)", 1},
                                                  {"semicrf", "semi-CRF (K=" + std::to_string(K) + ")", K}};
  const bool seed_dirs = !(seeds.size() == 1 && a.seeds.empty());
  // one writer per run folder (common/run_lock.h): compare holds the parent of its runs, train() each run's
  InputSet inputs;
  inputs.add(base.data_workdir);
  refuse_output("train.run_dir", base.train_run_dir, inputs, "data.workdir, the prepared data");
  const RunLock lock(base.train_run_dir, "train.run_dir");
  std::vector<Job> jobs = make_jobs(a, base, seeds, variants, seed_dirs);
  check_conflicts(jobs, a.force);
  const TrainingDone done = train_jobs(jobs, base, device, a.jobs);
  std::vector<std::vector<config::Config>> cfgs(variants.size());  // [v][s]
  for (size_t v = 0; v < variants.size(); ++v)
    for (size_t s = 0; s < seeds.size(); ++s) cfgs[v].push_back(jobs[s * variants.size() + v].cfg);

  compare::CompareResults res = compare::collect_results(base, variants, cfgs);
  const std::string seeds_text =
      seeds.size() == 1 ? "1 seed (" + std::to_string(seeds[0]) + "): a single run, no spread; use --seeds N"
                        : std::to_string(seeds.size()) + " seeds, mean ± std";
  std::ostringstream title;
  title << "compare: " << variants[0].title << " vs " << variants[1].title << ", " << base.train_epochs
        << " epochs, " << seeds_text << "\n";
  std::vector<std::vector<std::string>> sig_rows;
  std::vector<std::string> cols;
  std::ostringstream os;
  os << compare::compare_table(res, variants, seeds.size(), title.str(), &sig_rows, &cols);
  char buf[512];
  const int to_train = done.to_train, jobs_used = done.jobs_used;
  const double train_wall = done.wall_seconds;
  os << "\nrun folders: " << (fs::path(base.train_run_dir) / "{linear,semicrf}").string()
     << (seed_dirs ? " under seed-S/" : "") << "\n";
  if (to_train > 0) {
    std::snprintf(buf, sizeof buf, "training wall time: %.1f s for %d run(s), %d at a time (--jobs %d)\n", train_wall,
                  to_train, jobs_used, jobs_used);
    os << buf;
  } else {
    os << "training wall time: 0 s (every run reused)\n";
  }

  const std::string report_path = compare::write_compare_report(res, base, variants, seeds_text, cols, sig_rows);
  os << "report: " << report_path << "\n";
  std::printf("%s", os.str().c_str());
  std::fflush(stdout);
  if (!a.json_out.empty()) {
    compare::CompareJsonInfo info;
    info.config = a.config;
    info.report_path = report_path;
    info.epochs = base.train_epochs;
    info.jobs = jobs_used;
    info.runs_trained = to_train;
    info.train_wall_seconds = train_wall;
    info.seeds = seeds;
    compare::write_compare_json(a.json_out, res, variants, cfgs, info);
  }
}
}  // namespace

void add_compare_command(CLI::App& app) {
  auto a = std::make_shared<CompareArgs>();
  CLI::App* c = app.add_subcommand(
      "compare",
      "Train the linear CRF (crf.max_duration=1) and the semi-CRF (K from the config) with the same encoder, data, "
      "seed(s) and schedule into TRAIN.RUN_DIR/linear and TRAIN.RUN_DIR/semicrf, evaluate both (best checkpoint) on "
      "dev and core-test (dev and test on a WORKDIR without core-test: other corpora) and print one table: PER, boundary F1 at 0/1/2 frames (and P/R/F1/R-value at 20 ms), "
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
                "Also write the table as JSON (atomically): runs.{linear,semicrf}.{dev,core-test or test}.METRIC and "
                "train_frames_per_sec, each {mean, n, values, std (2 seeds or more)}; significance.SPLIT.METRIC "
                "{n, mean_difference, std, t_test {t, df, p}, sign_test {positive, negative, zero, p}}; jobs, "
                "train_wall_seconds, report; metrics of an empty split are left out");
  c->add_option("--seeds", a->seeds,
                "Train every model with several seeds and show mean ± std: N (train.seed, train.seed+1, ...) or a "
                "list 1,2,3; the runs go into TRAIN.RUN_DIR/seed-S/{linear,semicrf}. Default: one run per model "
                "with train.seed (the table says '1 seed')");
  c->add_option("--device", a->device,
                "Same as --set train.device=NAME for every run (training and evaluation): cpu, cuda, or auto (cuda "
                "when a GPU is present)")
      ->check(enum_words<config::DeviceSetting>());
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
