// `prepare` of other corpora, the writing stage: utterances processed in
// chunks on all threads, appended in id order to per-split streams (features
// to a raw file in the staging folder; labels, offsets and segments, ~1/40 of
// the features, in memory), CMVN accumulated as they pass (Chan et al.'s
// pairwise merge of per-utterance means and squared deviations, float64), then
// each split's safetensors file written from its stream, byte for byte what
// st::save writes. Memory: a chunk of utterances, not the corpus.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <spdlog/spdlog.h>

#include "common/atomic_file.h"
#include "common/parallel.h"
#include "common/progress.h"
#include "common/safetensors.h"
#include "common/sha256.h"
#include "data/prepare_corpus_internal.h"
#include "data/prepare_stage.h"

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace timitseg::data {

std::string corpus_problem_kind(const std::string& m) {
  static const std::vector<std::pair<const char*, const char*>> kinds = {
      {"unknown label", "unknown label"},
      {"is dropped by phone set", "dropped label"},
      {"has no silence", "unknown label"},
      {"no interval tier named", "no such tier"},
      {"unreadable TextGrid", "unreadable TextGrid"},
      {"overlaps the previous interval", "overlapping intervals"},
      {"unsorted", "unsorted intervals"},
      {"start is not before end", "reversed or empty interval"},
      {"start is negative", "negative time"},
      {"past the end of the audio", "labels past the end of the audio"},
      {"is missing", "missing audio"},
      {"beside it (", "missing audio"},
      {".wav beside it", "missing audio"},
      {".words beside it", "no .words"},
      {"is a command", "wav.scp pipe"},
      {"not in the split file", "speaker not in --split-file"},
      {"no labels", "no labels"},
      {"duplicate utterance id", "duplicate utterance"},
      {"fields, the header has", "bad manifest row"},
      {"not a JSON object", "bad manifest row"},
      {"is not in wav.scp", "not in wav.scp"},
      {"is not in wav.scp/segments", "CTM utterance not in the data dir"},
      {"has no speaker", "no speaker"},
      {"no speaker (column", "no speaker"},
      {"no '#' line", "unreadable .phones"},
      {"expected '", "unreadable line"},
  };
  for (const auto& [needle, kind] : kinds)
    if (m.find(needle) != std::string::npos) return kind;
  return problem_kind(m);
}

namespace {

// One split, streamed: features appended to STAGE/.SPLIT.features.raw.
// Silence over [start, end): a phone of its own, or the silence before it extended.
void push_silence(json& phones, int64_t start, int64_t end, int sil, int prev_label) {
  if (prev_label == sil && !phones.empty()) phones.back()[1] = end;
  else phones.push_back({start, end, sil});
}

// The utterance's sample-accurate reference (Utterance::reference): its mapped
// intervals in samples of the file at `rate`, from the utterance's first sample
// to num_samples. As in the frame labels (corpus_frame_labels), audio that no
// interval covers is the set's silence (`sil` >= 0); gaps under 1 ms (rounded
// times) go to the phone before, as do all gaps of a set without silence.
json reference_json(const std::vector<MappedInterval>& m, int rate, int64_t num_samples, int sil) {
  json phones = json::array();
  const int64_t min_gap = std::max<int64_t>(1, rate / 1000);
  int64_t prev_end = 0;
  int prev_label = -1;
  auto push = [&](int64_t start, int64_t end, int label) {
    if (end <= start) return;  // shorter than a sample once rounded
    if (start - prev_end >= min_gap && sil >= 0) push_silence(phones, prev_end, start, sil, prev_label);
    else if (!phones.empty()) phones.back()[1] = start;  // the gap (or an overlap) to the phone before
    phones.push_back({start, end, label});
    prev_end = end, prev_label = label;
  };
  for (const MappedInterval& iv : m)
    push(std::max<int64_t>(0, std::llround(iv.start * rate)), std::min<int64_t>(num_samples, std::llround(iv.end * rate)),
         iv.index);
  if (num_samples - prev_end >= min_gap && sil >= 0) push_silence(phones, prev_end, num_samples, sil, prev_label);
  return {{"rate", rate}, {"phones", std::move(phones)}};
}

struct SplitStream {
  std::string name;
  fs::path raw_path;
  std::ofstream raw;
  int64_t frames = 0;
  std::vector<int32_t> labels, seg_flat;
  std::vector<int64_t> foff{0}, soff{0}, nsamp;
  // The split's "utterances" metadata, dumped as each utterance comes: the same bytes
  // as a json array's dump(), without holding a json object per utterance and label
  // (nlohmann's values took about 5 kB an utterance: most of the path's memory that
  // grew with the corpus).
  std::string utts_text = "[";
  std::set<std::string> speakers;
  double seconds = 0.0;
  std::map<int, std::vector<int64_t>> durs;  // phone -> run lengths (frames)

  // m: the utterance's mapped intervals, sil: the phone set's silence (-1: none)
  void add(const CorpusEntry& e, const ProcessedUtterance& r, const std::vector<MappedInterval>& m, int sil) {
    raw.write(reinterpret_cast<const char*>(r.features.data()),
              static_cast<std::streamsize>(r.features.size() * sizeof(float)));
    if (!raw) throw std::runtime_error(raw_path.string() + ": cannot write (disk full?)");
    frames += static_cast<int64_t>(r.labels.size());
    labels.insert(labels.end(), r.labels.begin(), r.labels.end());
    foff.push_back(frames);
    const std::vector<Segment> segs = frame_segments(r.labels);
    for (const auto& s : segs) {
      seg_flat.insert(seg_flat.end(), {s.start, s.length, s.label});
      durs[s.label].push_back(s.length);
    }
    soff.push_back(soff.back() + static_cast<int64_t>(segs.size()));
    nsamp.push_back(r.num_samples);
    json u = {{"id", e.id}, {"speaker", e.speaker}, {"audio", fs::absolute(e.audio_path).lexically_normal().string()}};
    if (e.seg_end >= 0) u["segment"] = {e.seg_start, e.seg_end};
    u["reference"] = reference_json(m, r.sample_rate, r.num_samples, sil);
    if (utts_text.size() > 1) utts_text += ',';
    utts_text += u.dump();
    speakers.insert(e.speaker);
    seconds += r.seconds;
  }
};

// STAGE/SPLIT.safetensors from the stream: the header st::save would write,
// then the tensors in name order, the features copied from the raw file.
void write_split_file(SplitStream& s, int dim, const std::string& path, const json& opts_json, const PhoneSetSpec& ps) {
  s.raw.close();
  const int64_t F = s.frames, S = static_cast<int64_t>(s.seg_flat.size() / 3);
  const int64_t U = static_cast<int64_t>(s.nsamp.size());
  std::map<std::string, std::string> meta = {
      {"format_version", std::to_string(kPreparedFormatVersion)},
      {"split", s.name},
      {"feature_options", opts_json.dump()},
      {"utterances", s.utts_text + "]"},
      {"labels", "index into the phones of phone_set.yaml (phone set " + ps.name + ")"}};
  struct T { std::string name; st::DType dt; std::vector<int64_t> shape; const void* data; size_t bytes; };
  const std::vector<T> ts = {
      {"features", st::DType::F32, {F, dim}, nullptr, static_cast<size_t>(F) * dim * sizeof(float)},
      {"labels", st::DType::I32, {F}, s.labels.data(), s.labels.size() * 4},
      {"num_samples", st::DType::I64, {U}, s.nsamp.data(), s.nsamp.size() * 8},
      {"segments", st::DType::I32, {S, 3}, s.seg_flat.data(), s.seg_flat.size() * 4},
      {"utt_frame_offsets", st::DType::I64, {U + 1}, s.foff.data(), s.foff.size() * 8},
      {"utt_segment_offsets", st::DType::I64, {U + 1}, s.soff.data(), s.soff.size() * 8}};
  nlohmann::json h = nlohmann::json::object();
  nlohmann::json m = nlohmann::json::object();
  for (const auto& [k, v] : meta) m[k] = v;
  h["__metadata__"] = m;
  uint64_t off = 0;
  for (const auto& t : ts) {
    h[t.name] = {{"dtype", st::dtype_name(t.dt)}, {"shape", t.shape}, {"data_offsets", {off, off + t.bytes}}};
    off += t.bytes;
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  AtomicFile out(path);
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>((static_cast<uint64_t>(header.size()) >> (8 * i)) & 0xff);
  out.write(len, 8);
  out.write(header);
  std::ifstream raw(s.raw_path, std::ios::binary);
  std::vector<char> buf(1 << 20);
  size_t copied = 0;
  while (raw.read(buf.data(), static_cast<std::streamsize>(buf.size())) || raw.gcount() > 0) {
    out.write(buf.data(), static_cast<size_t>(raw.gcount()));
    copied += static_cast<size_t>(raw.gcount());
  }
  if (copied != ts[0].bytes) throw std::runtime_error(s.raw_path.string() + ": features stream cut short");
  for (size_t i = 1; i < ts.size(); ++i) out.write(ts[i].data, ts[i].bytes);
  out.commit();
  raw.close();
  fs::remove(s.raw_path);
}

// Mean and population variance of the train frames, merged utterance by utterance.
struct CmvnAcc {
  int dim = 0;
  int64_t n = 0;
  std::vector<double> mean, m2;
  explicit CmvnAcc(int d) : dim(d), mean(d, 0.0), m2(d, 0.0) {}
  void add(const std::vector<float>& x, int64_t T) {
    if (T <= 0) return;
    for (int d = 0; d < dim; ++d) {
      double mu = 0.0, q = 0.0;
      for (int64_t t = 0; t < T; ++t) mu += x[t * dim + d];
      mu /= static_cast<double>(T);
      for (int64_t t = 0; t < T; ++t) q += (x[t * dim + d] - mu) * (x[t * dim + d] - mu);
      const double na = static_cast<double>(n), nb = static_cast<double>(T), delta = mu - mean[d];
      mean[d] += delta * nb / (na + nb);
      m2[d] += q + delta * delta * na * nb / (na + nb);
    }
    n += T;
  }
  void save(const fs::path& stage) const {
    std::vector<double> var(dim);
    for (int d = 0; d < dim; ++d) var[d] = m2[d] / static_cast<double>(n);
    write_cmvn_file(stage, mean, var, n);
  }
};

json duration_stats(const SplitStream& s, const PhoneSetSpec& ps, double shift_ms) {
  json per = json::object();
  for (const auto& [phone, v] : s.durs) per[ps.phones[phone]] = duration_entry(v);
  return {{"unit", duration_unit(shift_ms)}, {"phones", per}};
}

// The problems of one processed utterance into the summary (as prepare's TIMIT path logs them).
void collect(const CorpusEntry& e, const ProcessedUtterance& r, const PrepareOptions& po, PrepareSummary& sum) {
  bool counted = false;
  for (const auto& p : r.problems) {
    const std::string line = p.str();
    sum.problems.push_back(line);
    if (p.error && po.strict) throw std::runtime_error(line + " (--strict: nothing written)");
    if (p.error) {
      spdlog::error("{} ({} skipped)", line, e.id);
      if (!counted) ++sum.skipped, ++sum.skipped_by_kind[corpus_problem_kind(p.message)], counted = true;
    } else {
      spdlog::warn("{}", line);
      ++sum.warnings, ++sum.warnings_by_kind[corpus_problem_kind(p.message)];
    }
  }
  sum.audio_seconds += r.seconds;
}

// Processes the utterances chunk by chunk into the split streams and CMVN.
void stream_all(const PrepareOptions& po, const std::vector<CorpusEntry>& es,
                const std::vector<std::vector<MappedInterval>>& mapped, const CorpusPlan& plan, int threads,
                std::map<std::string, SplitStream>& streams, CmvnAcc& cmvn, PrepareSummary& sum) {
  if (!po.progress) Progress::set_enabled(false);
  Progress bar("prepare", static_cast<int64_t>(es.size()), "utt");
  const size_t chunk = std::max<size_t>(32, 8 * static_cast<size_t>(threads));
  const int sil = plan.phone_set.silence_index();
  std::atomic<int64_t> processed{0};
  for (size_t b = 0; b < es.size(); b += chunk) {
    const size_t n = std::min(chunk, es.size() - b);
    std::vector<ProcessedUtterance> res(n);
    parallel_for(static_cast<int64_t>(n), threads, [&](int64_t i, int) {
      // SIGINT/SIGTERM (common/interrupt.h): stop before the next utterance; the staging folder goes
      check_prepare_stop(processed.load(), static_cast<int64_t>(es.size()), po.workdir);
      res[i] = process_entry(es[b + i], mapped[b + i], po.features, sil);
      ++processed;
      bar.advance();
    });
    for (size_t i = 0; i < n; ++i) {
      const CorpusEntry& e = es[b + i];
      collect(e, res[i], po, sum);
      if (!res[i].ok) continue;
      const std::string split = e.split.empty() ? "train" : e.split;
      streams.at(split).add(e, res[i], mapped[b + i], sil);
      if (split == "train") cmvn.add(res[i].features, static_cast<int64_t>(res[i].labels.size()));
      res[i] = ProcessedUtterance{};  // free its features now
    }
  }
  bar.finish();
}

// Every file into the staging folder, then renamed into place (StagedWorkdir::commit).
void write_stage(const PrepareOptions& po, const std::vector<CorpusEntry>& es,
                 const std::vector<std::vector<MappedInterval>>& mapped, const CorpusPlan& plan, int threads,
                 PrepareSummary& sum, StagedWorkdir& sw) {
  const fs::path& stage = sw.stage();
  std::map<std::string, SplitStream> streams;
  for (const auto& s : split_names()) {
    SplitStream& st = streams[s];
    st.name = s;
    st.raw_path = stage / ("." + s + ".features.raw");
    st.raw.open(st.raw_path, std::ios::binary);
  }
  const int dim = po.features.dim();
  CmvnAcc cmvn(dim);
  stream_all(po, es, mapped, plan, threads, streams, cmvn, sum);
  if (streams.at("train").nsamp.empty())
    throw std::runtime_error(po.corpus_dir + ": no usable train utterance: CMVN statistics come from the train split");
  json split_counts = json::object(), durations = json::object();
  const std::vector<std::string>& names = split_names();
  parallel_for(static_cast<int64_t>(names.size()), threads, [&](int64_t i, int) {
    write_split_file(streams.at(names[i]), dim, (stage / (names[i] + ".safetensors")).string(), plan.opts_json,
                     plan.phone_set);
  });
  for (const auto& name : names) {
    const SplitStream& s = streams.at(name);
    sw.record(name + ".safetensors");
    const auto U = static_cast<int64_t>(s.nsamp.size()), spk = static_cast<int64_t>(s.speakers.size());
    split_counts[name] = {{"utterances", U}, {"frames", s.frames}, {"speakers", spk}, {"seconds", s.seconds}};
    sum.splits.push_back({name, U, s.frames, spk, s.seconds});
    durations[name] = duration_stats(s, plan.phone_set, po.features.frame_shift_ms);
  }
  cmvn.save(stage);
  sw.record("cmvn.safetensors");
  write_file_atomic((stage / "durations.json").string(), durations.dump(2) + "\n");
  sw.record("durations.json");
  ManifestInfo info;
  info.corpus_format = corpus_format_name(plan.format);
  info.source = plan.source;
  info.fingerprint = plan.fingerprint;
  info.fingerprint_rule = "sha256 over 'absolute path\\tsize\\tmtime' of every audio and label file";
  info.opts_json = plan.opts_json;
  info.split_opts = plan.split_opts;
  const json no_core = {{"rule", "none"}, {"why", "TIMIT's core-test list names TIMIT speakers"}};
  info.split_rule = {{"dev", plan.split_rule}, {"test", plan.split_rule}, {"core-test", no_core}};
  info.phone_set = write_workdir_phone_set(stage.string(), workdir_phone_set(plan.phone_set));
  info.phone_set_source = plan.phone_set_how;
  sw.record("phone_set.yaml");
  sum.dev_rule = plan.split_rule.at("rule").get<std::string>();
  sum.core_test_rule = "none";
  sw.commit([&](const fs::path& st, const json& files) { write_prepare_manifest(st, info, files, split_counts, sum); });
}

}  // namespace

void write_corpus_workdir(const PrepareOptions& po, const std::vector<CorpusEntry>& es,
                          const std::vector<std::vector<MappedInterval>>& mapped, const CorpusPlan& plan, int threads,
                          PrepareSummary& sum) {
  StagedWorkdir sw(po.workdir);  // a failed or interrupted prepare leaves no WORKDIR it created
  sw.run([&] { write_stage(po, es, mapped, plan, threads, sum, sw); });
}

}  // namespace timitseg::data
