// The sections of the HTML report (app/report/report_sections.cpp) and what
// they read: the run folders' files and the statistics of the predictions.
// Internal to app/report/ (report.cpp builds the page from them).
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/report/report_input.h"

namespace timitseg::app::report::sections {

using json = nlohmann::json;

// One run folder's files (metrics.jsonl, config.yaml, run.json).
struct RunFiles {
  std::string label;              // legend name
  std::vector<json> epochs;       // metrics.jsonl lines
  std::string config_text, run_json_text;
  YAML::Node config;
  json run_json;
};

// The statistics of one run's predictions.
struct Stats {
  json metrics;                            // eval::Metrics::to_json
  std::vector<std::vector<int64_t>> confusion;  // [ref][pred]
  std::vector<std::vector<int64_t>> hist_ref, hist_pred;  // [39][kMaxDur] (last bin: >= kMaxDur)
};
constexpr int kMaxDur = 30;

Stats stats_of(const RunPredictions& p, const std::vector<std::string>& names);

// One <h2> section each, in page order.
std::string summary_section(const ReportInput& in, const std::vector<RunFiles>& runs);
std::string tables_section(const ReportInput& in);
std::string curves_section(const std::vector<RunFiles>& runs);
std::string tolerance_section(const ReportInput& in, const std::vector<RunFiles>& runs, const std::vector<Stats>& st);
std::string durations_section(const ReportInput& in, const std::vector<RunFiles>& runs, const std::vector<Stats>& st);
std::string confusion_section(const ReportInput& in, const std::vector<RunFiles>& runs, const std::vector<Stats>& st);
std::string utterances_section(const ReportInput& in, const std::vector<RunFiles>& runs);
std::string environment_section(const ReportInput& in, const std::vector<RunFiles>& runs);

}  // namespace timitseg::app::report::sections
