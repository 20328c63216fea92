// Atomic file writes: data goes to a temporary file in the destination folder
// (DEST.tmp.PID.N) and is renamed over the destination only by commit(). If the
// writer is destroyed without commit() (an exception, an error), the temporary
// file is removed and the destination is untouched: nothing is ever
// half-written. A process killed with SIGKILL cannot remove its temporary file;
// remove_stale_temporaries() clears those of dead processes (prepare and train
// call it on their output folders). docs/reliability.md lists the guarantees.
#pragma once

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace timitseg {

// Throws the one error line of a failed write of PATH with errno ERR:
// "PATH: cannot write: no space left on device (PATH is unchanged; free some
// space and rerun)" for ENOSPC, likewise for EDQUOT, else strerror's words.
// AtomicFile's writes and data/'s spill files (prepare_stage.h) throw it.
[[noreturn]] void throw_write_error(const std::string& path, int err);

class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path);  // throws naming the path
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Throws std::runtime_error naming the path; a full disk reads
  // "PATH: cannot write: no space left on device (PATH is unchanged; free some space and rerun)".
  void write(const void* data, size_t bytes);
  void write(const std::string& s) { write(s.data(), s.size()); }
  void commit();  // flush, fsync, rename; throws naming the path
  // commit()'s first half: flush, fsync and close the temporary (throws naming
  // the path); rename() then puts it in place. Until then the destructor removes it.
  void finish();
  void rename();

  const std::string& path() const { return path_; }

 private:
  std::string path_, tmp_;
  std::FILE* f_ = nullptr;
  bool finished_ = false, renamed_ = false;
};

// Whole-file convenience: atomically replace PATH with CONTENT.
void write_file_atomic(const std::string& path, const std::string& content);

// Several files that appear together or not at all (the outputs of one input
// of decode / align): (path, content) each written to its temporary (on up to
// `threads` workers), then all renamed. A failure (a full disk) removes every
// temporary, and the files already renamed when a rename fails, and throws
// the first error (naming its path): none of the files is left.
void write_files_atomic(const std::vector<std::pair<std::string, std::string>>& files, int threads = 1);

// Removes the temporaries named NAME.tmp.PID.N in DIR (not recursive; files of
// AtomicFile writers, or folders a writer staged with such a name, removed with
// their contents) whose process PID no longer runs: what a process killed with
// SIGKILL (or a power loss) leaves behind. Temporaries of running processes are
// left alone. Returns how many were removed; a missing DIR is 0.
int remove_stale_temporaries(const std::string& dir);

// TEST ONLY: a full disk, injected. Read once per process from the environment:
//   TIMITSEG_TEST_ENOSPC_AFTER_BYTES=N  AtomicFile writes may write N bytes in
//                                       all; the write that would exceed N
//                                       writes what fits and fails with ENOSPC
//   TIMITSEG_TEST_ENOSPC_PATH=TEXT      (optional) only writes to destinations
//                                       whose path contains TEXT count and fail
// Every file the project writes through AtomicFile (checkpoints, metrics.jsonl,
// the prepared cache, manifests) sees it. Unset (the default) it costs one
// branch per write. Used by tests/reliability/test_full_disk.cpp.
namespace test_hooks {
// The byte budget of the hook (-1: not set), as parsed from the environment.
long long enospc_after_bytes();
}  // namespace test_hooks

}  // namespace timitseg
