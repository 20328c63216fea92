// Reading folders of inputs, and keeping outputs off them (docs/reliability.md
// "Links, and outputs never over inputs"): the one folder walker of the
// project (links to files and folders followed at any depth, cycles and
// dangling links named and skipped), the identity of inputs (device and inode,
// so a path through a link is the same file), and output folders created only
// for as long as the command succeeds.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace timitseg {

// One entry of a folder, its kind found through links (a link to a folder is a folder).
struct FolderEntry {
  std::filesystem::path path;  // DIR / name, as found (a link's own path, never its target)
  enum Kind { kFile, kFolder, kOther } kind = kOther;
};

// DIR's entries sorted by name, links followed to tell files from folders.
// A dangling link or a link cycle (a -> b -> a) is left out with one line in
// *problems: "PATH: dangling link (-> TARGET): ignored",
// "PATH: link cycle (-> TARGET): ignored". Throws naming DIR when it cannot be read.
std::vector<FolderEntry> list_folder(const std::filesystem::path& dir, std::vector<std::string>* problems);

// Every file under ROOT (ROOT itself may be a link to a folder), links to files
// and folders followed at any depth, as paths relative to ROOT (the names as
// found: a file reached through a link is ROOT/link/..., never the link's
// target), sorted. A link back to a folder above it (a cycle) is not followed
// and named in *problems ("PATH: link to TARGET, a folder above it (a cycle): not
// followed"); dangling links likewise (list_folder). `skip`: folders (by
// device and inode) not descended into, e.g. an output folder inside the tree.
// `folders`, when given, receives every folder visited (ROOT included).
std::vector<std::filesystem::path> walk_files(const std::filesystem::path& root, std::vector<std::string>* problems,
                                              const std::set<std::pair<dev_t, ino_t>>& skip = {},
                                              std::vector<std::filesystem::path>* folders = nullptr);

// The (device, inode) of PATH, links followed; false when it does not exist.
bool file_identity(const std::filesystem::path& path, std::pair<dev_t, ino_t>* id);

// The inputs of a command, by identity: an output path is checked against them
// before any work (refuse_output), so that no output is or replaces an input,
// whatever links lie between the two names.
class InputSet {
 public:
  // A file or folder read by the command (missing paths are ignored).
  void add(const std::filesystem::path& path);
  // The input PATH is, or "": the same device and inode when PATH exists, else
  // the same weakly_canonical path (a link to a file not yet written).
  std::string same_as(const std::filesystem::path& path) const;
  bool empty() const { return by_id_.empty() && by_canonical_.empty(); }

 private:
  std::map<std::pair<dev_t, ino_t>, std::string> by_id_;
  std::map<std::string, std::string> by_canonical_;
};

// Throws std::invalid_argument, one line naming both, when OUTPUT is one of
// INPUTS: "FLAG OUTPUT: is the input INPUT (WHAT); give another path".
void refuse_output(const std::string& flag, const std::filesystem::path& output, const InputSet& inputs,
                   const std::string& what = "an output never replaces an input");

// The folders of an output created by this command and removed again, if still
// empty, when it fails: a command that fails before writing anything leaves no
// folder behind; folders that existed are never touched.
class CreatedFolders {
 public:
  CreatedFolders() = default;
  ~CreatedFolders();
  CreatedFolders(const CreatedFolders&) = delete;
  CreatedFolders& operator=(const CreatedFolders&) = delete;
  // Creates DIR and its missing parents (recording the ones it made); throws
  // "FLAG DIR: cannot create the folder (REASON)".
  void create(const std::filesystem::path& dir, const std::string& flag);
  // The command succeeded: the folders stay.
  void keep() { made_.clear(); }
  // Removes the recorded folders that are empty, deepest first (the destructor's work).
  void remove_empty();

 private:
  std::vector<std::filesystem::path> made_;
};

}  // namespace timitseg
