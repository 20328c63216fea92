// Loading a prepared WORKDIR (see data/dataset.h and docs/data.md): every file
// is checked against the SHA-256 and size recorded in WORKDIR/manifest.json
// before it is parsed.
#include "data/dataset.h"
#include "data/augment.h"

#include <climits>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "common/files.h"
#include "common/safetensors.h"
#include "common/sha256.h"
#include "data/phone_set.h"

namespace fs = std::filesystem;

namespace timitseg::data {

const std::vector<std::string>& split_names() {
  static const std::vector<std::string> names = common::enum_words<SplitName>();
  return names;
}

namespace {

// x[t][d] = (x[t][d] - mean[d]) / sqrt(max(var[d], kCmvnVarFloor)) for the num_frames rows of feats [T][dim].
void normalize(float* feats, int64_t num_frames, const std::vector<double>& mean, const std::vector<double>& var) {
  const size_t dim = mean.size();
  if (var.size() != dim) throw std::invalid_argument("Cmvn: mean and var have different sizes");
  std::vector<double> inv(dim);
  for (size_t d = 0; d < dim; ++d) inv[d] = 1.0 / std::sqrt(std::max(var[d], kCmvnVarFloor));
  for (int64_t t = 0; t < num_frames; ++t) {
    float* row = feats + t * static_cast<int64_t>(dim);
    for (size_t d = 0; d < dim; ++d) row[d] = static_cast<float>((row[d] - mean[d]) * inv[d]);
  }
}

}  // namespace

void Cmvn::apply(float* feats, int64_t num_frames, const std::string& utterance_id) const {
  const size_t dim = mean.size();
  if (per_speaker) {
    if (!speakers) throw std::logic_error("Cmvn: data.cmvn speaker without speaker statistics (Cmvn::with_speakers)");
    const auto it = speakers->of_utterance.find(utterance_id);
    if (it == speakers->of_utterance.end())
      throw std::logic_error("Cmvn: no speaker statistics for utterance '" + utterance_id + "' (data.cmvn speaker)");
    const CmvnStats& st = speakers->stats[it->second];
    if (st.mean.size() != dim) throw std::invalid_argument("Cmvn: speaker statistics of another dimension");
    return normalize(feats, num_frames, st.mean, st.var);
  }
  if (per_utterance)
    return utterance_cmvn(feats, num_frames, static_cast<int64_t>(dim), kCmvnVarFloor);
  normalize(feats, num_frames, mean, var);
}

// Two passes in float64, frame by frame in order: for one utterance the same
// numbers as utterance_cmvn (data/augment.h), so a one-utterance speaker is
// normalized exactly as data.cmvn utterance would.
CmvnStats frame_stats(const std::vector<const Utterance*>& utts) {
  if (utts.empty()) throw std::invalid_argument("frame_stats: no utterance");
  const size_t D = static_cast<size_t>(utts[0]->dim);
  CmvnStats st{std::vector<double>(D, 0.0), std::vector<double>(D, 0.0)};
  int64_t T = 0;
  for (const Utterance* u : utts) {
    if (static_cast<size_t>(u->dim) != D || u->features.size() != static_cast<size_t>(u->num_frames) * D)
      throw std::invalid_argument("utterance " + u->id + ": features are not [num_frames][" + std::to_string(D) + "]");
    for (size_t i = 0; i < u->features.size(); ++i) st.mean[i % D] += u->features[i];
    T += u->num_frames;
  }
  if (T < 1) throw std::invalid_argument("utterance " + utts[0]->id + ": no frames for CMVN statistics");
  for (double& m : st.mean) m /= static_cast<double>(T);
  for (const Utterance* u : utts)
    for (size_t i = 0; i < u->features.size(); ++i) {
      const double c = u->features[i] - st.mean[i % D];
      st.var[i % D] += c * c;
    }
  for (double& v : st.var) v /= static_cast<double>(T);
  return st;
}

Cmvn Cmvn::with_speakers(const std::vector<const Utterance*>& utts) const {
  Cmvn out = *this;
  if (!per_speaker) return out;
  auto sp = speakers ? std::make_shared<SpeakerCmvn>(*speakers) : std::make_shared<SpeakerCmvn>();
  std::map<std::string, std::vector<const Utterance*>> by_speaker;  // each speaker's utterances, in utts' order
  for (const Utterance* u : utts) by_speaker[u->speaker].push_back(u);
  for (const auto& [speaker, of] : by_speaker) {
    const size_t k = sp->stats.size();
    sp->stats.push_back(frame_stats(of));
    for (const Utterance* u : of)
      if (!sp->of_utterance.emplace(u->id, k).second)
        throw std::invalid_argument("data.cmvn speaker: utterance id '" + u->id + "' twice in the splits read");
  }
  out.speakers = std::move(sp);
  return out;
}

Cmvn Cmvn::each_utterance_alone() const {
  Cmvn out = *this;
  if (!per_speaker) return out;
  out.per_speaker = false;
  out.per_utterance = true;
  out.speakers = nullptr;
  return out;
}

std::vector<Segment> frame_segments(const std::vector<int32_t>& labels) {
  std::vector<Segment> out;
  for (size_t t = 0; t < labels.size(); ++t) {
    if (!out.empty() && out.back().label == labels[t]) ++out.back().length;
    else out.push_back({static_cast<int32_t>(t), 1, labels[t]});
  }
  return out;
}

void require_workdir(const std::string& workdir, const std::string& option) {
  std::error_code ec;
  if (!fs::exists(workdir, ec))  // nothing prepared there yet (or moved): --force is no help
    throw std::runtime_error(workdir + ": no such folder (data.workdir is a prepared WORKDIR); make it with "
                             "`timitseg prepare --timit CORPUS --out " + workdir + "` (TIMIT's layout) or `timitseg "
                             "prepare --corpus PATH --out " + workdir + "` (another corpus), or point data.workdir at "
                             "one (" + option + ")");
}

namespace {

std::string rerun_hint() { return "; re-run `timitseg prepare` (with --force) to rebuild the cache"; }

// Utterance::reference from its metadata {"rate": N, "phones": [[start, end, label], ...]}
// (prepare --corpus); a value out of range is a json out_of_range error, named by the caller.
void read_reference(const nlohmann::json& j, int32_t num_labels, Utterance& x) {
  x.reference_rate = j.at("rate").get<int32_t>();
  if (x.reference_rate <= 0) throw nlohmann::json::out_of_range::create(401, "reference rate is not positive", &j);
  for (const auto& p : j.at("phones")) {
    Utterance::RefInterval r{p.at(0).get<int64_t>(), p.at(1).get<int64_t>(), p.at(2).get<int32_t>()};
    const int64_t prev_end = x.reference.empty() ? 0 : x.reference.back().end;
    if (r.label < 0 || r.label >= num_labels || r.end <= r.start || r.start < 0 || r.start < prev_end)
      throw nlohmann::json::out_of_range::create(401, "reference phone [" + p.dump() + "] is out of order or range", &p);
    x.reference.push_back(r);
  }
}

nlohmann::json read_manifest(const std::string& workdir) {
  const std::string path = (fs::path(workdir) / "manifest.json").string();
  std::error_code ec;
  require_workdir(workdir, "--set data.workdir=DIR");  // train's option; evaluate and report check first with theirs
  // a folder without manifest.json and without the split files prepare writes: never prepared (a
  // prepared one that lost its manifest gets the rebuild hint below)
  if (fs::is_directory(workdir, ec) && !fs::exists(path, ec) &&
      !fs::exists(fs::path(workdir) / "train.safetensors", ec) && !fs::exists(fs::path(workdir) / "dev.safetensors", ec))
    throw std::runtime_error(path + ": missing (" + workdir + " is not a prepared WORKDIR); prepare one with "
                             "`timitseg prepare --timit CORPUS --out DIR` or `timitseg prepare --corpus PATH --out "
                             "DIR` (a new or empty folder) and point data.workdir at it");
  require_file(path, " (not a prepared WORKDIR?)" + rerun_hint());
  const std::string text = read_file(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": corrupt (" + e.what() + ")" + rerun_hint());
  }
  if (!j.is_object() || !j.contains("format_version") || !j.contains("files"))
    throw std::runtime_error(path + ": not a timitseg manifest" + rerun_hint());
  if (j["format_version"] != kPreparedFormatVersion)
    throw std::runtime_error(path + ": format version " + j["format_version"].dump() + ", this build reads " +
                             std::to_string(kPreparedFormatVersion) + rerun_hint());
  return j;
}

}  // namespace

std::string verified_file(const std::string& workdir, const std::string& name) {
  nlohmann::json m = read_manifest(workdir);
  const std::string path = (fs::path(workdir) / name).string();
  if (!m["files"].is_object() || !m["files"].contains(name)) throw std::runtime_error(path + ": not listed in manifest.json" + rerun_hint());
  // A malformed entry is named with the manifest (found by fuzzing: a missing or
  // ill-typed "bytes"/"sha256" escaped as a bare JSON library message, and a
  // "bytes" of 3.5e39 or -1 was converted to uint64_t, undefined behaviour).
  const auto malformed = [&](const std::string& why) {
    return std::runtime_error((fs::path(workdir) / "manifest.json").string() + ": entry of " + name +
                              " is malformed (needs \"bytes\" and \"sha256\"; " + why + ")" + rerun_hint());
  };
  uint64_t want_bytes = 0;
  std::string want_sum;
  try {
    const auto& entry = m["files"].at(name);
    const auto& bytes = entry.at("bytes");
    if (!bytes.is_number_unsigned()) throw malformed("\"bytes\" is " + bytes.dump() + ", not a byte count");
    want_bytes = bytes.get<uint64_t>();
    want_sum = entry.at("sha256").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    throw malformed(e.what());
  }
  require_file(path, rerun_hint());
  std::error_code ec;
  const uint64_t have_bytes = fs::file_size(path, ec);
  if (ec || have_bytes != want_bytes)
    throw std::runtime_error(path + ": size " + std::to_string(have_bytes) + " bytes, manifest says " +
                             std::to_string(want_bytes) + " (truncated or replaced)" + rerun_hint());
  uint64_t n = 0;
  const std::string sum = sha256_file(path, &n);
  if (sum != want_sum)
    throw std::runtime_error(path + ": SHA-256 checksum mismatch (the file was edited or corrupted)" + rerun_hint());
  return path;
}

namespace {

// The WORKDIR's label table (data/phone_set.h): TIMIT's 61 .PHN labels, or its
// inventory's phones; merged labels (TIMIT's q) are never frame labels. Throws,
// naming PATH, at the first of `labels` [F] that is not a phone index (kNoTimesLabel
// marks the frames of an utterance prepared from a transcript only: load_split checks
// that they are exactly those); returns the table's size.
int32_t check_frame_labels(const std::string& path, const std::string& workdir, const std::vector<int32_t>& labels) {
  const WorkdirPhoneSet inventory = load_workdir_phone_set(workdir);
  const int32_t num_labels = static_cast<int32_t>(inventory.labels.size());
  std::vector<char> frame_label(inventory.labels.size());
  std::string merged;
  for (size_t i = 0; i < frame_label.size(); ++i) {
    frame_label[i] = inventory.spec.resolve(inventory.labels[i]).kind == LabelKind::phone;
    if (!frame_label[i]) merged += (merged.empty() ? " other than " : ", ") + inventory.labels[i];
  }
  const int64_t F = static_cast<int64_t>(labels.size());
  for (int64_t t = 0; t < F; ++t)
    if (labels[t] != kNoTimesLabel &&
        (labels[t] < 0 || labels[t] >= num_labels || !frame_label[static_cast<size_t>(labels[t])]))
      throw std::runtime_error(path + ": tensor 'labels' index " + std::to_string(t) + ": " +
                               std::to_string(labels[t]) + " is not a phone index in [0, " +
                               std::to_string(num_labels) + ")" + merged + rerun_hint());
  return num_labels;
}

// Entry u of the "utterances" metadata into x: id, speaker, audio and the reference when present;
// returns false for an utterance prepared from a transcript only ("times": false).
bool read_utterance(const std::string& path, const nlohmann::json& entry, int64_t u, int32_t num_labels,
                    Utterance& x) {
  try {
    x.id = entry.at("id").get<std::string>();
    x.speaker = entry.at("speaker").get<std::string>();
    x.audio_path = entry.at("audio").get<std::string>();
    const bool times = !entry.contains("times") || entry.at("times").get<bool>();
    if (times && entry.contains("reference")) read_reference(entry.at("reference"), num_labels, x);  // throws json errors
    return times;
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": metadata 'utterances' entry " + std::to_string(u) +
                             " needs strings \"id\", \"speaker\" and \"audio\", and a \"reference\" (when present) "
                             "{\"rate\": N, \"phones\": [[start, end, label], ...]} (" + e.what() + ")" + rerun_hint());
  }
}

// The transcripts of a split (tensors "transcripts" [N], "transcript_optional" [N] and
// "utt_transcript_offsets" [U+1], present when one of its utterances has no times, and
// "transcript_slots" [N] when a word has several pronunciations) into
// out's utterances; times[u] says which have times. An utterance without times needs a
// transcript of phone indices with at least one obligatory phone and no two optional in a
// row, one with times none.
void read_transcripts(const std::string& path, const st::File& f, const std::vector<char>& times, int32_t num_labels,
                      Split& out) {
  const int64_t U = static_cast<int64_t>(times.size());
  auto bad = [&](int64_t u, const std::string& why) {
    return std::runtime_error(path + ": transcript of utterance " + std::to_string(u) + " (" +
                              out.utterances[static_cast<size_t>(u)].id + ") " + why + rerun_hint());
  };
  if (!f.has("utt_transcript_offsets")) {
    for (int64_t u = 0; u < U; ++u)
      if (!times[u]) throw bad(u, "is missing (no tensor 'utt_transcript_offsets')");
    return;
  }
  const st::Tensor& tt = f.get("transcripts", st::DType::I32, {-1});
  const int64_t N = tt.shape[0];
  const auto seq = tt.to<int32_t>();
  const auto opt = f.get("transcript_optional", st::DType::U8, {N}).to<uint8_t>();
  const auto off = f.get("utt_transcript_offsets", st::DType::I64, {U + 1}).to<int64_t>();
  // present when a word of the split has several pronunciations
  const auto slot = f.has("transcript_slots") ? f.get("transcript_slots", st::DType::I32, {N}).to<int32_t>()
                                              : std::vector<int32_t>{};
  if (off[0] != 0 || off[U] != N) throw std::runtime_error(path + ": transcript offsets do not cover the tensor" + rerun_hint());
  for (int64_t u = 0; u < U; ++u) {
    Utterance& x = out.utterances[static_cast<size_t>(u)];
    if (off[u + 1] < off[u] || off[u + 1] > N) throw bad(u, "has offsets out of order or range");
    if (static_cast<bool>(times[u]) != (off[u + 1] == off[u]))
      throw bad(u, times[u] ? "is given beside its times" : "is empty");
    bool obligatory = false;
    for (int64_t k = off[u]; k < off[u + 1]; ++k) {
      if (seq[k] < 0 || seq[k] >= num_labels) throw bad(u, "holds " + std::to_string(seq[k]) + ", not a phone index");
      if (opt[k] > 1 || (opt[k] && k > off[u] && opt[k - 1])) throw bad(u, "has a bad optional flag");
      obligatory = obligatory || !opt[k];
    }
    if (off[u + 1] > off[u] && !obligatory) throw bad(u, "has only optional phones");
    x.transcript.assign(seq.begin() + off[u], seq.begin() + off[u + 1]);
    x.transcript_optional.assign(opt.begin() + off[u], opt.begin() + off[u + 1]);
    if (!slot.empty()) {
      for (int64_t k = off[u]; k < off[u + 1]; ++k) {
        const bool first = k == off[u];
        const int32_t v = slot[k], prev = first ? 0 : slot[k - 1];
        if (v < 0 || (first ? v >> 8 != 0 : (v >> 8 < prev >> 8 || v >> 8 > (prev >> 8) + 1 ||
                                                (v >> 8 == prev >> 8 && (v & 255) < (prev & 255)))))
          throw bad(u, "has a bad slot entry " + std::to_string(v) + " (not (slot << 8) | alternative in order)");
      }
      bool several = false;  // a chain (every phone its own slot) stays empty
      for (int64_t k = off[u]; k < off[u + 1]; ++k) several = several || (slot[k] & 255) != 0;
      if (several) x.transcript_slot.assign(slot.begin() + off[u], slot.begin() + off[u + 1]);
    }
  }
}

// The segments of utterance u are the maximal runs of its labels (prepare
// writes frame_segments(labels)); anything else is a corrupted cache.
void check_segments(const std::string& path, int64_t u, const Utterance& x) {
  const std::vector<Segment> runs = frame_segments(x.labels);
  bool same = runs.size() == x.segments.size();
  for (size_t i = 0; same && i < runs.size(); ++i)
    same = runs[i].start == x.segments[i].start && runs[i].length == x.segments[i].length &&
           runs[i].label == x.segments[i].label;
  if (!same)
    throw std::runtime_error(path + ": tensor 'segments' of utterance " + std::to_string(u) + " (" + x.id +
                             ") are not the runs of its labels" + rerun_hint());
}

// Utterance u has frames, all kNoTimesLabel when it has no times (and no segments),
// none of them when it has.
void check_no_times(const std::string& path, int64_t u, const std::string& id, bool times,
                    const std::vector<int32_t>& labels, const std::vector<int64_t>& foff,
                    const std::vector<int64_t>& soff) {
  if (foff[u + 1] > static_cast<int64_t>(labels.size()))
    throw std::runtime_error(path + ": frame offsets of utterance " + std::to_string(u) + " pass the tensors" +
                             rerun_hint());
  if (foff[u + 1] == foff[u])  // prepare writes none (Utterance::has_times() tells them apart by their labels)
    throw std::runtime_error(path + ": utterance " + std::to_string(u) + " (" + id + ") has no frames" + rerun_hint());
  for (int64_t t = foff[u]; t < foff[u + 1]; ++t)
    if ((labels[t] == kNoTimesLabel) == times)
      throw std::runtime_error(path + ": tensor 'labels' index " + std::to_string(t) + " of utterance " +
                               std::to_string(u) + " (" + id + "): " + std::to_string(labels[t]) +
                               (times ? " in an utterance with times" : " in an utterance without times") +
                               rerun_hint());
  if (!times && soff[u + 1] != soff[u])
    throw std::runtime_error(path + ": utterance " + std::to_string(u) + " (" + id + ") has segments and no times" +
                             rerun_hint());
}

}  // namespace

Split load_split(const std::string& workdir, const std::string& split) {
  SplitName name{};
  if (!common::parse_enum(split, &name))
    throw std::invalid_argument("unknown split '" + split + "' (" + common::enum_choices<SplitName>() + ")");
  return load_split(workdir, name);
}

Split load_split(const std::string& workdir, SplitName name) {
  const std::string split = common::to_string(name);
  const std::string path = verified_file(workdir, split + ".safetensors");
  st::File f = st::load(path);
  Split out;
  out.name = split;
  auto meta = [&](const std::string& key) {
    auto it = f.metadata.find(key);
    if (it == f.metadata.end()) throw std::runtime_error(path + ": no metadata '" + key + "'" + rerun_hint());
    return it->second;
  };
  nlohmann::json utts;
  try {
    utts = nlohmann::json::parse(meta("utterances"));
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": metadata 'utterances' is not JSON" + rerun_hint());
  }
  if (!utts.is_array()) throw std::runtime_error(path + ": metadata 'utterances' is not a JSON array" + rerun_hint());
  const int64_t U = static_cast<int64_t>(utts.size());
  const st::Tensor& ft = f.get("features", st::DType::F32, {-1, -1});
  const int64_t F = ft.shape[0], dim = ft.shape[1];
  const auto feats = ft.to<float>();
  const auto labels = f.get("labels", st::DType::I32, {F}).to<int32_t>();
  const auto foff = f.get("utt_frame_offsets", st::DType::I64, {U + 1}).to<int64_t>();
  const auto nsamp = f.get("num_samples", st::DType::I64, {U}).to<int64_t>();
  const st::Tensor& segt = f.get("segments", st::DType::I32, {-1, 3});
  const auto segs = segt.to<int32_t>();
  const int64_t S = segt.shape[0];
  const auto soff = f.get("utt_segment_offsets", st::DType::I64, {U + 1}).to<int64_t>();
  if (foff[0] != 0 || foff[U] != F || soff[0] != 0 || soff[U] != S)
    throw std::runtime_error(path + ": offsets do not cover the tensors" + rerun_hint());
  // Values the model layer indexes with are checked here, once (found by
  // fuzzing: labels and segments were taken as they were).
  const int32_t num_labels = check_frame_labels(path, workdir, labels);
  if (F > INT32_MAX) throw std::runtime_error(path + ": more than 2^31 frames" + rerun_hint());
  out.utterances.resize(static_cast<size_t>(U));
  std::vector<char> times(static_cast<size_t>(U), 1);
  for (int64_t u = 0; u < U; ++u) {
    Utterance& x = out.utterances[static_cast<size_t>(u)];
    if (foff[u + 1] < foff[u] || soff[u + 1] < soff[u] || foff[u + 1] > F || soff[u + 1] > S)
      throw std::runtime_error(path + ": offsets out of order or range at utterance " + std::to_string(u) + rerun_hint());
    times[u] = read_utterance(path, utts[u], u, num_labels, x);
    check_no_times(path, u, x.id, times[u], labels, foff, soff);
    if (nsamp[u] < 0)
      throw std::runtime_error(path + ": tensor 'num_samples' index " + std::to_string(u) + ": " +
                               std::to_string(nsamp[u]) + " is negative" + rerun_hint());
    x.num_frames = static_cast<int32_t>(foff[u + 1] - foff[u]);
    x.dim = static_cast<int32_t>(dim);
    x.num_samples = nsamp[u];
    x.features.assign(feats.begin() + foff[u] * dim, feats.begin() + foff[u + 1] * dim);
    if (times[u]) x.labels.assign(labels.begin() + foff[u], labels.begin() + foff[u + 1]);
    for (int64_t s = soff[u]; s < soff[u + 1]; ++s)
      x.segments.push_back({segs[3 * s], segs[3 * s + 1], segs[3 * s + 2]});
    check_segments(path, u, x);
  }
  read_transcripts(path, f, times, num_labels, out);
  return out;
}

Cmvn load_cmvn(const std::string& workdir) {
  const std::string path = verified_file(workdir, "cmvn.safetensors");
  st::File f = st::load(path);
  Cmvn c;
  const st::Tensor& m = f.get("mean", st::DType::F64, {-1});
  c.mean = m.to<double>();
  c.var = f.get("var", st::DType::F64, {m.shape[0]}).to<double>();
  return c;
}

FeatureOptions load_feature_options(const std::string& workdir) {
  nlohmann::json m = read_manifest(workdir);
  const std::string path = (fs::path(workdir) / "manifest.json").string();
  if (!m.contains("feature_options")) throw std::runtime_error(path + ": no feature_options" + rerun_hint());
  try {
    return feature_options_from_json(m["feature_options"]);
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": " + e.what() + rerun_hint());
  }
}

}  // namespace timitseg::data
