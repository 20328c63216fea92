// Helpers of the common-layer tests: a private temporary folder and a plain
// (non-atomic) file writer, independent of the code under test.
#pragma once

#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace commontest {

// A fresh temporary folder, removed with its contents at scope exit.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "timitseg_common_XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error(tmpl + ": mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string str(const std::string& rel = "") const { return rel.empty() ? path.string() : (path / rel).string(); }
  // Names of the entries of the folder (not recursive), sorted.
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

// Writes bytes with std::ofstream (the oracle for common/files.h); throws on failure.
inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error(path + ": cannot write");
}

// Reads bytes with std::ifstream (an independent reader).
inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace commontest
