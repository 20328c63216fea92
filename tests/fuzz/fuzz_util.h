// Shared helpers of the libFuzzer targets (tests/fuzz/fuzz_*.cpp, docs/fuzzing.md).
//
// Every target hands the fuzzer's bytes to a parser of timitseg as a user's file
// would reach it (most parsers read paths, so the bytes are written to a file in
// a private scratch folder, on /dev/shm when there is one). The oracle, beyond
// AddressSanitizer, UBSan and LeakSanitizer:
//   - a rejected input throws a std::exception whose message names the file
//     (expect_error_names); anything else escaping is a finding;
//   - an accepted input satisfies the invariants each target checks (check()).
// A violated invariant prints the reason and aborts, which libFuzzer reports as
// a crash with the input saved.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>

namespace timitseg::fuzz {

// A scratch folder for this process, created on first use and removed at exit.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    std::string base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path().string();
    std::string tmpl = base + "/timitseg_fuzz_XXXXXX";
    if (!mkdtemp(tmpl.data())) {
      std::perror("fuzz: mkdtemp");
      std::abort();
    }
    static std::string keep = tmpl;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(keep, ec);
    });
    return tmpl;
  }();
  return dir;
}

// Writes `size` bytes to scratch_dir()/NAME (replacing it) and returns the path.
inline std::string write_scratch(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = scratch_dir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
  return path;
}

[[noreturn]] inline void fail(const std::string& why) {
  std::fprintf(stderr, "fuzz oracle: %s\n", why.c_str());
  std::fflush(stderr);
  std::abort();
}

inline void check(bool ok, const std::string& why) {
  if (!ok) fail(why);
}

// A rejected input must say which file it was: its message contains `name`
// (the path, or the file name where the API reports that).
inline void expect_error_names(const std::exception& e, const std::string& name) {
  const std::string what = e.what();
  if (what.find(name) == std::string::npos) fail("error message does not name " + name + ": " + what);
  if (what.find('\n') != std::string::npos && what.find('\n') + 1 != what.size())
    fail("error message is more than one line: " + what);
}

}  // namespace timitseg::fuzz
