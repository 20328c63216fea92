// `timitseg prepare --corpus DIR --format textgrid|buckeye|kaldi|manifest`, and
// the timit layout in another phone set than TIMIT's (docs/data.md "Other
// corpora"): the corpus's utterances (data/corpus_formats.h),
// their labels resolved against a phone set (data/phone_set.h), features and
// frame labels computed in chunks on all threads and streamed into the
// WORKDIR's staging folder (data/prepare_corpus_write.cpp), so memory does
// not grow with the corpus; the WORKDIR appears only when complete
// (data/prepare_stage.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include <spdlog/spdlog.h>

#include "common/files.h"
#include "common/parallel.h"
#include "common/progress.h"
#include "common/sha256.h"
#include "common/walk.h"
#include "data/corpus_formats.h"
#include "data/espeak_tts.h"
#include "data/phone_set.h"
#include "data/prepare_corpus_internal.h"

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace timitseg::data {

namespace {

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

bool has_error(const std::vector<Problem>& ps) {
  for (const auto& p : ps)
    if (p.error) return true;
  return false;
}

// Silence written as a word where the phone set has no such label.
bool silence_word(const std::string& label) {
  const std::string l = to_lower(label);
  return l == "sil" || l == "sp" || l == "silence" || l == "<sil>";
}

}  // namespace

std::vector<MappedInterval> map_labels(CorpusEntry& e, const PhoneSetSpec& ps) {
  std::vector<MappedInterval> out;
  const int sil = ps.silence_index();
  double merge_start = -1.0;  // a merged label before any phone: joins the next one
  for (const auto& iv : e.intervals) {
    LabelResolution r = ps.resolve(iv.label);
    if ((iv.label.empty() || (r.kind == LabelKind::unknown && silence_word(iv.label))) && sil >= 0)
      r = {LabelKind::phone, sil};
    if (r.kind == LabelKind::phone) {
      out.push_back({iv.start, iv.end, r.index, iv.line});
      if (merge_start >= 0) out.back().start = merge_start, merge_start = -1.0;
    } else if (r.kind == LabelKind::merge) {
      if (!out.empty()) out.back().end = iv.end;
      else if (merge_start < 0) merge_start = iv.start;
    } else if (r.kind == LabelKind::drop) {
      e.problems.push_back({e.label_path, iv.line, "label '" + iv.label + "' is dropped by phone set " + ps.name +
                                                       ": the utterance is skipped", true});
      return {};
    } else {
      const std::string what = iv.label.empty() ? "an empty interval, and phone set " + ps.name + " has no silence"
                                                : "unknown label '" + iv.label + "' (not in phone set " + ps.name +
                                                      "; nearest: " + join(nearest_phones(ps, iv.label, 3), ", ") + ")";
      e.problems.push_back({e.label_path, iv.line, what, true});
      return {};
    }
  }
  return out;
}

std::vector<int32_t> corpus_frame_labels(const std::vector<MappedInterval>& m, int64_t num_frames,
                                         const FeatureOptions& feature_opts, int silence) {
  std::vector<int32_t> labels(static_cast<size_t>(num_frames), 0);
  if (m.empty()) return labels;
  // interval boundaries as samples at the feature rate: integer comparisons,
  // so "0.1 + 0.2" (a CTM's start + duration) and "0.3" give the same frames
  auto sample = [&](double s) { return std::llround(s * feature_opts.sample_rate); };
  size_t p = 0;
  for (int64_t t = 0; t < num_frames; ++t) {
    const int64_t c = frame_center_sample(t, feature_opts);
    while (p < m.size() && sample(m[p].end) <= c) ++p;
    if (p < m.size() && sample(m[p].start) <= c) labels[t] = m[p].index;
    else if (silence >= 0) labels[t] = silence;  // audio no interval covers
    else labels[t] = m[p == 0 ? 0 : std::min(p, m.size()) - 1].index;  // no silence: the phone before
  }
  return labels;
}

ProcessedUtterance process_entry(const CorpusEntry& e, const std::vector<MappedInterval>& m, const FeatureOptions& feature_opts,
                                 int silence) {
  ProcessedUtterance r;
  r.problems = e.problems;
  if (has_error(r.problems)) return r;
  auto err = [&](const std::string& file, const std::string& msg) { r.problems.push_back({file, 0, msg, true}); };
  Audio a;
  double total = 0.0;
  try {
    if (e.seg_end >= 0) a = read_audio_segment(e.audio_path, e.seg_start, e.seg_end, &total);
    else a = read_audio(e.audio_path);
  } catch (const std::exception& ex) {
    std::string msg = ex.what();
    if (msg.rfind(e.audio_path + ": ", 0) == 0) msg = msg.substr(e.audio_path.size() + 2);
    err(e.audio_path, msg);
    return r;
  }
  if (e.seg_end < 0) total = a.sample_rate > 0 ? static_cast<double>(a.samples.size()) / a.sample_rate : 0.0;
  const bool times = !e.intervals.empty() || e.transcript_kind == TranscriptKind::none;  // else a transcript without times
  if (e.seg_end >= 0) {  // a segment of the recording
    std::vector<LabelInterval> abs = e.intervals;  // labels past the recording's end: their line
    for (auto& iv : abs) iv.start += e.seg_start, iv.end += e.seg_start;
    if (times) check_intervals(e.label_path, abs, total, &r.problems);
    if (has_error(r.problems)) return r;
    if (e.seg_end > total + 0.0005) {
      err(e.audio_path, "segment " + e.id + " ends at " + std::to_string(e.seg_end) + " s, past the end of the audio (" +
                            std::to_string(total) + " s)");
      return r;
    }
  }
  r.num_samples = static_cast<int64_t>(a.samples.size());
  r.sample_rate = a.sample_rate;
  r.seconds = a.sample_rate > 0 ? static_cast<double>(r.num_samples) / a.sample_rate : 0.0;
  if (times) check_intervals(e.label_path, e.intervals, r.seconds, &r.problems);  // only "past the end" can fire here
  if (has_error(r.problems)) return r;
  int32_t T = 0;
  try {
    r.features = compute_features(a, feature_opts, &T);
  } catch (const std::exception& ex) {
    err(e.audio_path, ex.what());
    return r;
  }
  if (T < 1) {
    err(e.audio_path, "too short for one feature frame (" + std::to_string(r.num_samples) + " samples)");
    return r;
  }
  r.num_frames = T;
  if (times) r.labels = corpus_frame_labels(m, T, feature_opts, silence);
  r.ok = true;
  return r;
}

namespace {

// e.split for every entry: --split-file, else the corpus's own splits, else by
// speaker (fixed fractions, seeded). Returns the rule recorded in manifest.json.
json assign_splits(const PrepareOptions& prepare_opts, std::vector<CorpusEntry>& es) {
  if (!prepare_opts.split_file.empty()) {
    std::map<std::string, std::string> of;
    for (const auto& [spk, split] : read_split_file(prepare_opts.split_file)) of[spk] = split;
    for (auto& e : es) {
      auto it = of.find(e.speaker);
      if (it != of.end()) e.split = common::enum_value<SplitName>(it->second, prepare_opts.split_file);
      else e.problems.push_back({prepare_opts.split_file, 0, "speaker '" + e.speaker + "' (of " + e.id + ") is not in the split "
                                                   "file: the utterance is skipped", true});
    }
    return {{"rule", "split file"}, {"file", fs::absolute(prepare_opts.split_file).lexically_normal().string()}};
  }
  size_t with = 0;
  for (const auto& e : es) with += e.split.has_value();
  if (with == es.size()) return {{"rule", "corpus"}};
  if (with > 0)
    throw std::runtime_error(prepare_opts.corpus_dir + ": " + std::to_string(with) + " of " + std::to_string(es.size()) +
                             " utterances name their split, the others do not (give every one a split, or none, or "
                             "use --split-file)");
  std::vector<std::string> speakers;
  for (const auto& e : es)
    if (!has_error(e.problems)) speakers.push_back(e.speaker);
  std::map<std::string, std::string> of;
  for (const auto& [spk, split] :
       speaker_splits(speakers, prepare_opts.dev_fraction, prepare_opts.test_fraction, PrepareOptions::kDefaultDevSeed))
    of[spk] = split;
  for (auto& e : es) e.split = of.count(e.speaker) ? common::enum_value<SplitName>(of[e.speaker], "split") : SplitName::train;
  return {{"rule", "by speaker"},
          {"dev_fraction", prepare_opts.dev_fraction},
          {"test_fraction", prepare_opts.test_fraction},
          {"seed", PrepareOptions::kDefaultDevSeed},
          {"method", "sorted speakers, Fisher-Yates with mt19937_64(seed) (choose_dev_speakers): the first "
                     "round(fraction * N) dev + test speakers held out (at least one each from 3 speakers); test "
                     "chosen among them with seed + 1"}};
}

}  // namespace

namespace {

// Silence of the set: an empty interval or a label resolving to a silence phone.
bool silent(const LabelInterval& iv, const PhoneSetSpec& ps) {
  if (iv.label.empty()) return true;
  const LabelResolution r = ps.resolve(iv.label);
  return r.kind == LabelKind::phone && ps.is_silence(r.index);
}

// The intervals of one recording in parts: a dropped label ends a part (and is
// left out), a stretch of silence longer than kLongSilence ends one inside it.
std::vector<std::vector<LabelInterval>> recording_parts(const std::vector<LabelInterval>& ivs, const PhoneSetSpec& ps) {
  std::vector<std::vector<LabelInterval>> parts(1);
  for (size_t i = 0; i < ivs.size();) {
    if (ps.resolve(ivs[i].label).kind == LabelKind::drop) {
      if (!parts.back().empty()) parts.emplace_back();
      ++i;
      continue;
    }
    size_t j = i;
    while (j < ivs.size() && silent(ivs[j], ps)) ++j;  // [i, j): a stretch of silence (maybe empty)
    if (j > i && ivs[j - 1].end - ivs[i].start > kLongSilence) {
      LabelInterval head = ivs[i], tail = ivs[j - 1];
      head.end = head.start + kSilenceMargin;
      tail.start = tail.end - kSilenceMargin;
      parts.back().push_back(head);
      parts.emplace_back(1, tail);
      i = j;
      continue;
    }
    for (size_t k = i; k < std::max(j, i + 1); ++k) parts.back().push_back(ivs[k]);
    i = std::max(j, i + 1);
  }
  return parts;
}

}  // namespace

namespace {

// One recording in parts (split_at_dropped), `ivs` its intervals as read after the scan.
void cut_recording(CorpusEntry& e, const std::vector<LabelInterval>& ivs, const PhoneSetSpec& ps,
                   std::vector<CorpusEntry>& out) {
  bool drops = false;
  for (const auto& iv : ivs) drops = drops || ps.resolve(iv.label).kind == LabelKind::drop;
  std::vector<std::vector<LabelInterval>> parts;
  if (!has_error(e.problems)) parts = recording_parts(ivs, ps);
  if (parts.size() <= 1 && !drops) {  // nothing dropped, no long silence: the recording as it is
    out.push_back(std::move(e));
    return;
  }
  int k = 0;
  for (size_t j = 0; j < parts.size(); ++j) {
    const auto& part = parts[j];
    bool speech = false;  // a part of silence only is no utterance
    for (const auto& iv : part) {
      const LabelResolution r = ps.resolve(iv.label);
      speech = speech || (!iv.label.empty() && r.kind == LabelKind::phone && !ps.is_silence(r.index));
    }
    if (!speech) continue;
    CorpusEntry p = e;
    char num[16];
    std::snprintf(num, sizeof num, ".%03d", ++k);
    p.id = e.id + num;
    p.seg_start = part.front().start;
    p.seg_end = part.back().end;
    p.part = static_cast<int>(j) + 1;
    out.push_back(std::move(p));
  }
}

}  // namespace

std::vector<CorpusEntry> split_at_dropped(std::vector<CorpusEntry> es, const PhoneSetSpec& ps, const ReaderOptions& reader_opts,
                                          int threads) {
  std::vector<CorpusEntry> out;
  for_each_intervals(es, reader_opts, threads,
                     [&](size_t i, const std::vector<LabelInterval>& ivs) { cut_recording(es[i], ivs, ps, out); });
  return out;
}

void check_corpus_labels(std::vector<CorpusEntry>& es, const ReaderOptions& reader_opts, int threads) {
  parallel_for(static_cast<int64_t>(es.size()), threads, [&](int64_t i, int) {
    CorpusEntry& e = es[i];
    e.scan_problems = e.problems.size();
    read_labels(e, reader_opts);
    if (e.label_kind != LabelFileKind::none) std::vector<LabelInterval>().swap(e.intervals);  // read again when needed
  });
}

std::vector<LabelInterval> corpus_intervals(const CorpusEntry& e, const ReaderOptions& reader_opts, const PhoneSetSpec* ps) {
  if (e.label_kind == LabelFileKind::none) return e.intervals;
  CorpusEntry c;  // what read_labels saw after the scan
  c.audio_path = e.audio_path;
  c.label_path = e.label_path;
  c.label_kind = e.label_kind;
  c.spill = e.spill;
  c.spans = e.spans;
  c.problems.assign(e.problems.begin(), e.problems.begin() + static_cast<std::ptrdiff_t>(e.scan_problems));
  read_labels(c, reader_opts);
  if (e.part == 0 || !ps) return std::move(c.intervals);
  std::vector<std::vector<LabelInterval>> parts = recording_parts(c.intervals, *ps);
  if (e.part > static_cast<int>(parts.size()))
    throw std::runtime_error(e.label_path + ": changed while prepare read it (part " + std::to_string(e.part) +
                             " of " + e.id + " is gone)");
  std::vector<LabelInterval> part = std::move(parts[e.part - 1]);
  for (auto& iv : part) iv.start -= e.seg_start, iv.end -= e.seg_start;
  return part;
}

void for_each_intervals(const std::vector<CorpusEntry>& es, const ReaderOptions& reader_opts, int threads,
                        const std::function<void(size_t, const std::vector<LabelInterval>&)>& fn) {
  const size_t chunk = std::max<size_t>(64, 16 * static_cast<size_t>(threads));
  std::vector<std::vector<LabelInterval>> ivs;
  for (size_t b = 0; b < es.size(); b += chunk) {
    const size_t n = std::min(chunk, es.size() - b);
    ivs.assign(n, {});
    parallel_for(static_cast<int64_t>(n), threads, [&](int64_t i, int) { ivs[i] = corpus_intervals(es[b + i], reader_opts, nullptr); });
    for (size_t i = 0; i < n; ++i) fn(b + i, ivs[i]);
  }
}

namespace {

// The phone set: --phone-set FILE, else the format's shipped one (buckeye),
// else derived from the train split's labels (and the line naming dev/test
// labels never seen in train).
PhoneSetSpec choose_phone_set(const PrepareOptions& prepare_opts, CorpusFormat fmt, const std::vector<CorpusEntry>& es,
                              const ReaderOptions& reader_opts, int threads, const std::map<std::string, int64_t>& transcribed,
                              std::string* how, std::string* unseen) {
  if (!prepare_opts.phone_set.empty()) {
    *how = "--phone-set " + prepare_opts.phone_set;
    return PhoneSetSpec::from_setting(prepare_opts.phone_set);
  }
  if (fmt == CorpusFormat::timit) {  // the corpus's own (prepare routes the timit layout here only with one)
    const std::string file = (fs::path(prepare_opts.corpus_dir) / "phone_set.yaml").string();
    *how = "the corpus's " + file;
    return PhoneSetSpec::load(file);
  }
  if (fmt == CorpusFormat::buckeye) {
    *how = "shipped (buckeye)";
    return PhoneSetSpec::builtin("buckeye");
  }
  std::map<std::string, int64_t> counts;  // the train split's labels
  std::map<std::string, std::map<std::string, UnseenLabel>> other;  // dev/test: split -> label -> count, first id
  for_each_intervals(es, reader_opts, threads, [&](size_t i, const std::vector<LabelInterval>& ivs) {
    const CorpusEntry& e = es[i];
    if (has_error(e.problems)) return;
    for (const auto& iv : ivs) {
      if (iv.label.empty()) continue;
      if (e.split == SplitName::train) {
        ++counts[iv.label];
      } else if (!silence_word(iv.label)) {
        UnseenLabel& u = other[e.split ? common::to_string(*e.split) : ""][iv.label];
        if (u.count++ == 0) u.example = e.id;
      }
    }
  });
  for (const auto& [phone, n] : transcribed) counts[phone] += n;  // the transcripts' (and dictionary's) phones
  if (counts.empty()) {  // say why: the first problem of an unusable train utterance, when there is one
    std::string why;
    int64_t bad = 0;
    for (const auto& e : es)
      if (e.split == SplitName::train && has_error(e.problems) && bad++ == 0)
        for (const auto& p : e.problems)
          if (p.error && why.empty()) why = p.str();
    throw std::runtime_error(prepare_opts.corpus_dir + ": no labelled train utterance to derive a phone set from" +
                             (bad ? " (" + std::to_string(bad) + " train utterance(s) unusable; the first: " + why + ")"
                                  : std::string()));
  }
  PhoneSetSpec ps = derive_phone_set(counts);
  std::map<std::string, std::map<std::string, UnseenLabel>> un;
  for (const auto& [split, labels] : other)
    for (const auto& [label, u] : labels)
      if (!counts.count(label)) un[split][label] = u;
  *unseen = unseen_labels_line(un);
  *how = std::string(transcribed.empty() ? "derived from the train split's labels: "
                     : !prepare_opts.dict.empty() ? "derived from the train split's labels, transcripts and --dict " + prepare_opts.dict + ": "
                     : prepare_opts.g2p ? "derived from the labels and transcripts (--g2p " + std::string(common::to_string(*prepare_opts.g2p)) + "): "
                                       : "derived from the train split's labels and transcripts: ") +
         join(ps.phones, " ");
  return ps;
}

// manifest.json "transcripts": how words became phones and what that left.
json transcripts_json(const PrepareOptions& prepare_opts, const TranscriptStats& ts) {
  json j = {{"dict", prepare_opts.dict.empty() ? json() : json(fs::absolute(prepare_opts.dict).lexically_normal().string())},
            {"g2p", prepare_opts.g2p ? json(std::string(common::to_string(*prepare_opts.g2p)) + " " + prepare_opts.language) : json()},
            {"optional_silence", "the phone set's silence, optional (0 frames), at both ends and between words"},
            {"words_with_alternatives", ts.words_with_alternatives},
            {"alternatives", "every pronunciation offered to the loss (a phone graph: transcript_slots), the most "
                             "probable first (the flat start and the PER reference read it)"}};
  if (prepare_opts.g2p) j["g2p_words"] = ts.g2p_words;
  return j;
}

// SHA-256 over "path\tsize\tmtime" of every audio and label file used.
std::string corpus_fingerprint(const std::vector<CorpusEntry>& es) {
  std::set<std::string> files;
  for (const auto& e : es) files.insert(e.audio_path), files.insert(e.label_path);
  Sha256 h;
  for (const auto& p : files) {
    if (p.empty()) continue;
    std::error_code ec;
    const auto size = fs::file_size(p, ec);
    const auto mtime = fs::last_write_time(p, ec).time_since_epoch().count();
    const std::string line = fs::absolute(p).lexically_normal().string() + "\t" + std::to_string(size) + "\t" +
                             std::to_string(static_cast<long long>(mtime)) + "\n";
    h.update(line.data(), line.size());
  }
  return h.hex();
}

// The WORKDIR is never the corpus nor a folder of it, nor a folder prepare did not write.
void check_folders(const PrepareOptions& prepare_opts) {
  InputSet corpus;
  std::error_code ec;
  const fs::path root = fs::is_directory(prepare_opts.corpus_dir, ec) ? fs::path(prepare_opts.corpus_dir) : fs::path(prepare_opts.corpus_dir).parent_path();
  corpus.add(root.empty() ? fs::path(".") : root);
  if (fs::is_directory(root, ec))
    for (const fs::path& rel : walk_files(root, nullptr))
      for (fs::path d = rel.parent_path(); !d.empty(); d = d.parent_path()) corpus.add(root / d);
  refuse_output("--out", prepare_opts.workdir, corpus, "a folder of the corpus --corpus " + prepare_opts.corpus_dir +
                                                 "; the prepared data go into a folder of their own");
  check_output_folder(prepare_opts.workdir);
}

}  // namespace

PrepareSummary prepare_corpus(const PrepareOptions& requested_opts) {
  const auto t0 = std::chrono::steady_clock::now();
  auto since = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  PrepareOptions prepare_opts = requested_opts;
  prepare_opts.features.allow_resample = true;  // any rate and channel count libsndfile reads
  validate(prepare_opts.features);
  const CorpusFormat fmt =
      prepare_opts.corpus_format ? *prepare_opts.corpus_format : detect_corpus_format(prepare_opts.corpus_dir);
  check_folders(prepare_opts);
  PrepareSummary sum;
  std::vector<Problem> scan_problems;
  const ReaderOptions reader_opts{prepare_opts.tier};
  std::vector<CorpusEntry> es = scan_corpus(prepare_opts.corpus_dir, fmt, reader_opts, &scan_problems, &sum.sa_excluded);
  sum.utterances_found = static_cast<int64_t>(es.size()) + sum.sa_excluded;  // SA: the timit layout's
  const int threads = std::max(1, std::min<int>(resolve_threads(prepare_opts.threads), static_cast<int>(es.size())));
  check_corpus_labels(es, reader_opts, threads);  // the problems; the labels are read again where needed
  CorpusPlan plan;
  plan.format = fmt;
  plan.split_rule = assign_splits(prepare_opts, es);
  const TranscriptStats ts = pronounce_transcripts(es, prepare_opts);
  int64_t transcribed = 0;
  for (const auto& e : es) transcribed += e.transcript_kind != TranscriptKind::none;
  std::string unseen;
  plan.phone_set = choose_phone_set(prepare_opts, fmt, es, reader_opts, threads,
                                    transcribed ? transcript_phone_counts(es, ts, prepare_opts.g2p.has_value())
                                                : std::map<std::string, int64_t>{},
                                    &plan.phone_set_how, &unseen);
  if (transcribed) plan.transcripts = transcripts_json(prepare_opts, ts);
  if (fmt == CorpusFormat::buckeye) es = split_at_dropped(std::move(es), plan.phone_set, reader_opts, threads);
  sum.utterances_found = static_cast<int64_t>(es.size()) + sum.sa_excluded;
  plan.source = fs::absolute(prepare_opts.corpus_dir).lexically_normal().string();
  plan.fingerprint = corpus_fingerprint(es);
  plan.opts_json = feature_options_to_json(prepare_opts.features, /*with_info=*/true);
  plan.split_opts = {{"format", corpus_format_name(fmt)}, {"tier", prepare_opts.tier},
                     {"phone_set", plan.phone_set.digest()}, {"split_rule", plan.split_rule},
                     {"split_file_sha256", prepare_opts.split_file.empty() ? "" : sha256_file(prepare_opts.split_file, nullptr)}};
  if (transcribed)  // how words became phones: another dictionary or G2P rebuilds
    plan.split_opts["transcripts"] = {{"dict", prepare_opts.dict}, {"dict_sha256", prepare_opts.dict.empty() ? "" : sha256_file(prepare_opts.dict, nullptr)},
                                      {"dict_format", common::to_string(prepare_opts.dict_format)}, {"g2p", prepare_opts.g2p ? common::to_string(*prepare_opts.g2p) : ""}, {"language", prepare_opts.language},
                                      {"espeak", prepare_opts.g2p ? espeak_version() : ""}};
  if (fmt == CorpusFormat::buckeye)  // the cut rule: a WORKDIR cut otherwise (before it) is rebuilt
    plan.split_opts["recording_cuts"] = {{"long_silence_s", kLongSilence}, {"silence_margin_s", kSilenceMargin}};
  if (!prepare_opts.force && manifest_matches(prepare_opts.workdir, plan.source, plan.fingerprint, plan.opts_json, plan.split_opts)) {
    try {
      summary_from_manifest(prepare_opts.workdir, sum);
      sum.up_to_date = true;
      sum.wall_seconds = since();
      return sum;
    } catch (const std::exception& e) {
      spdlog::info("{}: cache not reusable ({}), rebuilding", prepare_opts.workdir, e.what());
      const int64_t sa = sum.sa_excluded;
      sum = PrepareSummary{};
      sum.sa_excluded = sa;
      sum.utterances_found = static_cast<int64_t>(es.size()) + sa;
    }
  }
  for (const auto& p : scan_problems) {
    sum.problems.push_back(p.str());
    spdlog::warn("{}", p.str());
    ++sum.warnings, ++sum.warnings_by_kind[corpus_problem_kind(p.message)];
  }
  if (!unseen.empty()) {
    sum.problems.push_back(unseen);
    spdlog::warn("{}", unseen);
    ++sum.warnings, ++sum.warnings_by_kind["label unseen in train"];
  }
  spdlog::info("phone set {} ({} phones, sha256 {}): {}", plan.phone_set.name, plan.phone_set.size(),
               plan.phone_set.digest().substr(0, 12), plan.phone_set_how);
  write_corpus_workdir(prepare_opts, es, reader_opts, plan, threads, sum);
  sum.wall_seconds = since();
  return sum;
}

}  // namespace timitseg::data
