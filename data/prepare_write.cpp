// `timitseg prepare`, the writing stage: one split's safetensors file and its
// duration statistics, cmvn.safetensors and phones.json, into the staging
// folder of data/prepare.cpp.
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

// The duration statistics of one split for durations.json (frames of each phone, 61 and 39 phones).
json duration_stats(std::map<int, std::map<std::string, std::vector<int64_t>>>& durs, double frame_shift_ms) {
  json dj = {{"unit", duration_unit(frame_shift_ms)}};
  for (int set : {61, 39}) {
    json per = json::object();
    for (const auto& [phone, v] : durs[set]) per[phone] = duration_entry(v);
    dj[std::to_string(set)] = per;
  }
  return dj;
}

}  // namespace

// One split: concatenate, write STAGE/SPLIT.safetensors, hash, count, duration statistics.
SplitOut build_split(const std::string& split, const std::vector<size_t>& idx, const std::vector<CorpusUtterance>& work,
                     const std::vector<ProcessedUtterance>& results, const FeatureOptions& fo, const json& opts_json,
                     const fs::path& stage) {
  const PhoneSet& ps = PhoneSet::timit();
  const int dim = fo.dim();
  SplitOut out;
  int64_t F = 0, S = 0;
  std::vector<std::vector<Segment>> segs(idx.size());
  for (size_t k = 0; k < idx.size(); ++k) {
    F += static_cast<int64_t>(results[idx[k]].labels.size());
    segs[k] = frame_segments(results[idx[k]].labels);
    S += static_cast<int64_t>(segs[k].size());
  }
  std::vector<float> feats;  // [F][dim]
  feats.reserve(static_cast<size_t>(F) * dim);
  std::vector<int32_t> labels, seg_flat;
  labels.reserve(F);
  seg_flat.reserve(S * 3);
  std::vector<int64_t> foff{0}, soff{0}, nsamp;
  json utts = json::array();
  std::set<std::string> speakers;
  double seconds = 0;
  std::map<int, std::map<std::string, std::vector<int64_t>>> durs;  // set -> phone -> durations (frames)
  for (size_t k = 0; k < idx.size(); ++k) {
    const ProcessedUtterance& r = results[idx[k]];
    const CorpusUtterance& u = work[idx[k]];
    feats.insert(feats.end(), r.features.begin(), r.features.end());
    labels.insert(labels.end(), r.labels.begin(), r.labels.end());
    foff.push_back(foff.back() + static_cast<int64_t>(r.labels.size()));
    for (const auto& s : segs[k]) seg_flat.insert(seg_flat.end(), {s.start, s.length, s.label});
    soff.push_back(soff.back() + static_cast<int64_t>(segs[k].size()));
    nsamp.push_back(r.num_samples);
    // absolute, so that Utterance::audio_path works from any working directory
    utts.push_back({{"id", u.id()}, {"speaker", u.speaker},
                    {"audio", fs::absolute(u.wav_path).lexically_normal().string()}});
    speakers.insert(u.speaker);
    seconds += r.seconds;
    for (int set : {61, 39}) {
      std::vector<int32_t> mapped(r.labels.size());
      for (size_t t = 0; t < mapped.size(); ++t) mapped[t] = ps.map(r.labels[t], set);
      for (const auto& s : frame_segments(mapped)) durs[set][ps.names(set)[s.label]].push_back(s.length);
    }
  }
  st::File f;
  f.metadata["format_version"] = std::to_string(kPreparedFormatVersion);
  f.metadata["split"] = split;
  f.metadata["feature_options"] = opts_json.dump();
  f.metadata["utterances"] = utts.dump();
  f.metadata["labels"] = "index into phones61 of phones.json (q merged into the preceding phone)";
  f.tensors["features"] = st::Tensor::from<float>({F, dim}, feats);
  f.tensors["labels"] = st::Tensor::from<int32_t>({F}, labels);
  f.tensors["utt_frame_offsets"] = st::Tensor::from<int64_t>({static_cast<int64_t>(foff.size())}, foff);
  f.tensors["num_samples"] = st::Tensor::from<int64_t>({static_cast<int64_t>(nsamp.size())}, nsamp);
  f.tensors["segments"] = st::Tensor::from<int32_t>({S, 3}, seg_flat);
  f.tensors["utt_segment_offsets"] = st::Tensor::from<int64_t>({static_cast<int64_t>(soff.size())}, soff);
  const std::string name = split + ".safetensors";
  st::save((stage / name).string(), f);
  uint64_t bytes = 0;
  const std::string sha = sha256_file((stage / name).string(), &bytes);
  out.file = {{"bytes", bytes}, {"sha256", sha}};
  out.counts = {{"utterances", idx.size()}, {"frames", F}, {"speakers", speakers.size()}, {"seconds", seconds}};
  out.count = PrepareSummary::SplitCount{split, static_cast<int64_t>(idx.size()), F,
                                         static_cast<int64_t>(speakers.size()), seconds};
  out.durations = duration_stats(durs, fo.frame_shift_ms);
  return out;
}

// STAGE/cmvn.safetensors: mean and variance of the train split, float64
// accumulation in utterance order, two-pass variance (no cancellation).
void write_cmvn(const std::vector<size_t>& train, const std::vector<ProcessedUtterance>& results, int dim, const fs::path& stage) {
  std::vector<double> s1(dim, 0.0), s2(dim, 0.0);
  int64_t n = 0;
  for (size_t i : train) {
    const auto& x = results[i].features;
    const size_t T = results[i].labels.size();
    for (size_t t = 0; t < T; ++t)
      for (int d = 0; d < dim; ++d) s1[d] += x[t * dim + d];
    n += static_cast<int64_t>(T);
  }
  std::vector<double> mean(dim), var(dim, 0.0);
  for (int d = 0; d < dim; ++d) mean[d] = s1[d] / static_cast<double>(n);
  for (size_t i : train) {
    const auto& x = results[i].features;
    const size_t T = results[i].labels.size();
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
