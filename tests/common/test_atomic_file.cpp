// common/atomic_file.h: a committed write replaces the file; a write that
// fails or is abandoned leaves no file (or the old one untouched) and no
// temporary file behind.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "common/atomic_file.h"
#include "tmpdir.h"

using namespace timitseg;

TEST(AtomicFile, CommitWritesAndReplaces) {
  commontest::TempDir d;
  const std::string p = d.str("out.txt");
  write_file_atomic(p, std::string("first\0line", 10));
  EXPECT_EQ(commontest::read_bytes(p), std::string("first\0line", 10));
  write_file_atomic(p, "second");
  EXPECT_EQ(commontest::read_bytes(p), "second");
  EXPECT_EQ(d.entries(), std::vector<std::string>{"out.txt"});  // no temporary file left
}

TEST(AtomicFile, AbandonedWriteLeavesNoFileAndNoTempFile) {
  commontest::TempDir d;
  const std::string p = d.str("out.bin");
  try {
    AtomicFile f(p);
    f.write("partial");
    throw std::runtime_error("failure in the middle of writing");
  } catch (const std::runtime_error&) {
  }
  EXPECT_TRUE(d.entries().empty());
  // an existing file is left as it was
  commontest::write_bytes(p, "old");
  {
    AtomicFile f(p);
    f.write("new contents that are never committed");
  }
  EXPECT_EQ(commontest::read_bytes(p), "old");
  EXPECT_EQ(d.entries(), std::vector<std::string>{"out.bin"});
}

TEST(AtomicFile, FailedOpenAndFailedRenameNameThePath) {
  commontest::TempDir d;
  const std::string bad = d.str("no_such_folder/out.txt");
  try {
    write_file_atomic(bad, "x");
    FAIL() << "no error for a missing folder";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(bad + ": cannot write", 0), 0u) << e.what();
  }
  // the destination is a non-empty folder: the rename fails, the temporary file is removed
  const std::string dir = d.str("taken");
  std::filesystem::create_directories(dir + "/inside");
  try {
    write_file_atomic(dir, "x");
    FAIL() << "no error when the destination is a folder";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(dir + ": cannot write", 0), 0u) << e.what();
  }
  EXPECT_EQ(d.entries(), std::vector<std::string>{"taken"});
  EXPECT_TRUE(std::filesystem::is_directory(dir + "/inside"));
}

TEST(AtomicFile, WriteOrCommitAfterCommitIsAnError) {
  commontest::TempDir d;
  AtomicFile f(d.str("x"));
  f.write("a");
  f.commit();
  EXPECT_THROW(f.write("b"), std::logic_error);
  EXPECT_THROW(f.commit(), std::logic_error);
  EXPECT_EQ(commontest::read_bytes(d.str("x")), "a");
}

// remove_stale_temporaries: NAME.tmp.PID.N files and folders of a dead process
// go; those of a running process (here: our parent), other files and a
// temporary of this very process stay.
TEST(AtomicFile, RemoveStaleTemporariesOfDeadProcessesOnly) {
  commontest::TempDir d;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);  // reaped: no process has this id now
  const std::string dead = std::to_string(child), alive = std::to_string(getppid()), self = std::to_string(getpid());
  commontest::write_bytes(d.str("a.safetensors.tmp." + dead + ".0"), "half");
  std::filesystem::create_directories(d.str(".staging.tmp." + dead + ".3/inner"));
  commontest::write_bytes(d.str(".staging.tmp." + dead + ".3/inner/x"), "half");
  commontest::write_bytes(d.str("b.json.tmp." + alive + ".1"), "in use");
  commontest::write_bytes(d.str("c.json.tmp." + self + ".2"), "in use");
  commontest::write_bytes(d.str("d.tmp.notapid.0"), "kept");
  commontest::write_bytes(d.str("e.safetensors"), "kept");
  EXPECT_EQ(remove_stale_temporaries(d.str()), 2);
  EXPECT_EQ(d.entries(), (std::vector<std::string>{"b.json.tmp." + alive + ".1", "c.json.tmp." + self + ".2",
                                                   "d.tmp.notapid.0", "e.safetensors"}));
  EXPECT_EQ(remove_stale_temporaries(d.str("no_such_folder")), 0);
}
