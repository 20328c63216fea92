// common/walk.h: the folder walker (links followed, cycles and dangling links
// named), input identity through links, and folders removed after a failure.
// The oracle is the tree the test builds: every name and link is known.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/walk.h"
#include "tmpdir.h"

namespace {

namespace fs = std::filesystem;
using commontest::TempDir;
using commontest::write_bytes;

// orig/ holds the files; tree/ reaches them through every kind of link.
void build_tree(const TempDir& t) {
  fs::create_directories(t.path / "orig/DR1/SPK1");
  fs::create_directories(t.path / "orig/SPK2");
  write_bytes(t.str("orig/DR1/SPK1/SI1.WAV"), "a");
  write_bytes(t.str("orig/DR1/SPK1/SI1.PHN"), "b");
  write_bytes(t.str("orig/SPK2/SX2.WAV"), "c");
  fs::create_directories(t.path / "tree/DR1/SPK1");
  fs::create_symlink(t.path / "orig/DR1/SPK1/SI1.WAV", t.path / "tree/DR1/SPK1/SI1.WAV");  // absolute link to a file
  fs::create_symlink("../../../orig/DR1/SPK1/SI1.PHN", t.path / "tree/DR1/SPK1/SI1.PHN");  // relative link
  fs::create_symlink(t.path / "orig/SPK2", t.path / "tree/DR1/SPK2");                     // linked folder
  fs::create_symlink("..", t.path / "tree/DR1/SPK1/up");                                   // a cycle
  fs::create_symlink("nowhere.WAV", t.path / "tree/DR1/SPK1/gone.WAV");                    // dangling
  fs::create_symlink("self", t.path / "tree/self");                                        // a link to itself
}

TEST(Walk, FollowsLinkedFilesAndFoldersAndNamesCyclesAndDanglingLinks) {
  TempDir t;
  build_tree(t);
  std::vector<std::string> problems;
  std::vector<fs::path> folders;
  const std::vector<fs::path> files = timitseg::walk_files(t.path / "tree", &problems, {}, &folders);
  const std::vector<fs::path> want = {"DR1/SPK1/SI1.PHN", "DR1/SPK1/SI1.WAV", "DR1/SPK2/SX2.WAV"};
  EXPECT_EQ(files, want);  // the links' own names, never the targets' (orig/...)
  ASSERT_EQ(problems.size(), 3u);
  const std::string p = t.str("tree/");
  EXPECT_EQ(problems[0], p + "self: link cycle (-> self): ignored");
  EXPECT_EQ(problems[1], p + "DR1/SPK1/gone.WAV: dangling link (-> nowhere.WAV): ignored");
  EXPECT_EQ(problems[2], p + "DR1/SPK1/up: link to .., a folder above it (a cycle): not followed");
  EXPECT_EQ(folders.size(), 4u);  // tree, tree/DR1, tree/DR1/SPK1, tree/DR1/SPK2
}

TEST(Walk, SkipsTheOutputFolderAndARootThatIsALink) {
  TempDir t;
  build_tree(t);
  fs::create_directories(t.path / "tree/out/DR1");
  write_bytes(t.str("tree/out/DR1/x.WAV"), "d");
  std::pair<dev_t, ino_t> out;
  ASSERT_TRUE(timitseg::file_identity(t.path / "tree/out", &out));
  const auto files = timitseg::walk_files(t.path / "tree", nullptr, {out});
  EXPECT_EQ(files.size(), 3u);
  fs::create_symlink(t.path / "tree", t.path / "alias");  // ROOT itself a link
  EXPECT_EQ(timitseg::walk_files(t.path / "alias", nullptr, {out}), files);
  EXPECT_THROW(timitseg::walk_files(t.path / "missing", nullptr), std::runtime_error);
}

TEST(Walk, InputSetKnowsAFileByAnyNameAndRefusesItAsOutput) {
  TempDir t;
  build_tree(t);
  timitseg::InputSet in;
  in.add(t.path / "tree/DR1/SPK1/SI1.PHN");
  in.add(t.path / "tree");
  EXPECT_EQ(in.same_as(t.path / "orig/DR1/SPK1/SI1.PHN"), t.str("tree/DR1/SPK1/SI1.PHN"));  // the target
  EXPECT_EQ(in.same_as(t.path / "tree/DR1/../DR1/SPK1/SI1.PHN"), t.str("tree/DR1/SPK1/SI1.PHN"));
  EXPECT_EQ(in.same_as(t.path / "orig/DR1/SPK1/SI1.WAV"), "");
  EXPECT_EQ(in.same_as(t.path / "tree/new.txt"), "");  // not yet written: compared by its canonical path
  fs::create_symlink(t.path / "tree", t.path / "alias");
  EXPECT_EQ(in.same_as(t.path / "alias"), t.str("tree"));
  try {
    timitseg::refuse_output("--out", t.path / "orig/DR1/SPK1/SI1.PHN", in);
    ADD_FAILURE() << "an output that is an input was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "--out " + t.str("orig/DR1/SPK1/SI1.PHN") + ": is the input " +
                                         t.str("tree/DR1/SPK1/SI1.PHN") +
                                         " (an output never replaces an input); give another path");
  }
  EXPECT_NO_THROW(timitseg::refuse_output("--out", t.path / "out", in));
}

TEST(Walk, CreatedFoldersRemovesOnlyItsOwnEmptyFolders) {
  TempDir t;
  fs::create_directories(t.path / "had");
  {
    timitseg::CreatedFolders made;
    made.create(t.path / "had/a/b", "--out");
    EXPECT_TRUE(fs::is_directory(t.path / "had/a/b"));
  }  // a failure: nothing written
  EXPECT_FALSE(fs::exists(t.path / "had/a"));
  EXPECT_TRUE(fs::is_directory(t.path / "had"));
  {
    timitseg::CreatedFolders made;
    made.create(t.path / "had/c/d", "--out");
    write_bytes(t.str("had/c/file"), "x");
  }
  EXPECT_FALSE(fs::exists(t.path / "had/c/d"));  // empty: removed
  EXPECT_TRUE(fs::exists(t.path / "had/c/file"));  // written into: stays
  {
    timitseg::CreatedFolders made;
    made.create(t.path / "kept", "--out");
    made.keep();
  }
  EXPECT_TRUE(fs::is_directory(t.path / "kept"));
  write_bytes(t.str("plain"), "x");
  timitseg::CreatedFolders made;
  EXPECT_THROW(made.create(t.path / "plain", "--out"), std::runtime_error);
}

}  // namespace
