// Shared by the end-to-end tests that run the timitseg binary: a command
// line's exit status and output, the binary under test, a per-process scratch
// folder, a whole file as a string, a synth + prepared corpus, and the lines of
// a run folder's metrics.jsonl.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace testsupport {

struct Cmd {
  int rc;              // exit status; -1 when the process did not exit normally
  std::string output;  // stdout and stderr together
};

// Runs a shell command line (stderr joined to stdout).
inline Cmd sh(const std::string& line) {
  Cmd r{0, ""};
  FILE* p = popen((line + " 2>&1").c_str(), "r");
  if (!p) return {-1, "popen failed"};
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

#ifdef TIMITSEG_BINARY
// The binary under test: the test target's TIMITSEG_BINARY, or the command in
// the environment variable TIMITSEG_TEST_BINARY when set (test binaries run on
// another machine than the one they were built on, e.g. from a bundle).
inline std::string binary() {
  const char* e = std::getenv("TIMITSEG_TEST_BINARY");
  return e && *e ? std::string(e) : std::string(TIMITSEG_BINARY);
}
// The binary under test with ARGS.
inline Cmd run(const std::string& args) { return sh(binary() + " " + args); }
#endif

// An empty folder TEMP/NAME_PID (emptied when it exists): one per process, so
// the test processes that ctest runs in parallel never share one.
inline std::filesystem::path fresh_temp_dir(const std::string& name) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// DIR/synth (`BINARY synth`, SPEAKERS x UTTS utterances, SEED) and DIR/work
// (`BINARY prepare` of it): the failing command's result, or rc 0.
inline Cmd make_prepared_corpus(const std::string& binary, const std::filesystem::path& dir, int speakers, int utts,
                                int seed) {
  const std::string synth = (dir / "synth").string();
  Cmd r = sh(binary + " synth --out " + synth + " --speakers " + std::to_string(speakers) +
             " --utterances-per-speaker " + std::to_string(utts) + " --seed " + std::to_string(seed));
  if (r.rc != 0) return r;
  return sh(binary + " prepare --timit " + synth + " --out " + (dir / "work").string());
}

// RUN_DIR/metrics.jsonl, one JSON object per non-empty line.
inline std::vector<nlohmann::json> metrics_lines(const std::filesystem::path& run_dir) {
  std::vector<nlohmann::json> out;
  std::istringstream in(slurp(run_dir / "metrics.jsonl"));
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace testsupport
