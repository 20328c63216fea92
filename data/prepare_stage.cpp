// The staging folder, stop checks, manifest.json and duration statistics of
// `prepare` (data/prepare_stage.h), for the TIMIT path and other corpora alike.
#include "data/prepare_stage.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <sstream>
#include <stdexcept>

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
  if (!info.transcripts.is_null()) m["transcripts"] = info.transcripts;
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

Spill::~Spill() {
  if (wfd_ >= 0) ::close(wfd_);
  if (fd_ >= 0) ::close(fd_);
}

void Spill::open(const fs::path& p) {
  path_ = p;
  wfd_ = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (wfd_ < 0) throw std::runtime_error(p.string() + ": cannot create (" + std::strerror(errno) + ")");
}

void Spill::append(const void* data, size_t n) {
  constexpr size_t kBuffer = size_t{1} << 20;
  const char* at = static_cast<const char*>(data);
  if (buf_.size() + n > kBuffer) flush();
  if (n >= kBuffer) {  // a large piece goes out as it is
    buf_.assign(at, at + n);
    flush();
  } else {
    buf_.insert(buf_.end(), at, at + n);
  }
  bytes_ += n;
}

void Spill::flush() {
  for (size_t done = 0; done < buf_.size();) {
    const ssize_t put = ::write(wfd_, buf_.data() + done, buf_.size() - done);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) throw_write_error(path_.string(), put < 0 ? errno : ENOSPC);
    done += static_cast<size_t>(put);
  }
  buf_.clear();
}

void Spill::close_writer() {
  if (wfd_ < 0) return;
  flush();
  const int rc = ::close(wfd_);
  wfd_ = -1;
  if (rc != 0 && errno != EINTR) throw_write_error(path_.string(), errno);
}

void Spill::copy_into(AtomicFile& out) {
  open_for_reading();
  std::vector<char> buf(size_t{1} << 20);
  for (uint64_t at = 0; at < bytes_;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), bytes_ - at));
    read_at(at, buf.data(), n);  // throws naming the file when the bytes are not there
    out.write(buf.data(), n);
    at += n;
  }
  remove();
}

void Spill::open_for_reading() {
  close_writer();
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw std::runtime_error(path_.string() + ": cannot open (" + std::strerror(errno) + ")");
}

void Spill::read_at(uint64_t offset, void* dst, size_t n) const {
  if (offset + n > bytes_) throw std::runtime_error(path_.string() + ": read past the end of the stream");
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd_, static_cast<char*>(dst) + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      throw std::runtime_error(path_.string() + ": cannot read (" + (got < 0 ? std::strerror(errno) : "cut short") +
                               ")");
    done += static_cast<size_t>(got);
  }
}

void Spill::remove() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (wfd_ >= 0) ::close(wfd_);
  wfd_ = -1;
  std::error_code ec;
  fs::remove(path_, ec);
}

std::string json_escaped(const std::string& s) {
  const std::string q = nlohmann::json(s).dump();
  return q.substr(1, q.size() - 2);
}

void write_split_safetensors(const std::string& path, const std::map<std::string, std::string>& meta,
                             uint64_t utts_bytes, const std::function<void(AtomicFile&)>& write_utts,
                             const std::vector<StreamedTensor>& tensors) {
  if (meta.empty() || meta.rbegin()->first != "utterances" || !meta.rbegin()->second.empty())
    throw std::logic_error(path + ": the streamed metadata must be the last key, \"utterances\", given empty");
  for (size_t i = 1; i < tensors.size(); ++i)
    if (!(tensors[i - 1].name < tensors[i].name)) throw std::logic_error(path + ": tensors not in name order");
  nlohmann::json h = nlohmann::json::object();
  nlohmann::json m = nlohmann::json::object();
  for (const auto& [k, v] : meta) m[k] = v;
  h["__metadata__"] = m;
  uint64_t off = 0;
  for (const auto& t : tensors) {
    h[t.name] = {{"dtype", st::dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes}}};
    off += t.bytes;
  }
  // "utterances" sorts last in __metadata__; inside a dumped string every quote is escaped,
  // so the unescaped `"utterances":""` occurs once, as the key and its empty value
  const std::string dumped = h.dump(), key = "\"utterances\":\"\"";
  const size_t at = dumped.rfind(key) + key.size() - 1;  // the value's closing quote
  const std::string head = dumped.substr(0, at);
  std::string tail = dumped.substr(at);
  tail.append((8 - (head.size() + utts_bytes + tail.size()) % 8) % 8, ' ');
  const uint64_t header_size = head.size() + utts_bytes + tail.size();
  AtomicFile out(path);
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>((header_size >> (8 * i)) & 0xff);
  out.write(len, 8);
  out.write(head);
  write_utts(out);
  out.write(tail);
  for (const auto& t : tensors) t.write(out);
  out.commit();
}

}  // namespace timitseg::data
