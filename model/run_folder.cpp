// The run folder of `timitseg train` (docs/training.md "The run folder"):
// train.log, run.json, checkpoint pruning, and the formatting shared by the
// logs and tables ("n/a" for metrics that do not exist, ISO 8601 times).
#include "model/run_folder.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <regex>
#include <sstream>
#include <thread>

#include "common/atomic_file.h"
#include "common/cuda.h"
#include "common/files.h"
#include "common/version.h"

namespace fs = std::filesystem;

namespace timitseg::model {

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
nlohmann::json run_entry(const Config& cfg, const std::string& device, const Executor& exec, int threads,
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
          {"device", device},
          {"executor", exec.description()},
          {"crf_backend", cfg.crf_backend},
          {"config", cfg.to_json()},  // the resolved config of this call (every ablation knob)
          {"crf_onset_features", cfg.crf_onset_features},
          {"start_time", iso8601_now()},
          {"resume", resume}};
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

LogFile::LogFile(const std::string& path) {
  auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, /*truncate=*/false);
  sink->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
  sink_ = sink;
  spdlog::default_logger()->sinks().push_back(sink_);
}

LogFile::~LogFile() {
  auto& sinks = spdlog::default_logger()->sinks();
  sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  sink_->flush();
}

void LogFile::error(const std::string& msg) const {
  sink_->log(spdlog::details::log_msg("timitseg", spdlog::level::err, msg));
  sink_->flush();
}

}  // namespace timitseg::model
