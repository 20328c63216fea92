// `timitseg report RUN_DIR... --out report.html` (docs/report.md): one
// self-contained HTML page over one or more run folders.
#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/commands.h"
#include "app/report/report.h"
#include "common/files.h"
#include "common/run_lock.h"
#include "common/walk.h"
#include "model/labels.h"
#include "settings/limits.h"

namespace fs = std::filesystem;

namespace timitseg::app {

namespace {

struct ReportArgs {
  std::vector<std::string> run_dirs;
  std::string out;
  std::string workdir;  // "" = each run's data.workdir
  int threads = 0;
};

// DIR holds a run (or held one): train, compare or report may write there.
bool holds_run(fs::path dir) {
  if (dir.empty()) dir = ".";
  std::error_code ec;
  for (const char* name : {"metrics.jsonl", "config.yaml", RunLock::kFileName})
    if (fs::exists(dir / name, ec)) return true;
  return false;
}

void run_report(const ReportArgs& a) {
  const auto t0 = std::chrono::steady_clock::now();
  // A file path in an existing folder, before the (possibly long) dev evaluations.
  check_output_file("--out", a.out, "report.html");
  InputSet inputs;  // what the report reads of each run: never replaced by it
  for (const std::string& run_dir : a.run_dirs)
    for (const char* name : {"metrics.jsonl", "config.yaml", "run.json", "train.log", "checkpoints/best.safetensors"})
      inputs.add(fs::path(run_dir) / name);
  refuse_output("--out", a.out, inputs, "a file of a run the report reads");
  // one writer per run folder (common/run_lock.h): a report into a run folder is refused at once while a train
  // or compare writes there; a report of a running run into another folder only reads it
  std::optional<RunLock> lock;
  if (holds_run(fs::path(a.out).parent_path())) lock.emplace(fs::path(a.out).parent_path().string(), "--out");
  std::error_code ec;
  report::ReportInput in;
  in.scoring_names = model::LabelSet::make(39).scoring_names;
  for (const std::string& run_dir : a.run_dirs) {
    if (!fs::is_directory(run_dir, ec)) throw std::invalid_argument(run_dir + ": no such run folder");
    // one error for a folder that holds no run, before any warning about its checkpoints
    if (!fs::exists(fs::path(run_dir) / "metrics.jsonl", ec) && !fs::exists(fs::path(run_dir) / "config.yaml", ec))
      throw std::invalid_argument(run_dir + ": not a run folder (neither metrics.jsonl nor config.yaml; give a "
                                  "train.run_dir)");
    report::RunReport r;
    r.run_dir = run_dir;
    r.has_predictions = report::predict_best(run_dir, a.threads, &r.predictions, &in.drawn, &r.predictions_note,
                                                a.workdir);
    if (!r.has_predictions) spdlog::warn("{}: {}; its dev plots show n/a", run_dir, r.predictions_note);
    if (r.has_predictions) {  // one scoring set per report: the first run's; another is one line naming both runs
      bool first = true;
      for (const report::RunReport& o : in.runs)
        if (o.has_predictions) {
          first = false;
          if (o.predictions.scoring_names != r.predictions.scoring_names)
            throw std::invalid_argument(run_dir + ": scored on another phone set (" +
                                        std::to_string(r.predictions.scoring_names.size()) + " labels) than " + o.run_dir +
                                        " (" + std::to_string(o.predictions.scoring_names.size()) +
                                        " labels): a report compares runs of one inventory");
          break;
        }
      if (first) in.scoring_names = r.predictions.scoring_names;
    }
    in.runs.push_back(std::move(r));
  }
  report::write_report(in, a.out);
  spdlog::info("report of {} run(s) written in {:.1f} s", a.run_dirs.size(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  std::printf("%s\n", fs::absolute(a.out).string().c_str());
}

}  // namespace

void add_report_command(CLI::App& app) {
  auto ra = std::make_shared<ReportArgs>();
  CLI::App* rep = app.add_subcommand(
      "report",
      "Write one self-contained HTML page (inline SVG, no script, opens from file://) over run folders: training "
      "curves, boundary F1 against tolerance, per-phone durations, confusion matrix, decoded utterances, config and "
      "environment; several runs are overlaid, one colour each (docs/report.md)");
  rep->add_option("run_dirs", ra->run_dirs,
                  "Run folders (train.run_dir): metrics.jsonl, config.yaml, run.json if present, and "
                  "checkpoints/best.safetensors, which is decoded on the dev split of its data.workdir (CPU)")
      ->required();
  rep->add_option("--out", ra->out, "Output HTML file (written atomically; the folder must exist)")->required();
  rep->add_option("--workdir", ra->workdir,
                  "Prepared WORKDIR whose dev split is decoded, for every run (default: each run's data.workdir, "
                  "as its checkpoint recorded it; give it when that folder has moved)");
  rep->add_option("--threads", ra->threads, "CPU threads for the dev decoding (0 = all cores)")
      ->check(CLI::Range(limits::kThreads.lo, limits::kThreads.hi))
      ->capture_default_str();
  rep->callback([ra] { run_report(*ra); });
}

}  // namespace timitseg::app
