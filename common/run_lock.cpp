#include "common/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <thread>

namespace fs = std::filesystem;

namespace timitseg {

namespace {

std::string lock_path(const std::string& dir) { return (fs::path(dir) / RunLock::kFileName).string(); }

long read_pid(int fd) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return 0;
  return std::strtol(buf, nullptr, 10);
}

}  // namespace

long run_lock_holder(const std::string& dir) {
  const int fd = ::open(lock_path(dir).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  const long pid = read_pid(fd);
  ::close(fd);
  return pid;
}

RunLock::RunLock(const std::string& dir, const std::string& flag) : dir_(dir) {
  created_.create(dir, flag);
  const std::string path = lock_path(dir);
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw std::runtime_error(path + ": cannot open the run folder's lock file (" + std::strerror(errno) + ")");
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    long pid = 0;
    // the holder writes its pid right after taking the lock: give it a moment
    for (int i = 0; i < 50 && (pid = read_pid(fd_)) == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ::close(fd_);
    fd_ = -1;
    if (e != EWOULDBLOCK)
      throw std::runtime_error(path + ": cannot lock the run folder (" + std::string(std::strerror(e)) + ")");
    throw std::runtime_error(dir + ": another timitseg (pid " + (pid > 0 ? std::to_string(pid) : "unknown") +
                             ") is writing this run folder; wait for it to end or stop it (a second writer would "
                             "mix two runs' files)");
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    // the lock holds all the same; only the pid in the message of a second writer is missing
  }
}

RunLock::~RunLock() {
  if (fd_ < 0) return;
  // created here and still holding only the lock file: the command wrote nothing, leave no folder
  std::error_code ec;
  bool only_lock = true;
  for (const auto& e : fs::directory_iterator(dir_, ec))
    if (e.path().filename() != kFileName) only_lock = false;
  if (ec) only_lock = false;
  if (only_lock) {
    // unlink while still holding the lock: no other writer can be using this file
    ::unlink(lock_path(dir_).c_str());
  }
  ::close(fd_);
  created_.remove_empty();  // only the folders this call created, and only when empty
}

}  // namespace timitseg
