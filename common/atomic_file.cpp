#include "common/atomic_file.h"

#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <regex>
#include <stdexcept>

#include "common/parallel.h"
#include "settings/env.h"

namespace timitseg {
namespace {

// The injected full disk (test only, atomic_file.h): the one place the
// environment variables are read.
struct EnospcHook {
  long long budget = -1;  // bytes that may still be written; -1: hook off
  std::string path_filter;
  std::mutex mu;
};
EnospcHook& enospc_hook() {
  static EnospcHook* h = [] {
    auto* hook = new EnospcHook;
    hook->budget = env::integer("TIMITSEG_TEST_ENOSPC_AFTER_BYTES").value_or(-1);
    hook->path_filter = env::text("TIMITSEG_TEST_ENOSPC_PATH").value_or("");
    return hook;
  }();
  return *h;
}

// How many of BYTES to PATH the injected disk takes (all of them when the hook is off).
size_t enospc_allowance(const std::string& path, size_t bytes) {
  EnospcHook& h = enospc_hook();
  if (h.budget < 0) return bytes;
  if (!h.path_filter.empty() && path.find(h.path_filter) == std::string::npos) return bytes;
  std::lock_guard<std::mutex> lk(h.mu);
  const size_t take = static_cast<size_t>(std::min<long long>(h.budget, static_cast<long long>(bytes)));
  h.budget -= static_cast<long long>(take);
  return take;
}

}  // namespace

[[noreturn]] void throw_write_error(const std::string& path, int err) {
  if (err == ENOSPC)
    throw std::runtime_error(path + ": cannot write: no space left on device (" + path +
                             " is unchanged; free some space and rerun)");
  if (err == EDQUOT)
    throw std::runtime_error(path + ": cannot write: disk quota exceeded (" + path +
                             " is unchanged; free some space and rerun)");
  throw std::runtime_error(path + ": cannot write: " + std::strerror(err));
}

namespace test_hooks {
long long enospc_after_bytes() { return enospc_hook().budget; }
}  // namespace test_hooks

AtomicFile::AtomicFile(const std::string& path) : path_(path) {
  static std::atomic<unsigned> counter{0};
  tmp_ = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  f_ = std::fopen(tmp_.c_str(), "wb");
  if (!f_) throw_write_error(path, errno);
}

AtomicFile::~AtomicFile() {
  if (f_) std::fclose(f_);
  if (!renamed_) std::remove(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t bytes) {
  if (!f_) throw std::logic_error(path_ + ": write after commit");
  if (!bytes) return;
  const size_t allowed = enospc_allowance(path_, bytes);
  if (allowed && std::fwrite(data, 1, allowed, f_) != allowed) throw_write_error(path_, errno);
  if (allowed < bytes) throw_write_error(path_, ENOSPC);  // the injected full disk
}

void AtomicFile::finish() {
  if (!f_) throw std::logic_error(path_ + ": commit twice");
  bool ok = std::fflush(f_) == 0 && ::fsync(::fileno(f_)) == 0;
  const int err = errno;
  ok = (std::fclose(f_) == 0) && ok;
  f_ = nullptr;
  if (!ok) throw_write_error(path_, err);  // (the destructor removes the temporary)
  finished_ = true;
}

void AtomicFile::rename() {
  if (!finished_ || renamed_) throw std::logic_error(path_ + ": rename before finish, or twice");
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) throw_write_error(path_, errno);
  renamed_ = true;
}

void AtomicFile::commit() {
  finish();
  rename();
}

void write_file_atomic(const std::string& path, const std::string& content) {
  AtomicFile f(path);
  f.write(content);
  f.commit();
}

void write_files_atomic(const std::vector<std::pair<std::string, std::string>>& files, int threads) {
  std::vector<std::unique_ptr<AtomicFile>> out(files.size());
  std::vector<std::string> errors(files.size());
  parallel_for(static_cast<int64_t>(files.size()), std::max(1, threads), [&](int64_t i, int) {
    try {
      out[i] = std::make_unique<AtomicFile>(files[i].first);
      out[i]->write(files[i].second);
      out[i]->finish();
    } catch (const std::exception& e) {
      errors[i] = e.what();
    }
  });
  for (const std::string& e : errors)
    if (!e.empty()) throw std::runtime_error(e);  // every temporary is removed with `out`
  for (size_t i = 0; i < out.size(); ++i) {
    try {
      out[i]->rename();
    } catch (...) {
      for (size_t k = 0; k < i; ++k) std::remove(files[k].first.c_str());  // none of them, as none is complete
      throw;
    }
  }
}

int remove_stale_temporaries(const std::string& dir) {
  namespace fs = std::filesystem;
  static const std::regex tmp_re(R"(.+\.tmp\.([0-9]+)\.[0-9]+)");
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return 0;
  int removed = 0;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (!std::regex_match(name, m, tmp_re) || e.is_symlink(ec)) continue;
    const long long pid = std::atoll(m[1].str().c_str());
    if (pid <= 0 || pid == ::getpid()) continue;
    // kill(pid, 0): ESRCH means no such process; EPERM means it runs (another user)
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    if (fs::remove_all(e.path(), ec) > 0 && !ec) ++removed;
  }
  return removed;
}

}  // namespace timitseg
