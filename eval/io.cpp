// The inputs and outputs of decode and align (see io.h).
#include "eval/io.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <set>
#include <stdexcept>
#include <system_error>

#include <sys/types.h>
#include <unistd.h>

#include "common/files.h"

namespace fs = std::filesystem;

namespace timitseg::eval {

namespace {

// Fails early (before any work) when the folder DIR (it exists) cannot be written: "FLAG DIR: folder is not writable".
void check_writable_folder(const std::string& flag, const std::string& dir) {
  const fs::path probe = fs::path(dir) / (".timitseg-write-test-" + std::to_string(::getpid()));
  {
    std::ofstream f(probe);
    if (!f) throw std::invalid_argument(flag + " " + dir + ": folder is not writable");
  }
  std::error_code ec;
  fs::remove(probe, ec);
}

std::string lower(std::string x) {
  std::transform(x.begin(), x.end(), x.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return x;
}

// The name of a file up to its first dot, lower case: SI1000.WAV, SI1000.PHN, si1000.wav.wav -> si1000.
std::string base_name(const fs::path& p) {
  const std::string n = p.filename().string();
  return lower(n.substr(0, n.find('.')));
}

}  // namespace

std::string failed_names(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < 5; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > 5) out += " and " + std::to_string(names.size() - 5) + " more";
  return out;
}

std::string stop_text(size_t done, size_t total, size_t failed, const std::string& verb, const std::string& out_dir) {
  return std::to_string(done) + " of " + std::to_string(total) + " input file(s) " + verb + " into " + out_dir + ", " +
         std::to_string(total - done - failed) + " not " + verb + (failed ? ", " + std::to_string(failed) + " failed" : "");
}

void report_failed_input(const std::string& src, const std::string& message, bool names_file) {
  if (!spdlog::should_log(spdlog::level::err)) return;  // --log-level critical/off, the C API's default (quiet)
  std::string msg = message;
  if (!names_file && msg.rfind(src, 0) != 0) msg = src + ": " + msg;
  std::fflush(stdout);
  std::fprintf(stderr, "error: %s\n", msg.c_str());
  std::fflush(stderr);
}

std::vector<std::pair<std::string, std::filesystem::path>> audio_inputs(
    const std::vector<std::string>& inputs, const std::string& out_dir, InputSet* protect,
    std::vector<std::pair<std::string, std::string>>* bad) {
  auto fail = [bad](const std::string& in, const std::string& problem) {
    if (!bad) throw std::runtime_error(in + ": " + problem);
    bad->emplace_back(in, in + ": " + problem);
  };
  std::set<std::pair<dev_t, ino_t>> skip;  // the output folder inside an input tree is not an input
  std::pair<dev_t, ino_t> out_id;
  if (!out_dir.empty() && file_identity(out_dir, &out_id)) skip.insert(out_id);
  std::vector<std::pair<std::string, fs::path>> jobs;
  for (const std::string& in : inputs) {
    std::error_code ec;
    if (fs::is_directory(in, ec)) {
      std::vector<std::string> problems;
      std::vector<fs::path> folders;
      const std::vector<fs::path> files = walk_files(in, &problems, skip, &folders);
      for (const std::string& p : problems) spdlog::warn("{}", p);
      std::vector<fs::path> found;
      for (const fs::path& rel : files) {
        if (protect) protect->add(fs::path(in) / rel);
        if (lower(rel.extension().string()) == ".wav") found.push_back(rel);
      }
      if (protect)
        for (const fs::path& f : folders) protect->add(f);
      if (found.empty()) fail(in, "no .wav files in this folder");
      // the output stem is the path as walked (a link's own name), never resolved through the link
      for (const fs::path& rel : found)
        jobs.push_back({(fs::path(in) / rel).string(), fs::path(rel).replace_extension()});
    } else if (fs::is_regular_file(in, ec)) {
      jobs.push_back({in, fs::path(in).filename().replace_extension()});
      if (protect) {
        protect->add(in);
        fs::path dir = fs::path(in).parent_path();
        if (dir.empty()) dir = ".";
        for (const FolderEntry& e : list_folder(dir, nullptr))  // its transcripts beside it
          if (e.kind == FolderEntry::kFile && base_name(e.path) == base_name(in)) protect->add(e.path);
      }
    } else {
      fail(in, "no such file or folder");
    }
  }
  return jobs;
}

void prepare_out_dir(const std::string& out_dir, const std::vector<fs::path>& stems, const InputSet& protect,
                     CreatedFolders* made) {
  refuse_output("--out", out_dir, protect, "outputs never go among the inputs");
  for (const fs::path& stem : stems)
    for (const char* ext : {".PHN", ".TextGrid"}) {
      const fs::path file = (fs::path(out_dir) / stem).string() + ext;
      const std::string in = protect.same_as(file);
      if (!in.empty())
        throw std::invalid_argument("--out " + out_dir + ": " + file.string() + " would replace the input " + in +
                                    " (an output never replaces an input); give another --out folder");
    }
  made->create(out_dir, "--out");  // removed again if the command fails before writing into it
  check_writable_folder("--out", out_dir);
}

}  // namespace timitseg::eval
