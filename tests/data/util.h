// Helpers shared by the data-layer tests.
#pragma once

#include <sndfile.h>

#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/files.h"  // timitseg::read_file: the tests read files with it

namespace testutil {

// A fresh temporary folder, removed with its contents at scope exit.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "timitseg_data_XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string str(const std::string& rel = "") const { return rel.empty() ? path.string() : (path / rel).string(); }
};

inline void write_text(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// Writes 16-bit PCM audio with libsndfile: major = SF_FORMAT_NIST or SF_FORMAT_WAV.
inline void write_audio(const std::string& path, const std::vector<short>& s, int rate = 16000, int major = SF_FORMAT_NIST,
                        int channels = 1, int sub = SF_FORMAT_PCM_16) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  SF_INFO info{};
  info.samplerate = rate;
  info.channels = channels;
  info.format = major | sub;
  SNDFILE* f = sf_open(path.c_str(), SFM_WRITE, &info);
  if (!f) throw std::runtime_error(path + ": " + sf_strerror(nullptr));
  sf_writef_short(f, s.data(), static_cast<sf_count_t>(s.size() / channels));
  sf_close(f);
}

// Deterministic test signal: int16 range.
inline std::vector<short> test_signal(int n, unsigned seed = 1) {
  std::vector<short> s(n);
  unsigned st = seed;
  for (int i = 0; i < n; ++i) {
    st = st * 1103515245u + 12345u;
    double v = 3000.0 * std::sin(0.05 * i) + 1000.0 * std::sin(0.31 * i) + ((st >> 16) % 400) - 200.0;
    s[i] = static_cast<short>(v);
  }
  return s;
}

// Runs `cmd` with stdout and stderr captured into *output; returns the exit status.
inline int run_capture(const std::string& cmd, std::string* output) {
  output->clear();
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) throw std::runtime_error("popen failed: " + cmd);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) output->append(buf, n);
  const int rc = pclose(p);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

inline int run(const std::string& cmd) {
  int rc = std::system((cmd + " > /dev/null 2>&1").c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

}  // namespace testutil
