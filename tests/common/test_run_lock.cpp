// common/run_lock.h: one writer per run folder. The holder is a forked child
// (another process, as a second `timitseg train` would be); the oracle is the
// child's pid from fork() and the kernel's release of flock on SIGKILL.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "common/run_lock.h"
#include "tmpdir.h"

namespace {

namespace fs = std::filesystem;
using commontest::TempDir;

// Forks a child that takes the lock of DIR, reports through a pipe, then sleeps until killed.
pid_t child_holding(const std::string& dir) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    char ok = 'n';
    try {
      timitseg::RunLock lock(dir);
      ok = 'y';
      if (::write(fds[1], &ok, 1) != 1) ::_exit(3);
      for (;;) ::pause();
    } catch (...) {
      if (::write(fds[1], &ok, 1) != 1) ::_exit(3);
      ::_exit(2);
    }
  }
  ::close(fds[1]);
  char got = 0;
  const ssize_t n = ::read(fds[0], &got, 1);
  ::close(fds[0]);
  if (n != 1 || got != 'y') throw std::runtime_error("the child could not take the lock");
  return pid;
}

TEST(RunLock, SecondWriterRefusedWithHolderPidAndKill9LeavesNoStaleLock) {
  TempDir t;
  const std::string dir = t.str("runs/x");  // created by the lock (parents too)
  const pid_t child = child_holding(dir);
  EXPECT_TRUE(fs::is_directory(dir));
  EXPECT_EQ(timitseg::run_lock_holder(dir), static_cast<long>(child));
  try {
    timitseg::RunLock second(dir);
    ADD_FAILURE() << "a second writer took the lock while pid " << child << " held it";
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(dir + ": another timitseg (pid " + std::to_string(child) + ")"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  // kill -9: the kernel releases the lock; the lock file stays, and is not stale
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_TRUE(fs::exists(fs::path(dir) / timitseg::RunLock::kFileName));
  {
    timitseg::RunLock mine(dir);
    EXPECT_EQ(timitseg::run_lock_holder(dir), static_cast<long>(::getpid()));
  }
  // the folder was made by the child: this lock did not create it, so it stays
  EXPECT_TRUE(fs::is_directory(dir));
}

TEST(RunLock, InTheSameProcessASecondLockOfTheFolderIsRefusedToo) {
  TempDir t;
  timitseg::RunLock first(t.str("run"));
  EXPECT_THROW(timitseg::RunLock second(t.str("run")), std::runtime_error);
  timitseg::RunLock other(t.str("other"));  // another folder: its own lock
}

TEST(RunLock, AFolderItCreatedAndNothingWrittenIsRemoved) {
  TempDir t;
  { timitseg::RunLock lock(t.str("a/b")); }
  EXPECT_FALSE(fs::exists(t.str("a")));  // both created by the lock, both empty again
  fs::create_directories(t.str("keep"));
  {
    timitseg::RunLock lock(t.str("keep/run"));
    commontest::write_bytes(t.str("keep/run/metrics.jsonl"), "{}\n");
  }
  EXPECT_TRUE(fs::exists(t.str("keep/run/metrics.jsonl")));  // written into: stays, lock file and all
  EXPECT_TRUE(fs::exists(t.str("keep/run/") + timitseg::RunLock::kFileName));
  fs::create_directories(t.str("empty"));
  { timitseg::RunLock lock(t.str("empty")); }
  EXPECT_TRUE(fs::is_directory(t.str("empty")));  // existed before: never removed
  EXPECT_TRUE(fs::is_empty(t.str("empty")));
}

}  // namespace
