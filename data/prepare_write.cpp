// `timitseg prepare`, the writing stage: one split's safetensors file and its
// duration statistics, cmvn.safetensors and phones.json, into the staging
// folder of data/prepare.cpp. The utterances' features and labels are read back
// from the staging folder's utterance spill, one utterance at a time, so memory
// holds their metadata, not the corpus.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "common/atomic_file.h"
#include "common/safetensors.h"
#include "common/sha256.h"
#include "data/phones.h"
#include "data/prepare_internal.h"
#include "data/prepare_stage.h"

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace timitseg::data {

namespace {

// set (61, 39) -> phone name -> run length (frames) -> count
using DurationHistograms = std::map<int, std::map<std::string, std::map<int64_t, int64_t>>>;

// The duration statistics of one split for durations.json (frames of each phone, 61 and 39 phones).
json duration_stats(DurationHistograms& durs, double frame_shift_ms) {
  json dj = {{"unit", duration_unit(frame_shift_ms)}};
  for (int set : {61, 39}) {
    json per = json::object();
    for (const auto& [phone, hist] : durs[set]) per[phone] = duration_entry(hist);
    dj[std::to_string(set)] = per;
  }
  return dj;
}

void read_features(const Spill& spill, const SpilledUtterance& r, int dim, std::vector<float>* x) {
  x->resize(static_cast<size_t>(r.frames) * dim);
  spill.read_at(r.features_at, x->data(), x->size() * sizeof(float));
}

void read_labels(const Spill& spill, const SpilledUtterance& r, std::vector<int32_t>* labels) {
  labels->resize(static_cast<size_t>(r.frames));
  spill.read_at(r.labels_at, labels->data(), labels->size() * sizeof(int32_t));
}

// What a split's header and small tensors hold, from the utterances' metadata
// and their labels read back: offsets [U+1], num_samples [U], the
// "utterances" metadata, speakers, seconds and the run-length histograms.
struct SplitIndex {
  std::vector<int64_t> foff{0}, soff{0}, nsamp;
  json utts = json::array();
  std::set<std::string> speakers;
  double seconds = 0.0;
  DurationHistograms durs;
};

SplitIndex index_split(const std::vector<size_t>& idx, const std::vector<CorpusUtterance>& work,
                       const std::vector<SpilledUtterance>& utts, const Spill& spill) {
  const PhoneSet& ps = PhoneSet::timit();
  SplitIndex x;
  std::vector<int32_t> labels;
  for (size_t i : idx) {
    const SpilledUtterance& r = utts[i];
    const CorpusUtterance& u = work[i];
    x.foff.push_back(x.foff.back() + r.frames);
    x.soff.push_back(x.soff.back() + r.segments);
    x.nsamp.push_back(r.num_samples);
    // absolute, so that Utterance::audio_path works from any working directory
    x.utts.push_back({{"id", u.id()}, {"speaker", u.speaker},
                      {"audio", fs::absolute(u.wav_path).lexically_normal().string()}});
    x.speakers.insert(u.speaker);
    x.seconds += r.seconds;
    read_labels(spill, r, &labels);
    for (int set : {61, 39}) {
      std::vector<int32_t> mapped(labels.size());
      for (size_t t = 0; t < mapped.size(); ++t) mapped[t] = ps.map(labels[t], set);
      for (const auto& s : frame_segments(mapped)) ++x.durs[set][ps.names(set)[s.label]][s.length];
    }
  }
  return x;
}

// STAGE/SPLIT.safetensors: the header and small tensors from `x`, features,
// labels and segments streamed from the spill utterance by utterance.
void write_split_file(const std::string& path, const std::string& split, const std::vector<size_t>& idx,
                      const std::vector<SpilledUtterance>& utts, const Spill& spill, int dim, const json& opts_json,
                      const SplitIndex& x) {
  const int64_t U = static_cast<int64_t>(idx.size()), F = x.foff.back(), S = x.soff.back();
  const std::map<std::string, std::string> meta = {
      {"format_version", std::to_string(kPreparedFormatVersion)},
      {"split", split},
      {"feature_options", opts_json.dump()},
      {"utterances", ""},
      {"labels", "index into phones61 of phones.json (q merged into the preceding phone)"}};
  const std::string utts_text = json_escaped(x.utts.dump());
  auto each = [&](AtomicFile& out, auto&& one) {
    for (size_t i : idx) one(out, utts[i]);
  };
  auto features = [&](AtomicFile& out) {
    std::vector<float> v;
    each(out, [&](AtomicFile& o, const SpilledUtterance& r) {
      read_features(spill, r, dim, &v);
      o.write(v.data(), v.size() * sizeof(float));
    });
  };
  auto labels = [&](AtomicFile& out) {
    std::vector<int32_t> v;
    each(out, [&](AtomicFile& o, const SpilledUtterance& r) {
      read_labels(spill, r, &v);
      o.write(v.data(), v.size() * sizeof(int32_t));
    });
  };
  auto segments = [&](AtomicFile& out) {
    std::vector<int32_t> v, flat;
    each(out, [&](AtomicFile& o, const SpilledUtterance& r) {
      read_labels(spill, r, &v);
      flat.clear();
      for (const auto& s : frame_segments(v)) flat.insert(flat.end(), {s.start, s.length, s.label});
      o.write(flat.data(), flat.size() * sizeof(int32_t));
    });
  };
  auto vec = [](const std::vector<int64_t>& v) {
    return [&v](AtomicFile& out) { out.write(v.data(), v.size() * sizeof(int64_t)); };
  };
  const uint64_t f4 = sizeof(float), i4 = sizeof(int32_t), i8 = sizeof(int64_t);
  write_split_safetensors(path, meta, utts_text.size(), [&](AtomicFile& out) { out.write(utts_text); },
                          {{"features", st::DType::F32, {F, dim}, static_cast<uint64_t>(F) * dim * f4, features},
                           {"labels", st::DType::I32, {F}, static_cast<uint64_t>(F) * i4, labels},
                           {"num_samples", st::DType::I64, {U}, static_cast<uint64_t>(U) * i8, vec(x.nsamp)},
                           {"segments", st::DType::I32, {S, 3}, static_cast<uint64_t>(S) * 3 * i4, segments},
                           {"utt_frame_offsets", st::DType::I64, {U + 1}, static_cast<uint64_t>(U + 1) * i8, vec(x.foff)},
                           {"utt_segment_offsets", st::DType::I64, {U + 1}, static_cast<uint64_t>(U + 1) * i8,
                            vec(x.soff)}});
}

}  // namespace

// One split: index it, write STAGE/SPLIT.safetensors from the spill, hash, count, duration statistics.
SplitOut build_split(const std::string& split, const std::vector<size_t>& idx, const std::vector<CorpusUtterance>& work,
                     const std::vector<SpilledUtterance>& utts, const Spill& spill, const FeatureOptions& feature_opts,
                     const json& opts_json, const fs::path& stage) {
  SplitIndex x = index_split(idx, work, utts, spill);
  const std::string name = split + ".safetensors";
  write_split_file((stage / name).string(), split, idx, utts, spill, feature_opts.dim(), opts_json, x);
  SplitOut out;
  uint64_t bytes = 0;
  const std::string sha = sha256_file((stage / name).string(), &bytes);
  const int64_t F = x.foff.back();
  out.file = {{"bytes", bytes}, {"sha256", sha}};
  out.counts = {{"utterances", idx.size()}, {"frames", F}, {"speakers", x.speakers.size()}, {"seconds", x.seconds}};
  out.count = PrepareSummary::SplitCount{split, static_cast<int64_t>(idx.size()), F,
                                         static_cast<int64_t>(x.speakers.size()), x.seconds};
  out.durations = duration_stats(x.durs, feature_opts.frame_shift_ms);
  return out;
}

// STAGE/cmvn.safetensors: mean and variance of the train split, float64
// accumulation in utterance order, two-pass variance (no cancellation); each
// pass reads the train features back from the spill, an utterance at a time.
void write_cmvn(const std::vector<size_t>& train, const std::vector<SpilledUtterance>& utts, const Spill& spill, int dim,
                const fs::path& stage) {
  std::vector<double> s1(dim, 0.0), s2(dim, 0.0);
  std::vector<float> x;  // [T][dim]
  int64_t n = 0;
  for (size_t i : train) {
    read_features(spill, utts[i], dim, &x);
    const size_t T = static_cast<size_t>(utts[i].frames);
    for (size_t t = 0; t < T; ++t)
      for (int d = 0; d < dim; ++d) s1[d] += x[t * dim + d];
    n += static_cast<int64_t>(T);
  }
  std::vector<double> mean(dim), var(dim, 0.0);
  for (int d = 0; d < dim; ++d) mean[d] = s1[d] / static_cast<double>(n);
  for (size_t i : train) {
    read_features(spill, utts[i], dim, &x);
    const size_t T = static_cast<size_t>(utts[i].frames);
    for (size_t t = 0; t < T; ++t)
      for (int d = 0; d < dim; ++d) {
        const double c = x[t * dim + d] - mean[d];
        s2[d] += c * c;
      }
  }
  for (int d = 0; d < dim; ++d) var[d] = s2[d] / static_cast<double>(n);
  write_cmvn_file(stage, mean, var, n);
}

// STAGE/phones.json: the phone sets and the 61 -> 48 / 39 maps.
void write_phone_maps(const fs::path& stage) {
  const PhoneSet& ps = PhoneSet::timit();
  json ph;
  ph["phones61"] = ps.names(61);
  ph["phones48"] = ps.names(48);
  ph["phones39"] = ps.names(39);
  std::vector<int> m48, m39;
  for (int i = 0; i < 61; ++i) { m48.push_back(ps.map(i, 48)); m39.push_back(ps.map(i, 39)); }
  ph["map61to48"] = m48;
  ph["map61to39"] = m39;
  ph["q"] = "q has no 48/39 target (-1 in the maps); its frames take the label of the preceding phone, or of the "
            "following phone when q starts the utterance, so labels never hold q";
  write_file_atomic((stage / "phones.json").string(), ph.dump(2) + "\n");
}

// The kind of a problem line, for prepare's summary (counts per kind); the
// message without its numbers and names.
std::string problem_kind(const std::string& m) {
  static const std::vector<std::pair<const char*, const char*>> kinds = {
      {"truncated audio", "truncated audio"},
      {"no audio samples", "no audio samples"},
      {"invisible character", "invisible character"},
      {"channels, expected mono", "not mono"},
      {"sample rate", "wrong sample rate"},
      {"-bit samples", "not 16-bit PCM"},
      {"non-integer samples", "not 16-bit PCM"},
      {"no matching .PHN", "no .PHN"},
      {"no matching .WAV", "no .WAV"},
      {"past the end of the audio", "PHN past the end of the audio"},
      {"overlaps the previous phone", "overlapping phones"},
      {"is not before end", "reversed or empty segment"},
      {"is negative", "negative start"},
      {"unknown phone", "unknown phone"},
      {"expected 'start end phone'", "unreadable PHN line"},
      {"no phones", "no phones"},
      {"only q", "no phones"},
      {"after the last phone", "audio after the last phone"},
      {"gap of", "gap between phones"},
      {"duplicate of", "duplicate file"},
      {"too short for one feature frame", "too short"},
      {"no speaker of the standard", "own corpus split"},
      {"cannot read", "unreadable file"},
  };
  for (const auto& [needle, kind] : kinds)
    if (m.find(needle) != std::string::npos) return kind;
  if (m.find("NIST SPHERE") != std::string::npos || m.find("RIFF") != std::string::npos ||
      m.find("not a NIST") != std::string::npos || m.find("empty file") != std::string::npos)
    return "unreadable audio header";
  return "other";
}

}  // namespace timitseg::data
