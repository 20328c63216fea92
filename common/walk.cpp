#include "common/walk.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace fs = std::filesystem;

namespace timitseg {

namespace {

std::string link_target(const fs::path& p) {
  std::error_code ec;
  const fs::path t = fs::read_symlink(p, ec);
  return ec ? std::string("?") : t.string();
}

}  // namespace

std::vector<FolderEntry> list_folder(const fs::path& dir, std::vector<std::string>* problems) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) throw std::runtime_error(dir.string() + ": cannot read the folder (" + ec.message() + ")");
  std::vector<FolderEntry> out;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    FolderEntry e;
    e.path = it->path();
    struct stat sb {};
    if (::stat(e.path.c_str(), &sb) != 0) {
      const int err = errno;
      struct stat lb {};
      if (::lstat(e.path.c_str(), &lb) == 0 && S_ISLNK(lb.st_mode)) {
        if (problems)
          problems->push_back(e.path.string() + ": " + (err == ELOOP ? "link cycle" : "dangling link") + " (-> " +
                              link_target(e.path) + "): ignored");
      } else if (problems) {
        problems->push_back(e.path.string() + ": " + std::strerror(err) + ": ignored");
      }
      continue;
    }
    e.kind = S_ISDIR(sb.st_mode)   ? FolderEntry::kFolder
             : S_ISREG(sb.st_mode) ? FolderEntry::kFile
                                   : FolderEntry::kOther;
    out.push_back(std::move(e));
  }
  if (ec) throw std::runtime_error(dir.string() + ": cannot read the folder (" + ec.message() + ")");
  std::sort(out.begin(), out.end(), [](const FolderEntry& a, const FolderEntry& b) {
    return a.path.filename() < b.path.filename();
  });
  return out;
}

namespace {

using Id = std::pair<dev_t, ino_t>;

void walk(const fs::path& root, const fs::path& rel, std::vector<Id>& above, std::vector<std::string>* problems,
          const std::set<Id>& skip, std::vector<fs::path>& files, std::vector<fs::path>* folders) {
  const fs::path dir = rel.empty() ? root : root / rel;
  if (folders) folders->push_back(dir);
  std::vector<FolderEntry> entries;
  try {
    entries = list_folder(dir, problems);
  } catch (const std::exception& e) {
    if (rel.empty()) throw;  // ROOT itself: the caller's error
    if (problems) problems->push_back(std::string(e.what()) + ": ignored");
    return;
  }
  for (const FolderEntry& e : entries) {
    const fs::path r = rel / e.path.filename();
    if (e.kind == FolderEntry::kFile) {
      files.push_back(r);
      continue;
    }
    if (e.kind != FolderEntry::kFolder) continue;
    Id id;
    if (!file_identity(e.path, &id) || skip.count(id)) continue;
    if (std::find(above.begin(), above.end(), id) != above.end()) {
      if (problems)
        problems->push_back(e.path.string() + ": link to " + link_target(e.path) +
                            ", a folder above it (a cycle): not followed");
      continue;
    }
    above.push_back(id);
    walk(root, r, above, problems, skip, files, folders);
    above.pop_back();
  }
}

}  // namespace

std::vector<fs::path> walk_files(const fs::path& root, std::vector<std::string>* problems, const std::set<Id>& skip,
                                 std::vector<fs::path>* folders) {
  std::vector<fs::path> files;
  std::vector<Id> above;
  Id id;
  if (!file_identity(root, &id)) throw std::runtime_error(root.string() + ": no such folder");
  above.push_back(id);
  walk(root, fs::path(), above, problems, skip, files, folders);
  std::sort(files.begin(), files.end());
  return files;
}

bool file_identity(const fs::path& path, Id* id) {
  struct stat sb {};
  if (::stat(path.c_str(), &sb) != 0) return false;
  *id = {sb.st_dev, sb.st_ino};
  return true;
}

void InputSet::add(const fs::path& path) {
  Id id;
  if (!file_identity(path, &id)) return;
  by_id_.emplace(id, path.string());
  std::error_code ec;
  const fs::path c = fs::weakly_canonical(path, ec);
  if (!ec) by_canonical_.emplace(c.string(), path.string());
}

std::string InputSet::same_as(const fs::path& path) const {
  Id id;
  if (file_identity(path, &id)) {
    auto it = by_id_.find(id);
    return it == by_id_.end() ? "" : it->second;
  }
  std::error_code ec;
  const fs::path c = fs::weakly_canonical(path, ec);
  if (ec) return "";
  auto it = by_canonical_.find(c.string());
  return it == by_canonical_.end() ? "" : it->second;
}

void refuse_output(const std::string& flag, const fs::path& output, const InputSet& inputs, const std::string& what) {
  const std::string in = inputs.same_as(output);
  if (in.empty()) return;
  throw std::invalid_argument(flag + " " + output.string() + ": is the input " + in + " (" + what +
                              "); give another path");
}

CreatedFolders::~CreatedFolders() { remove_empty(); }

void CreatedFolders::create(const fs::path& dir, const std::string& flag) {
  std::vector<fs::path> missing;
  std::error_code ec;
  for (fs::path p = dir; !p.empty() && !fs::exists(fs::symlink_status(p, ec)); p = p.parent_path()) {
    missing.push_back(p);
    if (p == p.parent_path()) break;
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (::mkdir(it->c_str(), 0777) == 0) {
      made_.push_back(*it);  // ours: removed again if the command fails before writing into it
    } else if (errno != EEXIST) {
      throw std::runtime_error(flag + " " + dir.string() + ": cannot create the folder (" + std::strerror(errno) +
                               ")");
    }
  }
  if (!fs::is_directory(dir, ec))
    throw std::runtime_error(flag + " " + dir.string() + ": cannot create the folder (" +
                             (fs::exists(dir, ec) ? "exists and is not a folder" : "no such folder") + ")");
}

void CreatedFolders::remove_empty() {
  for (auto it = made_.rbegin(); it != made_.rend(); ++it) ::rmdir(it->c_str());  // only empty ones go
  made_.clear();
}

}  // namespace timitseg
