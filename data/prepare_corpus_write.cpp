// `prepare` of other corpora, the writing stage: utterances processed in
// chunks on all threads, appended in id order to per-split streams (features,
// labels, offsets, segments and the utterances' metadata each to a file of the
// staging folder), CMVN accumulated as they pass (Chan et al.'s pairwise
// merge of per-utterance means and squared deviations, float64), then each
// split's safetensors file written from its stream, byte for byte what
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
      {".TextGrid beside it: audio without labels", "audio without labels"},
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
      {"empty transcript", "empty transcript"},
      {"not in the dictionary", "word without pronunciation"},
      {"the g2p gave no phones", "word without pronunciation"},
      {"cannot hold its", "transcript too long for its audio"},
      {" is not in phone set ", "phone outside the phone set"},
      {"is not the sequence of the row's times", "times and transcript conflict"},
      {"both 'phones' and 'text'", "bad manifest row"},
      {"no transcript of", "no transcript"},
      {"a second transcript of", "duplicate transcript"},
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
  int64_t frames = 0, segments = 0, utterances = 0;
  int64_t transcript_only = 0, transcript_phones = 0;  // utterances without times, their phones
  // [N] transcripts, [N] optional flags, [U+1] offsets: opened at the first utterance without times
  Spill trans, trans_opt, trans_slot, toff;
  bool slots = false;  // an utterance has several pronunciations of a word (transcript_slots written)
  fs::path stage;
  // [F][dim] features, [F] labels, [S][3] segments, [U] num_samples, [U+1]
  // frame and segment offsets: files of the staging folder, so that memory
  // holds no utterance once it is written
  Spill features, labels, seg_flat, nsamp, foff, soff;
  // The split's "utterances" metadata, one JSON object per utterance as it
  // comes, already escaped as the header's string value: the bytes of the
  // header st::save would write, spliced in at the end (write_split_safetensors).
  Spill utts;
  std::set<std::string> speakers;
  double seconds = 0.0;
  std::map<int, std::map<int64_t, int64_t>> durs;  // phone -> run length (frames) -> count

  void open(const fs::path& stage_dir) {
    stage = stage_dir;
    const std::string base = "." + name + ".";
    features.open(stage / (base + "features.raw"));
    labels.open(stage / (base + "labels.raw"));
    seg_flat.open(stage / (base + "segments.raw"));
    nsamp.open(stage / (base + "num_samples.raw"));
    foff.open(stage / (base + "frame_offsets.raw"));
    soff.open(stage / (base + "segment_offsets.raw"));
    utts.open(stage / (base + "utterances.json"));
    const int64_t zero = 0;
    foff.append(&zero, sizeof zero);
    soff.append(&zero, sizeof zero);
    utts.append("[");
  }

  // m: the utterance's mapped intervals, sil: the phone set's silence (-1: none)
  // The transcript offsets of an utterance (0 phones when it has times), the spills opened
  // (and the utterances before written as 0) at the first utterance without times.
  void add_transcript(const ProcessedUtterance& r) {
    if (r.transcript.empty() && transcript_only == 0) return;
    if (transcript_only == 0) {
      const std::string base = "." + name + ".";
      trans.open(stage / (base + "transcripts.raw"));
      trans_opt.open(stage / (base + "transcript_optional.raw"));
      trans_slot.open(stage / (base + "transcript_slots.raw"));
      toff.open(stage / (base + "transcript_offsets.raw"));
      const std::vector<int64_t> zeros(static_cast<size_t>(utterances) + 1, 0);
      toff.append(zeros);
    }
    transcript_only += !r.transcript.empty();
    trans.append(r.transcript);
    trans_opt.append(r.transcript_optional);
    std::vector<int32_t> sl = r.transcript_slot;  // every phone its own slot when the utterance has no alternatives
    if (sl.empty())
      for (size_t k = 0; k < r.transcript.size(); ++k) sl.push_back(static_cast<int32_t>(k) << 8);
    slots = slots || !r.transcript_slot.empty();
    trans_slot.append(sl);
    transcript_phones += static_cast<int64_t>(r.transcript.size());
    toff.append(&transcript_phones, sizeof transcript_phones);
  }

  void add(const CorpusEntry& e, const ProcessedUtterance& r, const std::vector<MappedInterval>& m, int sil) {
    add_transcript(r);
    features.append(r.features);
    const bool times = r.transcript.empty();
    if (times) labels.append(r.labels);
    else labels.append(std::vector<int32_t>(static_cast<size_t>(r.num_frames), kNoTimesLabel));
    frames += times ? static_cast<int64_t>(r.labels.size()) : r.num_frames;
    foff.append(&frames, sizeof frames);
    const std::vector<Segment> segs = frame_segments(r.labels);
    std::vector<int32_t> flat;
    flat.reserve(segs.size() * 3);
    for (const auto& s : segs) {
      flat.insert(flat.end(), {s.start, s.length, s.label});
      ++durs[s.label][s.length];
    }
    seg_flat.append(flat);
    segments += static_cast<int64_t>(segs.size());
    soff.append(&segments, sizeof segments);
    nsamp.append(&r.num_samples, sizeof r.num_samples);
    json u = {{"id", e.id}, {"speaker", e.speaker}, {"audio", fs::absolute(e.audio_path).lexically_normal().string()}};
    if (e.seg_end >= 0) u["segment"] = {e.seg_start, e.seg_end};
    if (times) u["reference"] = reference_json(m, r.sample_rate, r.num_samples, sil);
    else u["times"] = false;
    utts.append((utterances++ ? "," : "") + json_escaped(u.dump()));
    speakers.insert(e.speaker);
    seconds += r.seconds;
  }
};

// STAGE/SPLIT.safetensors from the stream (write_split_safetensors): its
// "utterances" metadata and each tensor copied from their spill files.
void write_split_file(SplitStream& s, int dim, const std::string& path, const json& opts_json, const PhoneSetSpec& ps) {
  const int64_t F = s.frames, S = s.segments, U = s.utterances;
  s.utts.append("]");
  const std::map<std::string, std::string> meta = {
      {"format_version", std::to_string(kPreparedFormatVersion)},
      {"split", s.name},
      {"feature_options", opts_json.dump()},
      {"utterances", ""},
      {"labels", "index into the phones of phone_set.yaml (phone set " + ps.name + ")"}};
  auto tensor = [](const char* name, st::DType dt, std::vector<int64_t> shape, Spill& data) {
    return StreamedTensor{name, dt, std::move(shape), data.bytes(), [&data](AtomicFile& out) { data.copy_into(out); }};
  };
  std::vector<StreamedTensor> tensors = {tensor("features", st::DType::F32, {F, dim}, s.features),
                                         tensor("labels", st::DType::I32, {F}, s.labels),
                                         tensor("num_samples", st::DType::I64, {U}, s.nsamp),
                                         tensor("segments", st::DType::I32, {S, 3}, s.seg_flat),
                                         tensor("utt_frame_offsets", st::DType::I64, {U + 1}, s.foff),
                                         tensor("utt_segment_offsets", st::DType::I64, {U + 1}, s.soff)};
  if (s.transcript_only > 0) {  // a split of utterances with times only has none of these (as before transcripts)
    const int64_t N = s.transcript_phones;
    tensors.push_back(tensor("transcript_optional", st::DType::U8, {N}, s.trans_opt));
    if (s.slots) tensors.push_back(tensor("transcript_slots", st::DType::I32, {N}, s.trans_slot));
    tensors.push_back(tensor("transcripts", st::DType::I32, {N}, s.trans));
    tensors.push_back(tensor("utt_transcript_offsets", st::DType::I64, {U + 1}, s.toff));
    std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  }
  write_split_safetensors(path, meta, s.utts.bytes(), [&](AtomicFile& out) { s.utts.copy_into(out); }, tensors);
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
  for (const auto& [phone, hist] : s.durs) per[ps.phones[phone]] = duration_entry(hist);
  return {{"unit", duration_unit(shift_ms)}, {"phones", per}};
}

// The problems of one processed utterance into the summary (as prepare's TIMIT path logs them).
void collect(const CorpusEntry& e, const ProcessedUtterance& r, const PrepareOptions& prepare_opts, PrepareSummary& sum) {
  bool counted = false;
  for (const auto& p : r.problems) {
    const std::string line = p.str();
    sum.problems.push_back(line);
    if (p.error && prepare_opts.strict) throw std::runtime_error(line + " (--strict: nothing written)");
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

// One utterance, on a worker: its labels read again and mapped, audio, features, frame labels.
struct CorpusResult {
  ProcessedUtterance r;
  std::vector<MappedInterval> mapped;
};
CorpusResult process_one(const CorpusEntry& e, const ReaderOptions& reader_opts, const PhoneSetSpec& ps, const FeatureOptions& feature_opts) {
  CorpusResult out;
  CorpusEntry u;  // e with its intervals, and map_labels' problems after e's
  u.id = e.id, u.audio_path = e.audio_path, u.label_path = e.label_path;
  u.seg_start = e.seg_start, u.seg_end = e.seg_end;
  u.problems = e.problems;
  u.transcript_kind = e.transcript_kind, u.transcript_path = e.transcript_path, u.transcript_line = e.transcript_line;
  u.phones = e.phones, u.word_start = e.word_start, u.alternatives = e.alternatives;
  auto usable = [&] {
    for (const auto& p : u.problems)
      if (p.error) return false;
    return true;
  };
  if (usable()) {
    u.intervals = corpus_intervals(e, reader_opts, &ps);
    if (!u.intervals.empty() || u.transcript_kind == TranscriptKind::none) out.mapped = map_labels(u, ps);
  }
  std::vector<int32_t> seq;
  std::vector<uint8_t> opt;
  std::vector<int32_t> slot;
  if (usable() && u.transcript_kind != TranscriptKind::none && (u.intervals.empty() || u.transcript_kind == TranscriptKind::phones) &&
      transcript_indices(u, ps, &seq, &opt, &u.problems, &slot) && !u.intervals.empty()) {
    const std::string conflict = transcript_conflict(seq, out.mapped, ps);  // phones beside times: the same phones
    if (!conflict.empty()) u.problems.push_back({u.transcript_path, u.transcript_line, conflict, true});
  }
  out.r = process_entry(u, out.mapped, feature_opts, ps.silence_index());
  if (out.r.ok && out.r.labels.empty()) {  // labels without times
    const int64_t obligatory = transcript_min_phones(opt, slot);
    if (out.r.num_frames < obligatory) {
      out.r.problems.push_back({e.audio_path, 0, "transcript too long for its audio: " +
                                                     std::to_string(out.r.num_frames) + " frames cannot hold its " +
                                                     std::to_string(obligatory) + " phones (utterance " + e.id + ")",
                                true});
      out.r.ok = false;
      std::vector<float>().swap(out.r.features);
    } else {
      out.r.transcript = std::move(seq);
      out.r.transcript_optional = std::move(opt);
      out.r.transcript_slot = std::move(slot);
    }
  }
  return out;
}

// Processes the utterances chunk by chunk into the split streams and CMVN.
void stream_all(const PrepareOptions& prepare_opts, const std::vector<CorpusEntry>& es, const ReaderOptions& reader_opts,
                const CorpusPlan& plan, int threads, std::map<std::string, SplitStream>& streams, CmvnAcc& cmvn,
                PrepareSummary& sum) {
  if (!prepare_opts.progress) Progress::set_enabled(false);
  Progress bar("prepare", static_cast<int64_t>(es.size()), "utt");
  const size_t chunk = std::max<size_t>(32, 8 * static_cast<size_t>(threads));
  const int sil = plan.phone_set.silence_index();
  std::atomic<int64_t> processed{0};
  for (size_t b = 0; b < es.size(); b += chunk) {
    const size_t n = std::min(chunk, es.size() - b);
    std::vector<CorpusResult> res(n);
    parallel_for(static_cast<int64_t>(n), threads, [&](int64_t i, int) {
      // SIGINT/SIGTERM (common/interrupt.h): stop before the next utterance; the staging folder goes
      check_prepare_stop(processed.load(), static_cast<int64_t>(es.size()), prepare_opts.workdir);
      res[i] = process_one(es[b + i], reader_opts, plan.phone_set, prepare_opts.features);
      ++processed;
      bar.advance();
    });
    for (size_t i = 0; i < n; ++i) {
      const CorpusEntry& e = es[b + i];
      collect(e, res[i].r, prepare_opts, sum);
      if (!res[i].r.ok) continue;
      const SplitName split = e.split.value_or(SplitName::train);
      streams.at(common::to_string(split)).add(e, res[i].r, res[i].mapped, sil);
      sum.transcript_only += !res[i].r.transcript.empty();
      if (split == SplitName::train) cmvn.add(res[i].r.features, static_cast<int64_t>(res[i].r.features.size()) / prepare_opts.features.dim());
      res[i] = CorpusResult{};  // free its features now
    }
  }
  bar.finish();
}

// Every file into the staging folder, then renamed into place (StagedWorkdir::commit).
void write_stage(const PrepareOptions& prepare_opts, const std::vector<CorpusEntry>& es, const ReaderOptions& reader_opts,
                 const CorpusPlan& plan, int threads, PrepareSummary& sum, StagedWorkdir& sw) {
  const fs::path& stage = sw.stage();
  std::map<std::string, SplitStream> streams;
  for (const auto& s : split_names()) {
    SplitStream& st = streams[s];
    st.name = s;
    st.open(stage);
  }
  const int dim = prepare_opts.features.dim();
  CmvnAcc cmvn(dim);
  stream_all(prepare_opts, es, reader_opts, plan, threads, streams, cmvn, sum);
  if (streams.at("train").utterances == 0)
    throw std::runtime_error(prepare_opts.corpus_dir + ": no usable train utterance: CMVN statistics come from the train split");
  json split_counts = json::object(), durations = json::object();
  const std::vector<std::string>& names = split_names();
  parallel_for(static_cast<int64_t>(names.size()), threads, [&](int64_t i, int) {
    write_split_file(streams.at(names[i]), dim, (stage / (names[i] + ".safetensors")).string(), plan.opts_json,
                     plan.phone_set);
  });
  for (const auto& name : names) {
    const SplitStream& s = streams.at(name);
    sw.record(name + ".safetensors");
    const int64_t U = s.utterances, spk = static_cast<int64_t>(s.speakers.size());
    split_counts[name] = {{"utterances", U}, {"frames", s.frames}, {"speakers", spk}, {"seconds", s.seconds},
                          {"with_times", U - s.transcript_only}, {"transcript_only", s.transcript_only}};
    sum.splits.push_back({name, U, s.frames, spk, s.seconds});
    durations[name] = duration_stats(s, plan.phone_set, prepare_opts.features.frame_shift_ms);
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
  info.transcripts = plan.transcripts;
  sw.record("phone_set.yaml");
  sum.dev_rule = plan.split_rule.at("rule").get<std::string>();
  sum.core_test_rule = "none";
  sw.commit([&](const fs::path& st, const json& files) { write_prepare_manifest(st, info, files, split_counts, sum); });
}

}  // namespace

void write_corpus_workdir(const PrepareOptions& prepare_opts, const std::vector<CorpusEntry>& es, const ReaderOptions& reader_opts,
                          const CorpusPlan& plan, int threads, PrepareSummary& sum) {
  StagedWorkdir sw(prepare_opts.workdir);  // a failed or interrupted prepare leaves no WORKDIR it created
  sw.run([&] { write_stage(prepare_opts, es, reader_opts, plan, threads, sum, sw); });
}

}  // namespace timitseg::data
