// The run folder of `timitseg train` (docs/training.md "The run folder"):
// train.log, run.json, checkpoint pruning, and the formatting shared by the
// logs and tables ("n/a" for metrics that do not exist, ISO 8601 times).
#include "train/run_folder.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <mutex>
#include <regex>
#include <sstream>
#include <thread>

#include "common/atomic_file.h"
#include "common/cuda.h"
#include "common/dist.h"
#include "common/files.h"
#include "common/version.h"

namespace fs = std::filesystem;

namespace timitseg::train {

std::string format_metric(double v, const char* format, double scale) {
  if (std::isnan(v)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v * scale);
  return buf;
}

std::string iso8601_now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const int ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[80];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
  return buf;
}

namespace {

// The CPU model ("model name" of /proc/cpuinfo; "unknown" elsewhere).
std::string cpu_model() {
  std::string text;
  try {
    text = read_file("/proc/cpuinfo");
  } catch (const std::exception&) {
    return "unknown";
  }
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        const size_t b = line.find_first_not_of(" \t", colon + 1);
        return b == std::string::npos ? "unknown" : line.substr(b);
      }
    }
  return "unknown";
}

}  // namespace

// One entry of run.json: what ran this training call, where and when.
nlohmann::json run_entry(const config::Config& cfg, const options::DeviceChoice& choice, const model::Executor& exec, int threads,
                         bool resume) {
  nlohmann::json gpu = nullptr;
  try {
    if (cuda::device_count() > 0) gpu = cuda::device_name();
  } catch (const std::exception&) {
  }
  return {{"timitseg_version", version()},
          {"git_commit", git_commit()},
          {"build_type", build_type()},
          {"machine",
           {{"cpu", cpu_model()},
            {"cores", std::max(1u, std::thread::hardware_concurrency())},
            {"threads", threads},
            {"gpu", gpu}}},
          {"device", model::device_name(choice.device)},          // train.device resolved (auto: cuda when a GPU is present)
          {"rnn_algo", config::to_string(choice.rnn_algo)},        // train.rnn_algo resolved (auto: fused on sm_90)
          {"crf_backend", crf::to_string(choice.crf_backend)},  // crf.backend resolved (auto: cuda on the GPU)
          {"executor", exec.description()},
          {"config", cfg.to_json()},  // the config of this call, overrides applied (`auto` kept as given)
          {"crf_onset_features", cfg.onset_enabled()},  // resolved (auto: K > 1)
          {"crf_end_features", cfg.end_enabled()},      // resolved (auto: K > 1)
          {"start_time", iso8601_now()},
          {"resume", resume},
          // several processes (docs/multigpu.md): their number, the launcher and the MPI library
          {"world_size", dist::world().size()},
          {"launcher", common::to_string(dist::world().launch().launcher)},
          {"mpi_library", dist::world().library()}};
}

// run.json: the first call's entry at the top level, each --resume appended
// to "resumes" (an unreadable old file is replaced, with a warning).
void write_run_json(const fs::path& run_dir, const nlohmann::json& entry, bool resume) {
  const fs::path path = run_dir / "run.json";
  nlohmann::json j = entry;
  std::error_code ec;
  if (resume && fs::exists(path, ec)) {
    try {
      j = nlohmann::json::parse(read_file(path.string()));
      if (!j.is_object()) throw std::runtime_error("not a JSON object");
      j["resumes"].push_back(entry);
    } catch (const std::exception& e) {
      spdlog::warn("{}: unreadable ({}); writing a new one", path.string(), e.what());
      j = entry;
    }
  }
  j.erase("resume");
  if (j.contains("resumes"))
    for (auto& r : j["resumes"]) r.erase("resume");
  write_file_atomic(path.string(), j.dump(2) + "\n");
}

// Deletes checkpoints/epoch-M.safetensors for M < last - keep (best and the
// last epoch stay; train.keep_checkpoints = keep).
void prune_checkpoints(const fs::path& ckpt_dir, int last, int keep) {
  static const std::regex re("epoch-([0-9]+)\\.safetensors");
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(ckpt_dir, ec)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (std::regex_match(name, m, re) && std::stoi(m[1]) < last - keep) {
      fs::remove(e.path(), ec);
      if (ec) spdlog::warn("cannot delete old checkpoint {}: {}", e.path().string(), ec.message());
    }
  }
}

namespace {

// The one sink of the default logger that writes train.log files: each
// message goes to the LogFiles of the thread that logged it; a message of a
// thread without one goes to the only LogFile when there is exactly one (the
// prefetch thread or a worker of a single `train`), else nowhere. Each line
// is flushed as it is written (docs/reliability.md "train.log").
class RunLogRouter final : public spdlog::sinks::sink {
 public:
  void log(const spdlog::details::log_msg& msg) override {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = files_.find(msg.thread_id);
    if (it == files_.end() && files_.size() == 1) it = files_.begin();
    if (it == files_.end()) return;
    for (const auto& f : it->second)
      if (f->should_log(msg.level)) {
        f->log(msg);
        f->flush();  // each line reaches the file now: `tail -f` sees it, a killed run keeps it
      }
  }
  void flush() override {
    std::lock_guard<std::mutex> lk(mu_);
    for (const auto& [tid, v] : files_)
      for (const auto& f : v) f->flush();
  }
  // The files keep their own pattern (the logger's set_pattern reaches this sink only).
  void set_pattern(const std::string&) override {}
  void set_formatter(std::unique_ptr<spdlog::formatter>) override {}
  void add(size_t tid, std::shared_ptr<spdlog::sinks::sink> f) {
    std::lock_guard<std::mutex> lk(mu_);
    files_[tid].push_back(std::move(f));
  }
  void remove(size_t tid, const std::shared_ptr<spdlog::sinks::sink>& f) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = files_.find(tid);
    if (it == files_.end()) return;
    it->second.erase(std::remove(it->second.begin(), it->second.end(), f), it->second.end());
    if (it->second.empty()) files_.erase(it);
  }

 private:
  std::mutex mu_;
  std::map<size_t, std::vector<std::shared_ptr<spdlog::sinks::sink>>> files_;
};

RunLogRouter& router() {
  static const std::shared_ptr<RunLogRouter> r = std::make_shared<RunLogRouter>();
  static std::mutex mu;
  // on the current default logger (a test may have replaced it)
  std::lock_guard<std::mutex> lk(mu);
  auto& sinks = spdlog::default_logger()->sinks();
  if (std::find(sinks.begin(), sinks.end(), r) == sinks.end()) sinks.push_back(r);
  return *r;
}

thread_local std::string t_log_tag;

class TagFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg&, const std::tm&, spdlog::memory_buf_t& dest) override {
    if (t_log_tag.empty()) return;
    const std::string t = "[" + t_log_tag + "] ";
    dest.append(t.data(), t.data() + t.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<TagFlag>(); }
};

}  // namespace

void prepare_concurrent_logging() {
  router();
  auto f = std::make_unique<spdlog::pattern_formatter>();
  f->add_flag<TagFlag>('*').set_pattern("[%H:%M:%S] [%^%l%$] %*%v");
  spdlog::default_logger()->set_formatter(std::move(f));
}

LogTag::LogTag(std::string tag) : previous_(std::move(t_log_tag)) { t_log_tag = std::move(tag); }
LogTag::~LogTag() { t_log_tag = std::move(previous_); }

LogFile::LogFile(const std::string& path) {
  auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, /*truncate=*/false);
  sink->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
  sink_ = sink;
  thread_id_ = spdlog::details::os::thread_id();
  router().add(thread_id_, sink_);
}

LogFile::~LogFile() {
  router().remove(thread_id_, sink_);
  sink_->flush();
}

void LogFile::error(const std::string& msg) const {
  sink_->log(spdlog::details::log_msg("timitseg", spdlog::level::err, msg));
  sink_->flush();
}

// ---- the run folder's checkpoints and metrics ----

namespace {

// common/files.h's read_file, or "" for a file that does not exist.
std::string read_file_or_empty(const std::string& path) {
  std::error_code ec;
  return fs::exists(path, ec) ? read_file(path) : std::string();
}

}  // namespace

// metrics.jsonl lines with epoch <= keep_upto (used on --resume).
std::string metrics_upto(const std::string& path, int keep_upto) {
  std::istringstream in(read_file_or_empty(path));
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
    std::istringstream in(read_file_or_empty(metrics));
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

void lock_run_folder(std::optional<RunLock>& lock, const config::Config& cfg, bool resume, bool holder) {
  const std::string& run_dir = cfg.train_run_dir;
  InputSet inputs;  // the prepared data is read, never written: a run folder is never the WORKDIR
  inputs.add(cfg.data_workdir);
  refuse_output("train.run_dir", run_dir, inputs,
                "data.workdir, the prepared data; runs go into a folder of their own");
  if (holder) lock.emplace(run_dir, "train.run_dir");
  if (!resume) check_fresh_run_dir(run_dir);
}

}  // namespace timitseg::train
