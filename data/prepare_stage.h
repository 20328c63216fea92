// The WORKDIR side of `prepare`, shared by the TIMIT path (data/prepare.cpp)
// and other corpora (data/prepare_corpus_write.cpp): the staging folder every
// file is written into and renamed out of only when complete, the stop
// (SIGINT/SIGTERM) checks between utterances, manifest.json and the
// duration statistics of durations.json.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/safetensors.h"
#include "common/walk.h"
#include "data/dataset.h"

namespace timitseg::data {

// WORKDIR/.staging.tmp.PID.0 for one prepare. The constructor creates WORKDIR
// (and missing parents, recorded: CreatedFolders), removes the temporaries
// and staging folders of killed runs, and creates the staging folder; the
// destructor removes the staging folder and, unless commit() succeeded, the
// folders it created when they are empty. So a prepare that fails or is
// interrupted leaves the WORKDIR as it was, or no WORKDIR at all.
class StagedWorkdir {
 public:
  explicit StagedWorkdir(const std::string& workdir);
  ~StagedWorkdir();
  StagedWorkdir(const StagedWorkdir&) = delete;
  StagedWorkdir& operator=(const StagedWorkdir&) = delete;

  const std::filesystem::path& stage() const { return stage_; }
  // STAGE/NAME's size and SHA-256 into files() (manifest.json's "files", in call order).
  void record(const std::string& name);
  // An entry {"bytes", "sha256"} hashed elsewhere (a split file built on a worker thread).
  void add(const std::string& name, const nlohmann::ordered_json& entry) { files_[name] = entry; }
  const nlohmann::ordered_json& files() const { return files_; }
  // Runs body(); an Interrupted passes unchanged, any other exception comes
  // back as std::runtime_error with the staging folder's path replaced by WORKDIR's.
  void run(const std::function<void()>& body) const;
  // STAGE/manifest.json written (write_prepare_manifest), a last stop check,
  // then every recorded file renamed into WORKDIR, manifest.json last (a
  // half-renamed WORKDIR has no manifest.json, so it never looks valid).
  void commit(const std::function<void(const std::filesystem::path& stage, const nlohmann::ordered_json& files)>&
                  write_manifest);

 private:
  CreatedFolders made_;
  std::filesystem::path wd_, stage_;
  nlohmann::ordered_json files_ = nlohmann::ordered_json::object();
};

// SIGINT/SIGTERM between utterances (common/interrupt.h): throws Interrupted,
// "prepare interrupted (SIGINT): N of M utterances processed, nothing written
// (WORKDIR is as it was); run the same command again".
void check_prepare_stop(int64_t processed, int64_t total, const std::string& workdir);

// What manifest.json records besides the files, the split counts and the summary.
struct ManifestInfo {
  std::string corpus_format;  // "" for the TIMIT path (no key)
  std::string source, fingerprint, fingerprint_rule;
  nlohmann::ordered_json opts_json, split_opts;
  nlohmann::ordered_json split_rule;    // per split: how it was chosen
  nlohmann::ordered_json phone_set;     // write_workdir_phone_set's entry
  std::string phone_set_source;         // "" for the TIMIT path (no key)
  nlohmann::ordered_json transcripts;   // labels without times: how they became phones (null: no key)
};

// STAGE/manifest.json (written last: its presence marks a complete WORKDIR).
void write_prepare_manifest(const std::filesystem::path& stage, const ManifestInfo& info,
                            const nlohmann::ordered_json& files, const nlohmann::ordered_json& split_counts,
                            const PrepareSummary& sum);

// STAGE/cmvn.safetensors: the train split's per-dimension mean and population
// variance [dim] over `frames` frames, with how to apply them.
void write_cmvn_file(const std::filesystem::path& stage, const std::vector<double>& mean, const std::vector<double>& var,
                     int64_t frames);

// durations.json: "frames of SHIFT ms (maximal runs of frame labels)", and one
// phone's run lengths as {"count", "mean", "median", "p95" (nearest rank), "max"}.
std::string duration_unit(double frame_shift_ms);
nlohmann::ordered_json duration_entry(std::vector<int64_t> frames);
// The same entry from the run lengths' histogram (length -> count, count > 0):
// the same numbers, in memory the distinct lengths rather than every run
// (prepare --corpus keeps one per phone as its utterances stream past).
nlohmann::ordered_json duration_entry(const std::map<int64_t, int64_t>& histogram);

// An append-only file of the staging folder: one tensor's bytes (or the
// metadata's text) as the utterances come, copied into the split file at the
// end (prepare --corpus), or the features and labels of every utterance read
// back by offset (the TIMIT path). Not thread-safe: callers serialise append;
// read_at is safe on several threads once open_for_reading has run.
class Spill {
 public:
  Spill() = default;
  ~Spill();
  Spill(const Spill&) = delete;
  Spill& operator=(const Spill&) = delete;
  void open(const std::filesystem::path& p);
  void append(const void* data, size_t n);
  template <class T>
  void append(const std::vector<T>& v) { append(v.data(), v.size() * sizeof(T)); }
  void append(const std::string& s) { append(s.data(), s.size()); }
  uint64_t bytes() const { return bytes_; }
  // Its bytes onto `out` (read back as read_at does), then the file removed.
  void copy_into(AtomicFile& out);
  // Closes the writer and opens the file for read_at.
  void open_for_reading();
  // n bytes at `offset` into dst; throws naming the file when they are not there.
  void read_at(uint64_t offset, void* dst, size_t n) const;
  // Closes the file and removes it (its space is free before the WORKDIR is renamed into place).
  void remove();

 private:
  // Writes buf_ out; closes the writer (a failed close, a delayed write error, throws as a failed write).
  void flush();
  void close_writer();
  std::vector<char> buf_;  // appends gathered into writes of up to 1 MiB
  std::filesystem::path path_;
  int wfd_ = -1;  // written through a descriptor, so that a failed write says why (errno: a full disk)
  int fd_ = -1;   // read back (read_at)
  uint64_t bytes_ = 0;
};

// One tensor of a split file, written from elsewhere: write(out) puts exactly `bytes` bytes onto out.
struct StreamedTensor {
  std::string name;
  st::DType dtype = st::DType::F32;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
  std::function<void(AtomicFile& out)> write;
};

// PATH (atomically), byte for byte what st::save writes of a File with metadata
// `meta` and `tensors` (in name order): the value of meta's "utterances" (its
// last key, given empty) is the utts_bytes bytes write_utts puts out, already
// escaped as inside a JSON string. So a split file is assembled from streams on
// disk, not from tensors in memory.
void write_split_safetensors(const std::string& path, const std::map<std::string, std::string>& meta,
                             uint64_t utts_bytes, const std::function<void(AtomicFile& out)>& write_utts,
                             const std::vector<StreamedTensor>& tensors);

// A string as it stands inside a dumped JSON string (nlohmann's escapes, no quotes).
std::string json_escaped(const std::string& s);

}  // namespace timitseg::data
