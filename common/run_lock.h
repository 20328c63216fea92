// One writer per run folder (docs/reliability.md "One writer per run folder"):
// `train` (fresh or --resume), `compare` and `report` into a run folder hold an
// exclusive flock(2) on RUN_DIR/.timitseg.lock for as long as they write. The
// kernel releases it when the process ends, however it ends (kill -9 included),
// so a lock is never stale; the file itself stays (it holds the last holder's
// pid). Readers (report of a running run into another file, evaluate of its
// checkpoints) take no lock.
#pragma once

#include <string>

#include "common/walk.h"

namespace timitseg {

class RunLock {
 public:
  static constexpr const char* kFileName = ".timitseg.lock";
  // Creates DIR (and missing parents) when needed, then takes the lock without
  // waiting. Held by another process: throws std::runtime_error, one line:
  // "DIR: another timitseg (pid N) is writing this run folder; wait for it to
  // end or stop it (a second writer would mix two runs' files)".
  // `flag` names DIR in the error of a folder that cannot be created.
  explicit RunLock(const std::string& dir, const std::string& flag = "train.run_dir");
  // Releases the lock; when this call created DIR and nothing but the lock file
  // is in it (the command failed before its first write), removes both.
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  // The command wrote into DIR: the folder stays even if it fails later.
  void keep_folder() { created_.keep(); }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  int fd_ = -1;
  CreatedFolders created_;
};

// The pid written in DIR/.timitseg.lock by its last holder (0 when none can be read).
long run_lock_holder(const std::string& dir);

}  // namespace timitseg
