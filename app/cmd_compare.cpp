// `timitseg compare`: the linear CRF (crf.max_duration = 1) against the
// semi-CRF (K from the config), trained with the same encoder, data, seed(s)
// and schedule, each in its own run folder under train.run_dir, evaluated on
// dev and core-test, printed as one table (docs/training.md "Comparing the
// linear CRF and the semi-CRF").
#include <spdlog/spdlog.h>

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
#include <vector>

#include "app/commands.h"
#include "common/atomic_file.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/executor.h"
#include "model/interrupt.h"
#include "model/metrics.h"
#include "model/train.h"

namespace fs = std::filesystem;

namespace timitseg::app {

namespace {

struct CompareArgs {
  std::string config;
  std::vector<std::string> sets;
  std::string json_out;
  std::string seeds;  // "" = train.seed; "N" = N seeds from train.seed; "1,2,3" = these
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
    {"segment_f1", "segment F1 %", 100, "%.2f"},
    {"duration_mae", "duration MAE (frames)", 1, "%.3f"},
    {"duration_kl", "duration KL", 1, "%.4f"},
    {"frame_accuracy", "frame accuracy %", 100, "%.2f"},
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

// The first key (section.key) whose value differs between two configs, ignoring
// the keys that may change on --resume; "" when none.
std::string first_difference(const model::Config& a, const model::Config& b) {
  nlohmann::json ja = a.to_json(), jb = b.to_json();
  for (const std::string& k : model::Config::keys()) {
    bool skip = false;
    for (const std::string& r : model::Config::resumable_keys()) skip |= r == k;
    if (skip) continue;
    const std::string sec = k.substr(0, k.find('.')), key = k.substr(k.find('.') + 1);
    const nlohmann::json va = ja.contains(sec) && ja[sec].contains(key) ? ja[sec][key] : nlohmann::json();
    const nlohmann::json vb = jb.contains(sec) && jb[sec].contains(key) ? jb[sec][key] : nlohmann::json();
    if (va != vb) return k + " (" + va.dump() + " in the run, " + vb.dump() + " now)";
  }
  return "";
}

// Trains, resumes or reuses the run of cfg (cfg.train_run_dir).
void ensure_trained(const model::Config& cfg, const std::function<const model::TrainData&()>& data) {
  const std::string ckpt = model::latest_checkpoint(cfg.train_run_dir);
  if (ckpt.empty()) {
    model::check_fresh_run_dir(cfg.train_run_dir);
    spdlog::info("compare: training {} (K={}, seed {})", cfg.train_run_dir, cfg.crf_max_duration, cfg.train_seed);
    model::train(cfg, data(), false);
    return;
  }
  const model::ModelState s = model::load_checkpoint(ckpt);
  const std::string diff = first_difference(s.config, cfg);
  if (!diff.empty())
    throw std::runtime_error(cfg.train_run_dir + " holds a run with another configuration: " + diff +
                             "; choose another train.run_dir (or delete the folder) to compare with this one");
  if (s.epoch >= cfg.train_epochs) {
    spdlog::info("compare: {} is finished (epoch {}/{}): reused", cfg.train_run_dir, s.epoch, cfg.train_epochs);
    return;
  }
  spdlog::info("compare: {} stopped after epoch {}/{}: resuming", cfg.train_run_dir, s.epoch, cfg.train_epochs);
  model::train(cfg, data(), true);
}

// Evaluates the run's best checkpoint (the last epoch when there is no best: no dev split) on dev and core-test.
RunNumbers evaluate_run(const model::Config& cfg, const std::map<std::string, data::Split>& splits) {
  const fs::path ckpt_dir = fs::path(cfg.train_run_dir) / "checkpoints";
  std::string ckpt = (ckpt_dir / "best.safetensors").string();
  if (!fs::exists(ckpt)) ckpt = model::latest_checkpoint(cfg.train_run_dir);
  if (ckpt.empty()) throw std::runtime_error(cfg.train_run_dir + ": no checkpoint to evaluate");
  const model::ModelState s = model::load_checkpoint(ckpt);
  const std::string device = model::resolve_device(cfg.train_device);
  model::ExecutorOptions xo;
  xo.threads = model::set_threads(cfg.train_threads);
  xo.rnn_algo = cfg.train_rnn_algo;
  // as evaluate: the GPU decodes with the cuda backend, the CPU with the run's host backend
  xo.crf_backend = device == "cuda" ? "cuda" : (cfg.crf_backend == "cuda" ? "cpu" : cfg.crf_backend);
  xo.phone_bonus = s.config.crf_phone_bonus;
  xo.decode = s.config.crf_decode;
  std::unique_ptr<model::Executor> exec = model::make_executor(device, s.dims, xo);
  exec->set_state(s.params, s.optimizer);
  RunNumbers out;
  out.train_frames_per_sec = mean_train_fps(cfg.train_run_dir);
  for (const auto& [name, split] : splits) {
    if (split.utterances.empty()) continue;  // n/a
    std::vector<const data::Utterance*> utts;
    for (const auto& u : split.utterances) utts.push_back(&u);
    model::Metrics m(s.labels.names39);
    const auto t0 = std::chrono::steady_clock::now();
    model::evaluate_utterances(*exec, utts, s.has_cmvn ? &s.cmvn : nullptr, s.labels, cfg.train_batch_size, m);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const nlohmann::json j = m.to_json();
    auto& v = out.splits[name];
    v["per"] = m.per();
    for (int tol = 0; tol <= 2; ++tol) v["boundary_f1_tol" + std::to_string(tol)] = m.boundary(tol).f1();
    v["segment_f1"] = m.segment().f1();
    v["duration_mae"] = j.at("duration_mean_mae").get<double>();
    v["duration_kl"] = j.at("duration_kl").get<double>();
    v["frame_accuracy"] = m.frame_accuracy();
    v["decode_seconds"] = secs;
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
  if (!a.json_out.empty()) {
    const fs::path dir = fs::path(a.json_out).parent_path();
    std::error_code ec;
    if (!dir.empty() && !fs::is_directory(dir, ec))
      throw std::invalid_argument("--json " + a.json_out + ": folder " + dir.string() + " does not exist");
  }
  const int K = base.crf_max_duration;
  if (K == 1) spdlog::warn("compare: crf.max_duration is 1 in {}: the semi-CRF run is a linear CRF too", a.config);
  model::resolve_device(base.train_device);  // no GPU for train.device=cuda: one line, before anything is written
  model::install_stop_handlers();

  struct Variant {
    std::string name, title;
    int K;
  };
  const std::vector<Variant> variants = {{"linear", "linear CRF (K=1)", 1},
                                         {"semicrf", "semi-CRF (K=" + std::to_string(K) + ")", K}};
  // configs[v][s]: variant v, seed s
  std::vector<std::vector<model::Config>> configs(variants.size());
  for (size_t v = 0; v < variants.size(); ++v)
    for (uint64_t seed : seeds) {
      std::vector<std::string> sets = a.sets;
      const fs::path dir = seeds.size() == 1 && a.seeds.empty()
                               ? fs::path(base.train_run_dir) / variants[v].name
                               : fs::path(base.train_run_dir) / ("seed-" + std::to_string(seed)) / variants[v].name;
      sets.push_back("crf.max_duration=" + std::to_string(variants[v].K));
      sets.push_back("train.seed=" + std::to_string(seed));
      sets.push_back("train.run_dir=\"" + dir.string() + "\"");
      configs[v].push_back(model::Config::load(a.config, sets));
    }

  std::optional<model::TrainData> data;
  auto get_data = [&]() -> const model::TrainData& {
    if (!data) data = model::load_train_data(base);
    return *data;
  };
  for (size_t s = 0; s < seeds.size(); ++s)
    for (size_t v = 0; v < variants.size(); ++v) ensure_trained(configs[v][s], get_data);

  std::map<std::string, data::Split> splits;
  for (const char* name : kSplits) splits[name] = data::load_split(base.data_workdir, name);

  // summaries[v][split][key]
  std::vector<std::map<std::string, std::map<std::string, Summary>>> sums(variants.size());
  std::vector<Summary> fps(variants.size());
  for (size_t v = 0; v < variants.size(); ++v)
    for (size_t s = 0; s < seeds.size(); ++s) {
      const RunNumbers r = evaluate_run(configs[v][s], splits);
      for (const auto& [split, vals] : r.splits)
        for (const auto& [k, x] : vals) sums[v][split][k].values.push_back(x);
      if (!std::isnan(r.train_frames_per_sec)) fps[v].values.push_back(r.train_frames_per_sec);
    }

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
  std::snprintf(buf, sizeof buf, "%-24s", "metric");
  os << buf;
  for (const std::string& c : cols) {
    std::snprintf(buf, sizeof buf, " %20s", c.c_str());
    os << buf;
  }
  os << "\n";
  for (const MetricRow& row : kRows) {
    std::snprintf(buf, sizeof buf, "%-24s", row.label);
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
  std::snprintf(buf, sizeof buf, "%-24s", "train frames/s");
  os << buf;
  for (size_t i = 0; i < std::size(kSplits); ++i)
    for (size_t v = 0; v < variants.size(); ++v) {
      std::snprintf(buf, sizeof buf, " %20s", fps[v].text(1, "%.0f").c_str());
      os << buf;
    }
  os << "\nrun folders: " << (fs::path(base.train_run_dir) / "{linear,semicrf}").string()
     << (seeds.size() > 1 || !a.seeds.empty() ? " under seed-S/" : "") << "\n";
  std::printf("%s", os.str().c_str());
  std::fflush(stdout);

  // ---- JSON ---------------------------------------------------------------------
  if (!a.json_out.empty()) {
    nlohmann::json j;
    j["config"] = a.config;
    j["epochs"] = base.train_epochs;
    j["seeds"] = seeds;
    for (size_t v = 0; v < variants.size(); ++v) {
      nlohmann::json r;
      r["title"] = variants[v].title;
      r["max_duration"] = variants[v].K;
      std::vector<std::string> dirs;
      for (const model::Config& c : configs[v]) dirs.push_back(c.train_run_dir);
      r["run_dirs"] = dirs;
      if (!fps[v].values.empty()) r["train_frames_per_sec"] = fps[v].to_json();
      for (const char* split : kSplits) {
        const auto sp = sums[v].find(split);
        if (sp == sums[v].end()) continue;  // an empty split: its metrics are left out, never NaN
        for (const auto& [k, sum] : sp->second) r[split][k] = sum.to_json();
      }
      j["runs"][variants[v].name] = r;
    }
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
      "dev and core-test and print one table: PER, boundary F1 at 0/1/2 frames, segment F1, duration mean absolute "
      "error and KL, frame accuracy, training frames/s, decode time. Running it again resumes unfinished runs and "
      "reuses finished ones (docs/training.md)");
  c->add_option("--config", a->config, "YAML config file, as for train (train.run_dir is the parent of the runs)")
      ->required();
  c->add_option("--set", a->sets,
                "Override one config key for both runs, KEY=VALUE with VALUE in YAML syntax (repeatable)");
  c->add_option("--json", a->json_out,
                "Also write the table as JSON (atomically): runs.{linear,semicrf}.{dev,core-test}.METRIC and "
                "train_frames_per_sec, each {mean, n, values, std (2 seeds or more)}; metrics of an empty split are "
                "left out");
  c->add_option("--seeds", a->seeds,
                "Train every model with several seeds and show mean ± std: N (train.seed, train.seed+1, ...) or a "
                "list 1,2,3; the runs go into TRAIN.RUN_DIR/seed-S/{linear,semicrf}. Default: one run per model "
                "with train.seed (the table says '1 seed')");
  c->callback([a] { run_compare(*a); });
}

}  // namespace timitseg::app
