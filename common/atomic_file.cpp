#include "common/atomic_file.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace timitseg {

AtomicFile::AtomicFile(const std::string& path) : path_(path) {
  static std::atomic<unsigned> counter{0};
  tmp_ = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  f_ = std::fopen(tmp_.c_str(), "wb");
  if (!f_) throw std::runtime_error(path + ": cannot write: " + std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (f_) {
    std::fclose(f_);
    std::remove(tmp_.c_str());
  }
}

void AtomicFile::write(const void* data, size_t bytes) {
  if (!f_) throw std::logic_error(path_ + ": write after commit");
  if (bytes && std::fwrite(data, 1, bytes, f_) != bytes)
    throw std::runtime_error(path_ + ": write failed: " + std::strerror(errno));
}

void AtomicFile::commit() {
  if (!f_) throw std::logic_error(path_ + ": commit twice");
  bool ok = std::fflush(f_) == 0 && ::fsync(::fileno(f_)) == 0;
  const int err = errno;
  ok = (std::fclose(f_) == 0) && ok;
  f_ = nullptr;
  if (!ok || std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int e = ok ? errno : err;
    std::remove(tmp_.c_str());
    throw std::runtime_error(path_ + ": cannot write: " + std::strerror(e));
  }
}

void write_file_atomic(const std::string& path, const std::string& content) {
  AtomicFile f(path);
  f.write(content);
  f.commit();
}

}  // namespace timitseg
