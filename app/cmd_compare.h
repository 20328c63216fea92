// `timitseg compare` (app/cmd_compare.cpp: its flags and what it prints;
// app/cmd_compare_results.cpp: evaluating the runs, the table, the overlay
// report and the JSON). The runs are planned and trained in train/
// (train/compare_plan.h). Internal to app/.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/report/report.h"
#include "app/report/significance.h"
#include "data/dataset.h"
#include "config/config.h"
#include "train/compare_plan.h"
#include "train/run_folder.h"  // format_metric
#include "train/train_data.h"

namespace timitseg::app::compare {

// The splits evaluated: dev and core-test (TIMIT's), or dev and test for a
// WORKDIR without a core-test (prepare --corpus: other corpora, docs/data.md).
inline const char* const kSplits[] = {"dev", "core-test"};
inline const char* const kSplitsWithoutCoreTest[] = {"dev", "test"};
// Metric keys of the table and JSON, in order: (key, row label, scale for the table, printf format).
struct MetricRow {
  const char* key;
  const char* label;
  double scale;
  const char* format;
};
inline const MetricRow kRows[] = {
    {"per", "PER %", 100, "%.2f"},
    {"boundary_f1_tol0", "boundary F1 tol 0 %", 100, "%.2f"},
    {"boundary_f1_tol1", "boundary F1 tol 1 %", 100, "%.2f"},
    {"boundary_f1_tol2", "boundary F1 tol 2 %", 100, "%.2f"},
    // at 20 ms, one-to-one (Metrics::to_json's boundary_20ms): shown when present
    {"boundary_20ms_precision", "boundary P 20 ms %", 100, "%.2f"},
    {"boundary_20ms_recall", "boundary R 20 ms %", 100, "%.2f"},
    {"boundary_20ms_f1", "boundary F1 20 ms %", 100, "%.2f"},
    {"boundary_20ms_r_value", "boundary R-value 20 ms %", 100, "%.2f"},
    // at 20 ms, lenient (SegFeat/UnsupSeg; Metrics::to_json's boundary_20ms_lenient, docs/metrics.md)
    {"boundary_20ms_lenient_f1", "lenient F1 20 ms %", 100, "%.2f"},
    {"boundary_20ms_lenient_r_value", "lenient R-value 20 ms %", 100, "%.2f"},
    {"segment_f1", "segment F1 %", 100, "%.2f"},
    {"duration_mae", "duration MAE (frames)", 1, "%.3f"},
    {"duration_kl", "duration KL", 1, "%.4f"},
    {"frame_accuracy", "frame accuracy %", 100, "%.2f"},
    // forced alignment of the reference phone sequences (eval::align_utterances, docs/align.md)
    {"align_within_10ms", "align within 10 ms %", 100, "%.2f"},
    {"align_within_20ms", "align within 20 ms %", 100, "%.2f"},
    {"align_within_25ms", "align within 25 ms %", 100, "%.2f"},
    {"align_within_50ms", "align within 50 ms %", 100, "%.2f"},
    {"align_mean_abs_ms", "align mean |error| ms", 1, "%.2f"},
    {"align_median_abs_ms", "align median |error| ms", 1, "%.2f"},
    // the same against the .PHN times in samples (sample-accurate, as published aligners are scored)
    {"align_samples_within_10ms", "align (samples) within 10 ms %", 100, "%.2f"},
    {"align_samples_within_20ms", "align (samples) within 20 ms %", 100, "%.2f"},
    {"align_samples_within_25ms", "align (samples) within 25 ms %", 100, "%.2f"},
    {"align_samples_within_50ms", "align (samples) within 50 ms %", 100, "%.2f"},
    {"align_samples_mean_abs_ms", "align (samples) mean |error| ms", 1, "%.2f"},
    // the confidences (docs/align.md "Confidence"): AUROC of 1 - confidence
    {"boundary_confidence_auroc", "boundary confidence AUROC", 1, "%.3f"},
    {"label_confidence_auroc", "label confidence AUROC", 1, "%.3f"},
    {"decode_seconds", "decode time (s)", 1, "%.2f"},
};

// One trained model's numbers: per split (absent when the split is empty) and training speed.
struct RunNumbers {
  std::map<std::string, std::map<std::string, double>> splits;  // split -> key -> value
  double train_frames_per_sec = std::nan("");
};

// A mean over seeds (mean ± sample std).
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
    std::string t = train::format_metric(mean(), format, scale);
    if (values.size() > 1) t += " ± " + train::format_metric(std(), format, scale);
    return t;
  }
};

// One model of the comparison: the linear CRF, the semi-CRF or an extra variant.
using Variant = train::CompareVariant;

// Every number of the comparison: per variant v and seed s.
struct CompareResults {
  std::vector<std::string> split_names;                               // kSplits, or kSplitsWithoutCoreTest
  std::map<std::string, data::Split> splits;                          // by name
  std::vector<std::vector<RunNumbers>> numbers;                       // [v][s]
  std::vector<std::map<std::string, std::map<std::string, Summary>>> sums;  // [v][split][key]
  std::vector<Summary> fps;                                           // [v] training frames/s
  std::map<std::string, std::map<std::string, report::PairedTest>> tests;  // [split][key]: semi minus linear
  // [v - 2][split][key]: each extra variant (--variant, --ablation) minus the semi-CRF, paired by seed
  std::vector<std::map<std::string, std::map<std::string, report::PairedTest>>> variant_tests;
  report::ReportInput overlay;                                        // the runs, in [s][v] order
  bool present(const MetricRow& row) const;  // a row some run has (boundary_20ms only with that metric)
};

// Evaluates every run (cfgs[v][s], best checkpoint) on dev and core-test and sums them up.
CompareResults collect_results(const config::Config& base, const std::vector<Variant>& variants,
                               const std::vector<std::vector<config::Config>>& cfgs);

// The significance rows of the table, for the report: {metric, split, mean diff ± std, t (df), p, p}.
using SigRows = std::vector<std::vector<std::string>>;

// The table printed by compare; *sig_rows: the significance rows of the semi-CRF minus the linear CRF,
// *variant_sig_rows ([v - 2]): those of each extra variant minus the semi-CRF (both empty with 1 seed);
// *cols: the column names.
std::string compare_table(const CompareResults& res, const std::vector<Variant>& variants, size_t num_seeds,
                          const std::string& title_line, SigRows* sig_rows, std::vector<SigRows>* variant_sig_rows,
                          std::vector<std::string>* cols);

// RUN_DIR/report.html overlaying every run (and a report.html for each reused run without one); returns its path.
std::string write_compare_report(CompareResults& res, const config::Config& base, const std::vector<Variant>& variants,
                                 const std::string& seeds_text, const std::vector<std::string>& cols,
                                 const SigRows& sig_rows, const std::vector<SigRows>& variant_sig_rows);

// What --json says besides the numbers.
struct CompareJsonInfo {
  std::string config, report_path;
  int epochs = 0, jobs = 1, runs_trained = 0;
  double train_wall_seconds = 0;
  std::vector<uint64_t> seeds;
};
// --json FILE (atomic).
void write_compare_json(const std::string& path, const CompareResults& res, const std::vector<Variant>& variants,
                        const std::vector<std::vector<config::Config>>& cfgs, const CompareJsonInfo& info);

}  // namespace timitseg::app::compare
