// `timitseg compare`: the runs evaluated (best checkpoint, dev and
// core-test), summed up over seeds, the paired significance of the
// differences, the table, the overlay report and the JSON (app/cmd_compare.h).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>

#include "app/cmd_compare.h"
#include "common/atomic_file.h"
#include "common/interrupt.h"
#include "common/run_lock.h"
#include "eval/align_metrics.h"
#include "eval/evaluate.h"
#include "model/checkpoint.h"
#include "model/make_executor.h"
#include "options/device_choice.h"
#include "model/executor.h"
#include "options/options.h"
#include "model/feature_check.h"
#include "train/run_folder.h"
#include "train/train.h"

namespace fs = std::filesystem;

namespace timitseg::app::compare {

namespace {

// The sample-accurate alignment scores and the confidences' AUROCs of an
// align_utterances JSON (eval/align_metrics.cpp), where present.
void add_sample_and_confidence_rows(const nlohmann::json& al, std::map<std::string, double>& v) {
  auto number = [](const nlohmann::json& j, const char* k) { return j.contains(k) && j[k].is_number(); };
  if (al.contains("samples") && al["samples"].contains("within_ms")) {
    const nlohmann::json& sm = al["samples"];
    for (const char* tol : {"10", "20", "25", "50"})
      if (number(sm["within_ms"], tol)) v[std::string("align_samples_within_") + tol + "ms"] = sm["within_ms"][tol];
    if (number(sm, "mean_abs_ms")) v["align_samples_mean_abs_ms"] = sm["mean_abs_ms"];
  }
  if (!al.contains("confidence")) return;
  const nlohmann::json& c = al["confidence"];
  if (c.contains("boundary_confidence") && number(c["boundary_confidence"], "auroc_off_20ms"))
    v["boundary_confidence_auroc"] = c["boundary_confidence"]["auroc_off_20ms"];
  if (c.contains("label_confidence") && number(c["label_confidence"], "auroc_replaced"))
    v["label_confidence_auroc"] = c["label_confidence"]["auroc_replaced"];
}

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

// Evaluates the run's best checkpoint (the last epoch when there is no best: no dev split) on dev and core-test;
// *dev_report: the dev split's decoded labels for the report; *scoring_names (optional): the run's phone names.
RunNumbers evaluate_run(const config::Config& cfg, const std::map<std::string, data::Split>& splits,
                        report::RunReport* dev_report, std::vector<std::string>* scoring_names) {
  const fs::path ckpt_dir = fs::path(cfg.train_run_dir) / "checkpoints";
  std::string ckpt = (ckpt_dir / "best.safetensors").string();
  if (!fs::exists(ckpt)) ckpt = train::latest_checkpoint(cfg.train_run_dir);
  if (ckpt.empty()) throw std::runtime_error(cfg.train_run_dir + ": no checkpoint to evaluate");
  model::ModelState s = model::load_checkpoint(ckpt);
  model::check_workdir_features(s, ckpt, cfg.data_workdir);  // plan() already refused it, unless the WORKDIR changed since
  model::bind_workdir(s.labels, cfg.data_workdir, ckpt);  // the checkpoint's phone set over the WORKDIR's labels
  const options::DeviceChoice choice = options::resolve_choices(cfg, /*log=*/false);
  // as evaluate (options/options.h): the GPU decodes with the cuda backend, the CPU with the run's host backend
  const model::ExecutorOptions executor_opts =
      options::inference_executor_options(s.config, choice, model::set_threads(cfg.train_threads));
  std::unique_ptr<model::Executor> exec = model::make_executor(choice.device, s.dims, executor_opts);
  exec->set_state(s.params, s.optimizer);
  RunNumbers out;
  out.train_frames_per_sec = mean_train_fps(cfg.train_run_dir);
  if (scoring_names) *scoring_names = s.labels.scoring_names;
  dev_report->run_dir = cfg.train_run_dir;
  dev_report->has_predictions = false;
  dev_report->predictions_note = "no dev split";
  const data::Cmvn checkpoint_cmvn = s.cmvn;
  for (const auto& [name, split] : splits) {
    if (split.utterances.empty()) continue;  // n/a
    std::vector<const data::Utterance*> utts;
    for (const auto& u : split.utterances) utts.push_back(&u);
    eval::Metrics m(s.labels.scoring_names);
    std::vector<std::pair<const data::Utterance*, std::vector<crf::Segment>>> decoded;
    eval::UtteranceHook keep;
    if (name == "dev")
      keep = [&decoded](const data::Utterance& u, const model::Batch&, int, const std::vector<float>*,
                        const std::vector<crf::Segment>& segs) { decoded.emplace_back(&u, segs); };
    const auto t0 = std::chrono::steady_clock::now();
    s.cmvn = checkpoint_cmvn.with_speakers(utts);  // data.cmvn speaker: this split's speakers
    eval::evaluate_utterances(*exec, utts, s.has_cmvn ? &s.cmvn : nullptr, s.labels, cfg.train_batch_size, m, keep);
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
    if (j.contains("boundary_20ms_lenient"))  // the lenient rule (SegFeat/UnsupSeg; docs/metrics.md)
      for (const char* k : {"f1", "r_value"})
        v[std::string("boundary_20ms_lenient_") + k] = j["boundary_20ms_lenient"][k].get<double>();
    v["segment_f1"] = m.segment().f1();
    v["duration_mae"] = j.at("duration_mean_mae").get<double>();
    v["duration_kl"] = j.at("duration_kl").get<double>();
    v["frame_accuracy"] = m.frame_accuracy();
    v["decode_seconds"] = secs;
    // Forced alignment of the split's reference phone sequences (the field's metric; docs/align.md).
    const nlohmann::json al = eval::align_utterances(*exec, utts, s, cfg.train_batch_size).to_json();
    if (al.contains("within_ms")) {
      for (const char* tol : {"10", "20", "25", "50"})
        v[std::string("align_within_") + tol + "ms"] = al["within_ms"][tol].get<double>();
      v["align_mean_abs_ms"] = al["mean_abs_ms"].get<double>();
      v["align_median_abs_ms"] = al["median_abs_ms"].get<double>();
    }
    add_sample_and_confidence_rows(al, v);
    spdlog::info("compare: {} on {}: PER {:.2f}%, {} utterances decoded in {:.2f} s ({})", ckpt, name, 100 * m.per(),
                 utts.size(), secs, exec->description());
  }
  return out;
}

// [split][key]: variant b minus variant a, paired by seed (the seeds where both runs have the metric).
std::map<std::string, std::map<std::string, report::PairedTest>> paired_tests(const CompareResults& res, size_t a,
                                                                              size_t b) {
  std::map<std::string, std::map<std::string, report::PairedTest>> out;
  const auto& numbers = res.numbers;  // [v][s]
  for (const std::string& split : res.split_names)
    for (const MetricRow& row : kRows) {
      if (std::string(row.key) == "decode_seconds") continue;  // a time, not a result
      std::vector<double> xa, xb;
      for (size_t s = 0; s < numbers[a].size(); ++s) {
        const auto ia = numbers[a][s].splits.find(split), ib = numbers[b][s].splits.find(split);
        if (ia == numbers[a][s].splits.end() || ib == numbers[b][s].splits.end()) continue;
        if (!ia->second.count(row.key) || !ib->second.count(row.key)) continue;
        xa.push_back(ia->second.at(row.key));
        xb.push_back(ib->second.at(row.key));
      }
      if (!xa.empty()) out[split][row.key] = report::paired_test(xa, xb);
    }
  return out;
}

}  // namespace

bool CompareResults::present(const MetricRow& row) const {
  for (size_t v = 0; v < sums.size(); ++v)
    for (const auto& [split, m] : sums[v])
      if (m.count(row.key)) return true;
  return false;
}

CompareResults collect_results(const config::Config& base, const std::vector<Variant>& variants,
                               const std::vector<std::vector<config::Config>>& cfgs) {
  const size_t num_seeds = cfgs.at(0).size();
  CompareResults res;
  std::map<std::string, data::Split>& splits = res.splits;
  for (const char* name : kSplits) splits[name] = data::load_split(base.data_workdir, name);
  res.split_names.assign(std::begin(kSplits), std::end(kSplits));
  if (splits["core-test"].utterances.empty()) {  // another corpus (prepare --corpus): its test split
    splits.erase("core-test");
    res.split_names.assign(std::begin(kSplitsWithoutCoreTest), std::end(kSplitsWithoutCoreTest));
    splits["test"] = data::load_split(base.data_workdir, "test");
  }
  // numbers[v][s]; the report's runs in the same order
  res.numbers.assign(variants.size(), std::vector<RunNumbers>(num_seeds));
  auto& numbers = res.numbers;
  report::ReportInput& overlay = res.overlay;
  for (size_t s = 0; s < num_seeds; ++s)
    for (size_t v = 0; v < variants.size(); ++v) {
      // SIGINT/SIGTERM: stop before the next run's evaluation (the trained runs stay and are reused)
      const size_t evaluated = s * variants.size() + v;
      throw_if_stopped("compare", "every run trained (under " + base.train_run_dir + "), " + std::to_string(evaluated) +
                                      " of " + std::to_string(num_seeds * variants.size()) +
                                      " evaluated, no table, report or JSON written; run the same command again "
                                      "(the finished runs are reused)");
      report::RunReport rr;
      numbers[v][s] = evaluate_run(cfgs[v][s], splits, &rr, overlay.scoring_names.empty() ? &overlay.scoring_names : nullptr);
      overlay.runs.push_back(std::move(rr));
    }
  res.sums.resize(variants.size());
  res.fps.resize(variants.size());
  auto& sums = res.sums;
  auto& fps = res.fps;
  for (size_t v = 0; v < variants.size(); ++v)
    for (size_t s = 0; s < num_seeds; ++s) {
      const RunNumbers& r = numbers[v][s];
      for (const auto& [split, vals] : r.splits)
        for (const auto& [k, x] : vals) sums[v][split][k].values.push_back(x);
      if (!std::isnan(r.train_frames_per_sec)) fps[v].values.push_back(r.train_frames_per_sec);
    }
  res.tests = paired_tests(res, 0, 1);  // semi-CRF minus linear CRF
  for (size_t v = 2; v < variants.size(); ++v) res.variant_tests.push_back(paired_tests(res, 1, v));  // minus the semi-CRF
  return res;
}

namespace {

// "align within 25 ms" equals "within 20 ms" when the alignment errors are
// whole 10-ms frames (no error lies in (20, 25] ms): true when every run has
// the same value for both, and the 25 ms row is then left out, said once.
bool align_25_equals_20(const CompareResults& res) {
  bool any = false;
  for (const auto& per_split : res.sums)
    for (const auto& [split, vals] : per_split) {
      const auto a = vals.find("align_within_20ms"), b = vals.find("align_within_25ms");
      if (a == vals.end() || b == vals.end()) continue;
      if (a->second.values != b->second.values) return false;
      any = true;
    }
  return any;
}

constexpr const char* kSame25Note =
    "align within 25 ms: the same as within 20 ms in every run (the alignment errors are whole 10-ms frames), "
    "not shown";
constexpr const char* kOneSeedNote =
    "Significance of the semi-CRF minus the linear CRF: needs 2 seeds or more (--seeds N); this compare has 1";
constexpr const char* kOneSeedVariantsNote = "The same for each variant minus the semi-CRF";

// One significance block of the table: `heading`, the column names, then a
// row per metric and split shown; the rows also go into *rows (the report's).
void significance_block(std::ostringstream& os, const std::string& heading,
                        const std::map<std::string, std::map<std::string, report::PairedTest>>& tests,
                        const CompareResults& res, int w, const std::function<bool(const MetricRow&)>& present,
                        SigRows* rows) {
  char buf[512];
  os << heading;
  std::snprintf(buf, sizeof buf, "%-*s %-10s %18s %16s %14s %18s\n", w, "metric", "split", "mean diff ± std", "t (df)",
                "p (t-test)", "p (sign test)");
  os << buf;
  for (const MetricRow& row : kRows)
    for (const std::string& split : res.split_names) {
      const auto sp = tests.find(split);
      if (sp == tests.end() || !sp->second.count(row.key) || !present(row)) continue;
      const report::PairedTest& t = sp->second.at(row.key);
      const std::vector<std::string> cells = {row.label, split, report::mean_text(t, row.scale, row.format),
                                              report::t_text(t), report::p_t_text(t), report::p_sign_text(t)};
      std::snprintf(buf, sizeof buf, "%-*s %-10s %18s %16s %14s %18s\n", w, cells[0].c_str(), cells[1].c_str(),
                    cells[2].c_str(), cells[3].c_str(), cells[4].c_str(), cells[5].c_str());
      os << buf;
      rows->push_back(cells);
    }
}

}  // namespace

std::string compare_table(const CompareResults& res, const std::vector<Variant>& variants, size_t num_seeds,
                          const std::string& title_line, SigRows* sig_rows_out, std::vector<SigRows>* variant_sig_rows_out,
                          std::vector<std::string>* cols_out) {
  const auto& sums = res.sums;
  const auto& fps = res.fps;
  const bool same25 = align_25_equals_20(res);
  auto present = [&](const MetricRow& row) {
    return res.present(row) && !(same25 && std::string(row.key) == "align_within_25ms");
  };
  std::ostringstream os;
  os << title_line;
  char buf[512];
  std::vector<std::string>& cols = *cols_out;
  for (const std::string& split : res.split_names)
    for (const Variant& var : variants) cols.push_back(var.name + " " + split);
  int w = 26;  // the label column: as wide as the longest label shown ("align (samples) mean |error| ms")
  for (const MetricRow& row : kRows)
    if (present(row)) w = std::max(w, static_cast<int>(std::strlen(row.label)));
  std::snprintf(buf, sizeof buf, "%-*s", w, "metric");
  os << buf;
  for (const std::string& c : cols) {
    std::snprintf(buf, sizeof buf, " %20s", c.c_str());
    os << buf;
  }
  os << "\n";
  for (const MetricRow& row : kRows) {
    if (!present(row)) continue;
    std::snprintf(buf, sizeof buf, "%-*s", w, row.label);
    os << buf;
    for (const std::string& split : res.split_names)
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
  std::snprintf(buf, sizeof buf, "%-*s", w, "train frames/s");
  os << buf;
  for (size_t i = 0; i < res.split_names.size(); ++i)
    for (size_t v = 0; v < variants.size(); ++v) {
      std::snprintf(buf, sizeof buf, " %20s", fps[v].text(1, "%.0f").c_str());
      os << buf;
    }
  os << "\n";
  if (same25) os << "(" << kSame25Note << ")\n";
  if (num_seeds < 2) {
    os << "\n" << kOneSeedNote << "\n";
    if (variants.size() > 2) os << kOneSeedVariantsNote << "\n";
    return os.str();
  }
  const std::string paired = ", paired by seed (" + std::to_string(num_seeds) + " seeds): mean difference ± std of the "
                             "differences, paired t-test (t, degrees of freedom, two-sided p) and exact sign test "
                             "(two-sided p, seeds where ";
  significance_block(os, "\nsemi-CRF minus linear CRF" + paired + "the semi-CRF is higher+/lower-)\n", res.tests, res, w,
                     present, sig_rows_out);
  variant_sig_rows_out->assign(res.variant_tests.size(), {});
  for (size_t v = 2; v < variants.size(); ++v)
    significance_block(os, "\n" + variants[v].name + " minus semi-CRF" + paired + variants[v].name + " is higher+/lower-)\n",
                       res.variant_tests[v - 2], res, w, present, &(*variant_sig_rows_out)[v - 2]);
  return os.str();
}

std::string write_compare_report(CompareResults& res, const config::Config& base, const std::vector<Variant>& variants,
                                 const std::string& seeds_text, const std::vector<std::string>& cols,
                                 const SigRows& sig_rows, const std::vector<SigRows>& variant_sig_rows) {
  auto& splits = res.splits;
  auto& sums = res.sums;
  report::ReportInput& overlay = res.overlay;
  const bool same25 = align_25_equals_20(res);
  auto present = [&](const MetricRow& row) {
    return res.present(row) && !(same25 && std::string(row.key) == "align_within_25ms");
  };
  const std::string report_path = (fs::path(base.train_run_dir) / "report.html").string();
  {
    std::vector<const data::Utterance*> dev_utts;
    for (const auto& u : splits["dev"].utterances) dev_utts.push_back(&u);
    overlay.drawn = report::pick_drawn(dev_utts, data::load_feature_options(base.data_workdir));
    report::ReportTable means;
    means.id = "compare";
    means.title = "compare: " + variants[0].title + " vs " + variants[1].title;
    for (size_t v = 2; v < variants.size(); ++v) means.title += (v == 2 ? "; variants: " : "; ") + variants[v].title;
    means.note = std::to_string(base.train_epochs) + " epochs, " + seeds_text +
                 "; each run evaluated with its best checkpoint (the last without a dev split)." +
                 (same25 ? std::string(" ") + kSame25Note + "." : "") +
                 (sig_rows.empty() ? std::string(" ") + kOneSeedNote + "." : "");
    means.header = {"metric"};
    for (const std::string& c : cols) means.header.push_back(c);
    for (const MetricRow& row : kRows) {
      if (!present(row)) continue;
      std::vector<std::string> r = {row.label};
      for (const std::string& split : res.split_names)
        for (size_t v = 0; v < variants.size(); ++v) {
          const auto sp = sums[v].find(split);
          r.push_back(sp == sums[v].end() || !sp->second.count(row.key) ? "n/a"
                                                                        : sp->second.at(row.key).text(row.scale, row.format));
        }
      means.rows.push_back(r);
    }
    std::vector<std::string> fps_row = {"train frames/s"};  // as the console table
    for (size_t i = 0; i < res.split_names.size(); ++i)
      for (size_t v = 0; v < variants.size(); ++v) fps_row.push_back(res.fps[v].text(1, "%.0f"));
    means.rows.push_back(fps_row);
    report::ReportTable sig;
    sig.id = "significance";
    sig.title = "Significance: semi-CRF minus linear CRF, paired by seed";
    sig.note = "Per metric and split: the mean over seeds of (semi-CRF - linear CRF) on the same seed, the sample "
               "std of those differences, a paired two-sided t-test and the exact two-sided sign test (docs/"
               "training.md). With 1 seed there is no test: n/a (1 seed).";
    sig.header = {"metric", "split", "mean diff ± std", "t (df)", "p (t-test)", "p (sign test)"};
    sig.rows = sig_rows;
    overlay.tables = {means};
    if (!sig_rows.empty()) overlay.tables.push_back(sig);  // one seed: no test (said in the note above)
    for (size_t v = 2; v < variants.size() && v - 2 < variant_sig_rows.size(); ++v) {
      if (variant_sig_rows[v - 2].empty()) continue;
      report::ReportTable vs = sig;
      vs.id = "significance-" + variants[v].name;
      vs.title = "Significance: " + variants[v].name + " minus semi-CRF, paired by seed";
      vs.note = "As above, for the variant " + variants[v].title + " minus the semi-CRF on the same seed.";
      vs.rows = variant_sig_rows[v - 2];
      overlay.tables.push_back(vs);
    }
    report::write_report(overlay, report_path);
    // a reused run from before compare wrote report.html gets its own too
    for (const report::RunReport& rr : overlay.runs) {
      const fs::path own = fs::path(rr.run_dir) / "report.html";
      std::error_code ec;
      if (fs::exists(own, ec)) continue;
      std::optional<RunLock> lock;  // written into the run's folder: as its one writer (common/run_lock.h)
      try {
        lock.emplace(rr.run_dir, "train.run_dir");
      } catch (const std::runtime_error& e) {
        spdlog::warn("{}; its own report.html is left for later", e.what());
        continue;
      }
      report::ReportInput one;
      one.scoring_names = overlay.scoring_names;
      one.runs = {rr};
      one.drawn = overlay.drawn;
      report::write_report(one, own.string());
    }
  }
  return report_path;
}

void write_compare_json(const std::string& path, const CompareResults& res, const std::vector<Variant>& variants,
                        const std::vector<std::vector<config::Config>>& cfgs, const CompareJsonInfo& info) {
  const auto& sums = res.sums;
  const auto& fps = res.fps;
  const auto& tests = res.tests;
  nlohmann::json j;
  j["config"] = info.config;
  j["epochs"] = info.epochs;
  j["seeds"] = info.seeds;
  j["report"] = info.report_path;
  j["jobs"] = info.jobs;
  j["runs_trained"] = info.runs_trained;
  j["train_wall_seconds"] = info.train_wall_seconds;
  for (size_t v = 0; v < variants.size(); ++v) {
    nlohmann::json r;
    r["title"] = variants[v].title;
    r["max_duration"] = variants[v].max_duration;
    if (!variants[v].sets.empty()) r["sets"] = variants[v].sets;  // an extra variant's keys over the base config
    std::vector<std::string> dirs;
    for (size_t s = 0; s < cfgs[v].size(); ++s) dirs.push_back(cfgs[v][s].train_run_dir);
    r["run_dirs"] = dirs;
    if (!fps[v].values.empty()) r["train_frames_per_sec"] = fps[v].to_json();
    for (const std::string& split : res.split_names) {
      const auto sp = sums[v].find(split);
      if (sp == sums[v].end()) continue;  // an empty split: its metrics are left out, never NaN
      for (const auto& [k, sum] : sp->second) r[split][k] = sum.to_json();
    }
    j["runs"][variants[v].name] = r;
  }
  for (const auto& [split, m] : tests)
    for (const auto& [k, t] : m) j["significance"][split][k] = report::to_json(t);
  for (size_t v = 2; v < variants.size() && v - 2 < res.variant_tests.size(); ++v)  // each variant minus the semi-CRF
    for (const auto& [split, m] : res.variant_tests[v - 2])
      for (const auto& [k, t] : m) j["variant_significance"][variants[v].name][split][k] = report::to_json(t);
  write_file_atomic(path, j.dump(2) + "\n");
  spdlog::info("compare: table written to {}", path);
}

}  // namespace timitseg::app::compare
