// The run folder of `timitseg train` (docs/training.md "The run folder"):
// train.log (a file sink on the default logger while training), run.json
// (what ran: version, commit, build, machine, device, backend, start time),
// the pruning of old epoch checkpoints (train.keep_checkpoints), and the
// formatting shared by logs and tables ("n/a", ISO 8601 times).
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/run_lock.h"
#include "config/config.h"
#include "model/executor.h"
#include "options/device_choice.h"

namespace spdlog::sinks {
class sink;
}

namespace timitseg::train {

// "n/a" for NaN (a metric of an empty or missing split), else the value
// formatted with printf's format after scaling (e.g. "%.2f%%" with scale 100).
std::string format_metric(double v, const char* format = "%.2f", double scale = 1.0);

// The current time as ISO 8601 UTC with milliseconds ("2026-05-01T12:00:00.123Z").
std::string iso8601_now();

// One entry of run.json for this call of train(): timitseg_version,
// git_commit, build_type, machine {cpu, cores, threads, gpu}, device,
// rnn_algo, crf_backend (the resolved values of train.device, train.rnn_algo,
// crf.backend: `auto` replaced by its pick, options/device_choice.h), executor,
// config (as given, `auto` kept), start_time.
nlohmann::json run_entry(const config::Config& cfg, const options::DeviceChoice& choice, const model::Executor& exec, int threads,
                         bool resume);
// RUN_DIR/run.json (atomic): a fresh run writes its entry; a resume appends
// its entry to "resumes" (an unreadable old file is replaced, with a warning).
void write_run_json(const std::filesystem::path& run_dir, const nlohmann::json& entry, bool resume);

// Deletes checkpoints/epoch-M.safetensors for M < last - keep (best and the
// last `keep` + 1 epochs stay; keep = train.keep_checkpoints).
void prune_checkpoints(const std::filesystem::path& ckpt_dir, int last, int keep);

// While alive, the default logger also writes to PATH (appended: a resumed
// run continues its train.log): the messages logged by the thread that made
// it, and, while it is the only LogFile, those of every other thread too.
// Several LogFiles on several threads (`compare --jobs N`: one run per thread)
// each get their own thread's messages. One routing sink on the default
// logger does this; it is added the first time a LogFile is made, or by
// prepare_concurrent_logging() (call that before starting the threads: a
// logger's sink list must not change while other threads log).
class LogFile {
 public:
  explicit LogFile(const std::string& path);
  ~LogFile();
  // A line for the file only: the error that stops the run (main() prints it on stderr).
  void error(const std::string& msg) const;
  LogFile(const LogFile&) = delete;
  LogFile& operator=(const LogFile&) = delete;

 private:
  std::shared_ptr<spdlog::sinks::sink> sink_;
  size_t thread_id_ = 0;  // spdlog's id of the thread that made it
};

// Adds the routing sink of LogFile to the default logger now, and gives the
// default logger's console output a "[TAG] " prefix for threads that hold a
// LogTag (pattern: main.cpp's "[%H:%M:%S] [%^%l%$] %v" with the tag before
// the message). Call it once, before starting training threads.
void prepare_concurrent_logging();

// While alive, this thread's console log lines start with "[tag] " (after
// prepare_concurrent_logging(); train.log lines are not tagged: each is one run's).
class LogTag {
 public:
  explicit LogTag(std::string tag);
  ~LogTag();
  LogTag(const LogTag&) = delete;
  LogTag& operator=(const LogTag&) = delete;

 private:
  std::string previous_;
};

// One writer per run folder (common/run_lock.h): on rank 0 (`holder`) takes
// RUN_DIR's lock into *lock, creating the folder, before anything is checked
// or written; then, for a fresh run (!resume), check_fresh_run_dir. The check
// and the first write are thus atomic against a second `train`, `--resume`,
// `compare` or `report` into the folder, which is refused with one line naming
// it and this process's pid. A train.run_dir that is data.workdir (through
// links too) is refused first.
void lock_run_folder(std::optional<RunLock>& lock, const config::Config& cfg, bool resume, bool holder);

// RUN_DIR/metrics.jsonl's lines with epoch <= keep_upto (--resume keeps those); "" for a missing file.
std::string metrics_upto(const std::string& path, int keep_upto);

}  // namespace timitseg::train
