// The staging folder, stop checks, manifest.json and duration statistics of
// `prepare` (data/prepare_stage.h), for the TIMIT path and other corpora alike.
#include "data/prepare_stage.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include <unistd.h>

#include "common/atomic_file.h"
#include "common/interrupt.h"
#include "common/safetensors.h"
#include "common/sha256.h"

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace timitseg::data {

StagedWorkdir::StagedWorkdir(const std::string& workdir) : wd_(workdir) {
  made_.create(wd_, "--out");  // a failed or interrupted prepare leaves no WORKDIR it created
  remove_stale_temporaries(wd_.string());
  stage_ = wd_ / (".staging.tmp." + std::to_string(::getpid()) + ".0");
  std::error_code ec;
  fs::remove_all(stage_, ec);
  fs::create_directory(stage_);
}

StagedWorkdir::~StagedWorkdir() {
  std::error_code ec;
  fs::remove_all(stage_, ec);
  // then made_'s destructor: the folders this prepare created, if empty (none after commit)
}

void StagedWorkdir::record(const std::string& name) {
  uint64_t bytes = 0;
  const std::string sha = sha256_file((stage_ / name).string(), &bytes);
  files_[name] = {{"bytes", bytes}, {"sha256", sha}};
}

void StagedWorkdir::run(const std::function<void()>& body) const {
  try {
    body();
  } catch (const Interrupted&) {
    throw;
  } catch (const std::exception& e) {
    // name the destination, not the staging folder
    std::string msg = e.what();
    const std::string from = stage_.string(), to = wd_.string();
    for (size_t at = msg.find(from); at != std::string::npos; at = msg.find(from, at + to.size()))
      msg.replace(at, from.size(), to);
    throw std::runtime_error(msg);
  }
}

void StagedWorkdir::commit(const std::function<void(const fs::path&, const json&)>& write_manifest) {
  write_manifest(stage_, files_);
  throw_if_stopped("prepare", "every utterance processed, nothing written (" + wd_.string() +
                                  " is as it was); run the same command again");
  // into place: renames only (no space needed); a half-renamed WORKDIR has
  // no manifest.json, so it never looks valid and the next prepare rebuilds it
  fs::remove(wd_ / "manifest.json");
  for (auto it = files_.begin(); it != files_.end(); ++it) fs::rename(stage_ / it.key(), wd_ / it.key());
  fs::rename(stage_ / "manifest.json", wd_ / "manifest.json");
  made_.keep();
}

void check_prepare_stop(int64_t processed, int64_t total, const std::string& workdir) {
  throw_if_stopped("prepare", std::to_string(processed) + " of " + std::to_string(total) +
                                  " utterances processed, nothing written (" + workdir +
                                  " is as it was); run the same command again");
}

void write_prepare_manifest(const fs::path& stage, const ManifestInfo& info, const json& files,
                            const json& split_counts, const PrepareSummary& sum) {
  json m;
  m["format"] = "timitseg prepared TIMIT";  // the WORKDIR layout's name (any corpus)
  m["format_version"] = kPreparedFormatVersion;
  if (!info.corpus_format.empty()) m["corpus_format"] = info.corpus_format;
  m["source"] = info.source;
  m["corpus_fingerprint"] = info.fingerprint;
  m["fingerprint_rule"] = info.fingerprint_rule;
  m["feature_options"] = info.opts_json;
  m["checksum_algorithm"] = "sha256";
  m["files"] = files;
  m["phone_set"] = info.phone_set;  // the inventory the frame labels index (data/phone_set.h)
  if (!info.phone_set_source.empty()) m["phone_set_source"] = info.phone_set_source;
  m["splits"] = split_counts;
  m["split_options"] = info.split_opts;
  m["split_rule"] = info.split_rule;
  m["utterances_found"] = sum.utterances_found;
  m["sa_excluded"] = sum.sa_excluded;
  m["skipped"] = sum.skipped;
  m["warnings"] = sum.warnings;
  m["skipped_by_kind"] = sum.skipped_by_kind;
  m["warnings_by_kind"] = sum.warnings_by_kind;
  m["problems"] = sum.problems;
  write_file_atomic((stage / "manifest.json").string(), m.dump(2) + "\n");
}

void write_cmvn_file(const fs::path& stage, const std::vector<double>& mean, const std::vector<double>& var,
                     int64_t frames) {
  const int dim = static_cast<int>(mean.size());
  st::File f;
  f.metadata["split"] = "train";
  f.metadata["frames"] = std::to_string(frames);
  f.metadata["apply"] = "x = (x - mean) / sqrt(max(var, 1e-10))";
  f.tensors["mean"] = st::Tensor::from<double>({dim}, mean);
  f.tensors["var"] = st::Tensor::from<double>({dim}, var);
  f.tensors["frames"] = st::Tensor::from<int64_t>({1}, &frames);
  st::save((stage / "cmvn.safetensors").string(), f);
}

std::string duration_unit(double frame_shift_ms) {
  std::ostringstream unit;
  unit << "frames of " << frame_shift_ms << " ms (maximal runs of frame labels)";
  return unit.str();
}

json duration_entry(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  double sum = 0;
  for (auto x : v) sum += static_cast<double>(x);
  const double median = (n % 2) ? static_cast<double>(v[n / 2]) : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  const size_t rank = static_cast<size_t>(std::ceil(0.95 * static_cast<double>(n)));  // nearest rank
  return {{"count", static_cast<int64_t>(n)},
          {"mean", sum / n},
          {"median", median},
          {"p95", static_cast<double>(v[std::max<size_t>(rank, 1) - 1])},
          {"max", static_cast<double>(v.back())}};
}

json duration_entry(const std::map<int64_t, int64_t>& hist) {
  int64_t n = 0, sum = 0;  // integers: the vector version's double sum of integers below 2^53 is exact too
  for (const auto& [len, count] : hist) n += count, sum += len * count;
  // the value of rank r (0-based) in the sorted run lengths
  auto at = [&](int64_t r) {
    for (const auto& [len, count] : hist) {
      if (r < count) return static_cast<double>(len);
      r -= count;
    }
    return static_cast<double>(hist.rbegin()->first);
  };
  const double median = (n % 2) ? at(n / 2) : 0.5 * (at(n / 2 - 1) + at(n / 2));
  const auto rank = static_cast<int64_t>(std::ceil(0.95 * static_cast<double>(n)));  // nearest rank
  return {{"count", n},
          {"mean", static_cast<double>(sum) / n},
          {"median", median},
          {"p95", at(std::max<int64_t>(rank, 1) - 1)},
          {"max", static_cast<double>(hist.rbegin()->first)}};
}

}  // namespace timitseg::data
