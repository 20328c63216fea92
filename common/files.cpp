#include "common/files.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <unistd.h>

namespace timitseg {

std::string read_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error(path + ": cannot open for reading (" + std::strerror(errno) + ")");
  // fopen succeeds on a folder on Linux; say so instead of a read error.
  struct stat sb {};
  if (::fstat(::fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
    std::fclose(f);
    throw std::runtime_error(path + ": is a folder, not a file");
  }
  std::string out;
  if (S_ISREG(sb.st_mode) && sb.st_size > 0) out.reserve(static_cast<size_t>(sb.st_size));
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  const bool err = std::ferror(f);
  const int e = errno;
  std::fclose(f);
  if (err) throw std::runtime_error(path + ": read error (" + std::strerror(e) + ")");
  return out;
}

void require_file(const std::string& path, const std::string& hint) {
  struct stat sb {};
  if (::stat(path.c_str(), &sb) != 0) {
    const int e = errno;
    throw std::runtime_error(path + (e == ENOENT ? std::string(": missing") : ": " + std::string(std::strerror(e))) +
                             hint);
  }
  if (S_ISDIR(sb.st_mode)) throw std::runtime_error(path + ": is a folder, not a file" + hint);
  if (!S_ISREG(sb.st_mode)) throw std::runtime_error(path + ": not a regular file" + hint);
}

void check_output_file(const std::string& flag, const std::string& path, const std::string& example_name) {
  namespace fs = std::filesystem;
  if (path.empty()) throw std::invalid_argument(flag + ": empty path; give a file path, e.g. " + flag + " " + example_name);
  const std::string inside = (fs::path(path) / example_name).string();
  if (path.back() == '/')
    throw std::invalid_argument(flag + " " + path + ": names a folder (it ends with '/'); give a file path, e.g. " +
                                flag + " " + (fs::path(path.substr(0, path.find_last_not_of('/') + 1)) / example_name).string());
  std::error_code ec;
  if (fs::is_directory(path, ec))
    throw std::invalid_argument(flag + " " + path + ": is an existing folder; give a file path, e.g. " + flag + " " +
                                inside);
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::is_directory(dir, ec))
    throw std::invalid_argument(flag + " " + path + ": folder " + dir.string() + " does not exist");
  const fs::path probe = dir / (".timitseg-write-test-" + std::to_string(::getpid()));
  {
    std::ofstream f(probe);
    if (!f) throw std::invalid_argument(flag + " " + path + ": folder " + dir.string() + " is not writable");
  }
  fs::remove(probe, ec);
}

}  // namespace timitseg
