// prepare --corpus (issue 43): one tiny corpus, written from one set of
// intervals and synthetic audio in every layout (TextGrid long, short and
// UTF-16; Buckeye; a Kaldi dir whose utterances are segments of one recording
// per speaker; a CSV manifest with inline segments; a JSON-lines manifest with
// label files), prepares to bitwise the same features, frame labels and CMVN;
// the frame labels match the intervals (centre-sample rule, computed here);
// bad inputs are one line each, counted, or (--strict) nothing is written.
#include <gtest/gtest.h>

#include <tuple>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/files.h"
#include "common/safetensors.h"
#include "data/corpus_formats.h"
#include "data/dataset.h"
#include "data/espeak_tts.h"
#include "data/features.h"
#include "data/phone_set.h"
#include "data/prepare_stage.h"
#include "data/synth.h"
#include "util.h"

namespace fs = std::filesystem;
using namespace timitseg::data;

namespace {

const char* kPhoneSet = "name: tiny\nphones: [sil, aa, s, t, iy]\nsilence: [sil]\nmap:\n  \"<SIL>\": sil\n";
const std::vector<std::string> kPhones = {"sil", "aa", "s", "t", "iy"};

struct Utt {
  std::string spk, name;
  int centis = 0;  // length in 10 ms steps
  std::vector<std::pair<int, std::string>> ends;  // (end in 10 ms steps, label); contiguous from 0
  std::vector<short> audio;
};

std::string sec(int centis) {
  char b[32];
  std::snprintf(b, sizeof b, "%d.%02d", centis / 100, centis % 100);
  return b;
}

std::vector<Utt> tiny_corpus() {
  std::vector<Utt> us;
  const std::vector<std::string> ph = {"aa", "s", "t", "iy"};
  for (int s = 1; s <= 4; ++s)
    for (int u = 1; u <= 2; ++u) {
      Utt x{"spk" + std::to_string(s), "u" + std::to_string(u), 60 + 7 * s + 5 * u, {}, {}};
      int at = 8 + s;
      x.ends.push_back({at, "sil"});
      for (int k = 0; at + 9 < x.centis - 6; ++k) x.ends.push_back({at += 7 + (k + s + u) % 5, ph[(k + s * u) % 4]});
      x.ends.push_back({x.centis, "sil"});
      x.audio = testutil::test_signal(x.centis * 160, static_cast<unsigned>(10 * s + u));
      us.push_back(x);
    }
  return us;
}

std::string textgrid_long(const Utt& u, bool empty_silence) {
  std::string t = "File type = \"ooTextFile\"\nObject class = \"TextGrid\"\n\nxmin = 0\nxmax = " + sec(u.centis) +
                  "\ntiers? <exists>\nsize = 1\nitem []:\n    item [1]:\n        class = \"IntervalTier\"\n"
                  "        name = \"phones\"\n        xmin = 0\n        xmax = " + sec(u.centis) +
                  "\n        intervals: size = " + std::to_string(u.ends.size()) + "\n";
  int prev = 0;
  for (size_t i = 0; i < u.ends.size(); ++i) {
    const std::string l = empty_silence && u.ends[i].second == "sil" ? "" : u.ends[i].second;
    t += "        intervals [" + std::to_string(i + 1) + "]:\n            xmin = " + sec(prev) +
         "\n            xmax = " + sec(u.ends[i].first) + "\n            text = \"" + l + "\"\n";
    prev = u.ends[i].first;
  }
  return t;
}

std::string textgrid_short(const Utt& u) {
  std::string t = "File type = \"ooTextFile\"\nObject class = \"TextGrid\"\n\n0\n" + sec(u.centis) +
                  "\n<exists>\n1\n\"IntervalTier\"\n\"phones\"\n0\n" + sec(u.centis) + "\n" +
                  std::to_string(u.ends.size()) + "\n";
  int prev = 0;
  for (const auto& [end, l] : u.ends) t += sec(prev) + "\n" + sec(end) + "\n\"" + l + "\"\n", prev = end;
  return t;
}

std::string utf16le(const std::string& ascii) {
  std::string o = "\xFF\xFE";
  for (char c : ascii) o += c, o += '\0';
  return o;
}

// Writes the corpus in `layout` under ROOT; returns the --corpus path.
std::string write_layout(const std::vector<Utt>& us, const std::string& root, const std::string& layout) {
  std::string csv = "id,audio,speaker,segments\n", jsonl, wav_scp, segments, utt2spk, ctm;
  std::map<std::string, std::vector<short>> recs;
  std::map<std::string, int> rec_at;  // 10 ms steps
  for (size_t k = 0; k < us.size(); ++k) {
    const Utt& u = us[k];
    const std::string rel = u.spk + "/" + u.name;
    int prev = 0;
    std::string phones = "signal " + u.name + "\ntype 0\ncolor 121\nnfields 1\n#\n", lab, segs;
    for (const auto& [end, l] : u.ends) {
      phones += "  " + sec(end) + "  122 " + (l == "sil" ? "<SIL>" : l) + "\n";
      lab += sec(prev) + "\t" + sec(end) + "\t" + l + "\n";
      segs += (segs.empty() ? "" : "; ") + sec(prev) + " " + sec(end) + " " + l;
      ctm += u.spk + "-" + u.name + " 1 " + sec(prev) + " " + sec(end - prev) + " " + l + "\n";
      prev = end;
    }
    if (layout == "timit") {  // every speaker under TRAIN/DR1 (the split file chooses); .PHN in samples
      const std::string base = root + "/TRAIN/DR1/" + u.spk + "/" + u.name;
      testutil::write_audio(base + ".WAV", u.audio, 16000, SF_FORMAT_NIST);
      std::string phn;
      int from = 0;
      for (const auto& [end, l] : u.ends) phn += std::to_string(160 * from) + " " + std::to_string(160 * end) + " " + l + "\n", from = end;
      testutil::write_text(base + ".PHN", phn);
    } else if (layout == "textgrid") {
      testutil::write_audio(root + "/" + rel + ".wav", u.audio, 16000, SF_FORMAT_WAV);
      const std::string tg = k % 3 == 0 ? textgrid_long(u, true) : k % 3 == 1 ? textgrid_short(u) : utf16le(textgrid_long(u, false));
      testutil::write_text(root + "/" + rel + ".TextGrid", tg);
    } else if (layout == "buckeye") {
      testutil::write_audio(root + "/" + rel + ".wav", u.audio, 16000, SF_FORMAT_WAV);
      testutil::write_text(root + "/" + rel + ".phones", phones);
      testutil::write_text(root + "/" + rel + ".words", "signal\n#\n");
    } else if (layout == "csv" || layout == "jsonl") {
      testutil::write_audio(root + "/audio/" + rel + ".flac", u.audio, 16000, SF_FORMAT_FLAC);
      testutil::write_text(root + "/labels/" + rel + ".lab", lab);
      csv += rel + ",audio/" + rel + ".flac," + u.spk + ",\"" + segs + "\"\n";
      jsonl += "{\"id\": \"" + rel + "\", \"audio\": \"audio/" + rel + ".flac\", \"speaker\": \"" + u.spk +
               "\", \"labels\": \"labels/" + rel + ".lab\"}\n";
    } else {  // kaldi: the speaker's utterances are segments of one recording
      auto& r = recs[u.spk];
      segments += u.spk + "-" + u.name + " rec" + u.spk + " " + sec(rec_at[u.spk]) + " " +
                  sec(rec_at[u.spk] + u.centis) + "\n";
      utt2spk += u.spk + "-" + u.name + " " + u.spk + "\n";
      r.insert(r.end(), u.audio.begin(), u.audio.end());
      rec_at[u.spk] += u.centis;
    }
  }
  if (layout == "csv") testutil::write_text(root + "/manifest.csv", csv);
  if (layout == "jsonl") testutil::write_text(root + "/corpus.jsonl", jsonl);
  if (layout == "jsonl") return root + "/corpus.jsonl";
  if (layout == "kaldi") {
    for (const auto& [spk, r] : recs) {
      testutil::write_audio(root + "/wav/" + spk + ".wav", r, 16000, SF_FORMAT_WAV);
      wav_scp += "rec" + spk + " wav/" + spk + ".wav\n";
    }
    testutil::write_text(root + "/wav.scp", wav_scp);
    testutil::write_text(root + "/segments", segments);
    testutil::write_text(root + "/utt2spk", utt2spk);
    testutil::write_text(root + "/phones.ctm", ctm);
  }
  return root;
}

PrepareSummary prepare_corpus_into(const std::string& corpus, const std::string& out, const std::string& phone_set,
                                   const std::string& split_file, bool strict = false, const std::string& format = "") {
  PrepareOptions po;
  po.corpus_dir = corpus;
  if (!format.empty()) po.corpus_format = timitseg::common::enum_value<CorpusFormat>(format, "format");
  po.workdir = out;
  po.phone_set = phone_set;
  po.split_file = split_file;
  po.threads = 2;
  po.progress = false;
  po.strict = strict;
  return prepare(po);
}

// The frame labels the intervals give (centre-sample rule, 16 kHz, 25/10 ms frames).
std::vector<int32_t> expected_labels(const Utt& u, int32_t frames) {
  std::vector<int32_t> out;
  for (int32_t t = 0; t < frames; ++t) {
    const int64_t c = 160 * t + 200;
    int32_t l = 0;
    for (const auto& [end, label] : u.ends)
      if (c < end * 160) {
        l = static_cast<int32_t>(std::find(kPhones.begin(), kPhones.end(), label) - kPhones.begin());
        break;
      }
    out.push_back(l);
  }
  return out;
}

std::string key(std::string id) {  // spk1-u1 (Kaldi), train/dr1/spk1/u1 (TIMIT) and spk1/u1 name the same utterance
  if (id.rfind("train/dr1/", 0) == 0) id = id.substr(10);
  for (char& c : id)
    if (c == '-') c = '/';
  return id;
}

// durations.json (per-phone histograms as the utterances stream past) against
// its oracle: duration_entry of every run of the split files' frame labels.
void expect_durations_of_the_splits(const std::string& wd) {
  const WorkdirPhoneSet ps = load_workdir_phone_set(wd);
  const nlohmann::json durations = nlohmann::json::parse(timitseg::read_file(wd + "/durations.json"));
  for (const std::string split : {"train", "dev", "test"}) {
    std::map<std::string, std::vector<int64_t>> runs;
    for (const auto& u : load_split(wd, split).utterances)
      for (const Segment& s : frame_segments(u.labels)) runs[ps.labels.at(s.label)].push_back(s.length);
    ASSERT_EQ(durations.at(split).at("phones").size(), runs.size()) << split;
    for (const auto& [phone, v] : runs)
      EXPECT_EQ(durations.at(split).at("phones").at(phone).dump(), nlohmann::json::parse(duration_entry(v).dump()).dump())
          << split << " " << phone;
  }
}

}  // namespace

TEST(PrepareCorpus, EveryLayoutPreparesToTheSameFeaturesAndLabels) {
  testutil::TempDir d;
  const auto us = tiny_corpus();
  testutil::write_text(d.str("tiny.yaml"), kPhoneSet);
  testutil::write_text(d.str("splits.txt"), "spk1 train\nspk2 train\nspk3 dev\nspk4 test\n");
  std::map<std::string, Utt> by_key;
  for (const auto& u : us) by_key[u.spk + "/" + u.name] = u;
  std::map<std::string, Split> first;
  Cmvn first_cmvn;
  for (const std::string layout : {"textgrid", "buckeye", "kaldi", "csv", "jsonl", "timit"}) {
    SCOPED_TRACE(layout);
    const std::string corpus = write_layout(us, d.str(layout), layout);
    const PrepareSummary s = prepare_corpus_into(corpus, d.str("wd_" + layout), d.str("tiny.yaml"), d.str("splits.txt"));
    EXPECT_EQ(s.skipped, 0);
    for (const auto& p : s.problems) ADD_FAILURE() << p;
    const WorkdirPhoneSet ps = load_workdir_phone_set(d.str("wd_" + layout));
    EXPECT_EQ(ps.labels, kPhones);
    for (const std::string split : {"train", "dev", "test"}) {
      const Split sp = load_split(d.str("wd_" + layout), split);
      ASSERT_EQ(sp.utterances.size(), split == "train" ? 4u : 2u);
      for (const auto& u : sp.utterances) {
        const Utt& src = by_key.at(key(u.id));
        EXPECT_EQ(u.speaker, src.spk);
        EXPECT_EQ(u.num_samples, static_cast<int64_t>(src.audio.size()));
        EXPECT_EQ(u.labels, expected_labels(src, u.num_frames)) << u.id;
      }
      if (!first.count(split)) {
        first[split] = sp;
        continue;
      }
      for (size_t i = 0; i < sp.utterances.size(); ++i) {
        EXPECT_EQ(sp.utterances[i].features, first[split].utterances[i].features) << sp.utterances[i].id;
        EXPECT_EQ(sp.utterances[i].labels, first[split].utterances[i].labels) << sp.utterances[i].id;
      }
    }
    expect_durations_of_the_splits(d.str("wd_" + layout));
    const Cmvn c = load_cmvn(d.str("wd_" + layout));
    if (first_cmvn.mean.empty()) first_cmvn = c;
    EXPECT_EQ(c.mean, first_cmvn.mean);
    EXPECT_EQ(c.var, first_cmvn.var);
  }
  // the streamed split file is byte for byte what st::save writes for its tensors
  const std::string path = d.str("wd_textgrid/train.safetensors");
  timitseg::st::save(d.str("resaved.safetensors"), timitseg::st::load(path));
  EXPECT_EQ(timitseg::read_file(path), timitseg::read_file(d.str("resaved.safetensors")));
  // and a second run is a no-op
  EXPECT_TRUE(prepare_corpus_into(d.str("csv"), d.str("wd_csv"), d.str("tiny.yaml"), d.str("splits.txt")).up_to_date);
}

// The TextGrid layout: an audio file without its TextGrid is one warning line, counted,
// and the corpus is prepared without it (as the TIMIT layout names a .WAV without .PHN).
TEST(PrepareCorpus, TextGridLayoutWarnsOfAudioWithoutItsTextGrid) {
  testutil::TempDir d;
  const auto us = tiny_corpus();
  testutil::write_text(d.str("tiny.yaml"), kPhoneSet);
  testutil::write_text(d.str("splits.txt"), "spk1 train\nspk2 train\nspk3 dev\nspk4 test\n");
  const std::string corpus = write_layout(us, d.str("textgrid"), "textgrid");
  std::string wav;
  for (const auto& e : std::filesystem::recursive_directory_iterator(corpus))
    if (e.path().extension() == ".wav") wav = e.path().string();
  ASSERT_FALSE(wav.empty());
  const std::string stray = (std::filesystem::path(wav).parent_path() / "stray.wav").string();
  std::filesystem::copy_file(wav, stray);
  const PrepareSummary s = prepare_corpus_into(corpus, d.str("wd"), d.str("tiny.yaml"), d.str("splits.txt"));
  EXPECT_EQ(s.skipped, 0);
  ASSERT_EQ(s.problems.size(), 1u);
  EXPECT_EQ(s.problems[0], stray + ": no stray.TextGrid beside it: audio without labels, not read");
  EXPECT_EQ(s.warnings, 1);
  EXPECT_EQ(s.warnings_by_kind.at("audio without labels"), 1);
}

TEST(PrepareCorpus, BadRowsAreOneLineEachCountedAndStrictWritesNothing) {
  testutil::TempDir d;
  const auto us = tiny_corpus();
  testutil::write_text(d.str("tiny.yaml"), kPhoneSet);
  write_layout(us, d.str("m"), "csv");
  std::string csv = timitseg::read_file(d.str("m/manifest.csv"));
  csv += "x/gone,audio/gone.flac,spk1,0 1 sil\n";                       // line 10: missing audio
  csv += "x/unk,audio/spk1/u1.flac,spk1,\"0 0.3 sil; 0.3 0.6 aa3\"\n";  // line 11: unknown label
  csv += "x/ovl,audio/spk2/u1.flac,spk2,\"0 0.4 sil; 0.3 0.6 aa\"\n";   // line 12: overlap
  testutil::write_text(d.str("m/manifest.csv"), csv);
  const std::string mf = d.str("m/manifest.csv");
  const PrepareSummary s = prepare_corpus_into(d.str("m"), d.str("wd"), d.str("tiny.yaml"), "");
  EXPECT_EQ(s.utterances_found, 11);
  EXPECT_EQ(s.skipped, 3);
  EXPECT_EQ(s.skipped_by_kind, (std::map<std::string, int64_t>{
                                   {"missing audio", 1}, {"unknown label", 1}, {"overlapping intervals", 1}}));
  const std::vector<std::string> want = {
      mf + ":10: audio " + d.str("m/audio/gone.flac") + " is missing",
      mf + ":12: 'aa' [0.3, 0.6) s: overlaps the previous interval (line 12, ends at 0.4 s)",
      mf + ":11: unknown label 'aa3' (not in phone set tiny; nearest: aa, sil, s)"};
  for (const auto& w : want) EXPECT_NE(std::find(s.problems.begin(), s.problems.end(), w), s.problems.end()) << w;
  int64_t prepared = 0;
  for (const auto& c : s.splits) prepared += c.utterances;
  EXPECT_EQ(prepared, 8);
  // --strict: the first bad utterance in id order stops it; no WORKDIR file is written
  try {
    prepare_corpus_into(d.str("m"), d.str("wd_strict"), d.str("tiny.yaml"), "", true);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), want[0] + " (--strict: nothing written)");
  }
  EXPECT_TRUE(!fs::exists(d.str("wd_strict")) || fs::is_empty(d.str("wd_strict")));
}

TEST(PrepareCorpus, DerivedPhoneSetNamesLabelsUnseenInTrain) {
  testutil::TempDir d;
  auto us = tiny_corpus();
  for (auto& [end, l] : us[7].ends)  // spk4/u2 (test) gets a label train never has
    if (l == "aa") l = "oy";
  write_layout(us, d.str("tg"), "textgrid");
  testutil::write_text(d.str("splits.txt"), "spk1 train\nspk2 train\nspk3 dev\nspk4 test\n");
  const PrepareSummary s = prepare_corpus_into(d.str("tg"), d.str("wd"), "", d.str("splits.txt"));
  const WorkdirPhoneSet ps = load_workdir_phone_set(d.str("wd"));
  EXPECT_EQ(ps.spec.name, "derived");
  EXPECT_EQ(ps.spec.silence, std::vector<std::string>{"sil"});
  EXPECT_EQ(ps.spec.index("oy"), -1);
  EXPECT_EQ(s.skipped, 1);
  EXPECT_EQ(s.skipped_by_kind.at("unknown label"), 1);
  bool named = false;
  for (const auto& p : s.problems) named = named || (p.find("'oy'") != std::string::npos && p.find("spk4/u2") != std::string::npos);
  EXPECT_TRUE(named);
}

// No phone set given and no train utterance usable (here: no tier of that name): the one error
// says why, naming the first unusable train utterance's file and problem; nothing is written.
TEST(PrepareCorpus, NothingToDeriveAPhoneSetFromNamesTheFirstProblem) {
  testutil::TempDir d;
  write_layout(tiny_corpus(), d.str("tg"), "textgrid");
  testutil::write_text(d.str("splits.txt"), "spk1 train\nspk2 train\nspk3 dev\nspk4 test\n");
  PrepareOptions po;
  po.corpus_dir = d.str("tg");
  po.workdir = d.str("wd");
  po.split_file = d.str("splits.txt");
  po.tier = "segments";  // no TextGrid of the corpus has a tier of that name
  po.threads = 2;
  po.progress = false;
  try {
    prepare(po);
    ADD_FAILURE() << "prepare succeeded";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind(d.str("tg") + ": no labelled train utterance to derive a phone set from (4 train utterance(s) "
                                       "unusable; the first: " + d.str("tg") + "/spk1/u1.TextGrid: no interval tier named "
                                       "'segments'", 0), 0u) << what;
  }
  EXPECT_FALSE(fs::exists(d.str("wd")));
}

TEST(PrepareCorpus, BuckeyeShippedPhoneSetSplitsAroundDroppedLabelsAndTimesPastTheAudio) {
  testutil::TempDir d;
  const auto sig = testutil::test_signal(16000);
  testutil::write_audio(d.str("b/s01/s0101a.wav"), sig, 16000, SF_FORMAT_WAV);
  testutil::write_text(d.str("b/s01/s0101a.phones"),
                       "signal s0101a\ntype 0\ncolor 121\n#\n 0.2 122 {B_TRANS}\n 0.4 121 aan\n 0.5 122 IVER\n"
                       " 0.7 122 s\n 0.8 122 VOCNOISE\n 1.0 122 t\n");
  testutil::write_audio(d.str("b/s02/s0201a.wav"), sig, 16000, SF_FORMAT_WAV);
  testutil::write_text(d.str("b/s02/s0201a.phones"), "signal s0201a\n#\n 0.5 122 SIL\n 1.3 122 t\n");
  testutil::write_text(d.str("split.txt"), "s01 train\ns02 dev\n");
  const PrepareSummary s = prepare_corpus_into(d.str("b"), d.str("wd"), "", d.str("split.txt"));
  EXPECT_EQ(s.utterances_found, 3);  // s0101a in two parts around IVER, s0201a
  EXPECT_EQ(s.skipped, 1);
  const std::string past = d.str("b/s02/s0201a.phones") + ":4: 't' [0.5, 1.3) s: past the end of the audio (1 s)";
  EXPECT_NE(std::find(s.problems.begin(), s.problems.end(), past), s.problems.end());
  const PhoneSetSpec bk = PhoneSetSpec::builtin("buckeye");
  const Split tr = load_split(d.str("wd"), "train");
  ASSERT_EQ(tr.utterances.size(), 2u);
  EXPECT_EQ(tr.utterances[0].id, "s01/s0101a.001");
  EXPECT_EQ(tr.utterances[0].num_samples, 6400);  // [0, 0.4) s
  EXPECT_EQ(tr.utterances[1].num_samples, 8000);  // [0.5, 1.0) s
  const auto& a = tr.utterances[0].labels;
  EXPECT_EQ(a[5], bk.index("sil"));  // {B_TRANS} -> sil
  EXPECT_EQ(a[30], bk.index("aa"));  // centre 0.3125 s: aan -> aa
  const auto& b = tr.utterances[1].labels;
  EXPECT_EQ(b[5], bk.index("s"));    // 0.5625 s
  EXPECT_EQ(b[20], bk.index("sil"));  // 0.7125 s: VOCNOISE -> sil
  EXPECT_EQ(b[40], bk.index("t"));   // 0.9125 s
  // the first part's features are those of the first 0.4 s of the recording
  const std::vector<short> head(sig.begin(), sig.begin() + 6400);
  testutil::write_audio(d.str("head.wav"), head, 16000, SF_FORMAT_WAV);
  FeatureOptions fo;
  int32_t T = 0;
  EXPECT_EQ(compute_features(read_audio(d.str("head.wav")), fo, &T), tr.utterances[0].features);
}

// A Buckeye recording is cut inside every stretch of silence longer than
// kLongSilence (0.5 s), each side keeping kSilenceMargin (0.1 s) of it; a
// shorter one stays inside its utterance.
TEST(PrepareCorpus, BuckeyeRecordingsAreCutInsideLongSilences) {
  testutil::TempDir d;
  const auto sig = testutil::test_signal(40000, 9u);  // 2.5 s
  testutil::write_audio(d.str("b/s01/s0101a.wav"), sig, 16000, SF_FORMAT_WAV);
  // sil [0, 0.2), s, a 1.0 s stretch of NOISE + SIL [0.5, 1.5), t, a 0.4 s SIL (not cut), aa, {E_TRANS}
  testutil::write_text(d.str("b/s01/s0101a.phones"),
                       "signal s0101a\n#\n 0.2 122 {B_TRANS}\n 0.5 122 s\n 0.6 122 NOISE\n 1.5 122 SIL\n"
                       " 1.8 122 t\n 2.2 122 SIL\n 2.4 122 aa\n 2.5 122 {E_TRANS}\n");
  testutil::write_text(d.str("split.txt"), "s01 train\n");
  const PrepareSummary s = prepare_corpus_into(d.str("b"), d.str("wd"), "", d.str("split.txt"));
  EXPECT_EQ(s.skipped, 0);
  EXPECT_EQ(s.utterances_found, 2);
  const PhoneSetSpec bk = PhoneSetSpec::builtin("buckeye");
  const Split tr = load_split(d.str("wd"), "train");
  ASSERT_EQ(tr.utterances.size(), 2u);
  EXPECT_EQ(tr.utterances[0].id, "s01/s0101a.001");
  EXPECT_EQ(tr.utterances[1].id, "s01/s0101a.002");
  EXPECT_EQ(tr.utterances[0].num_samples, 9600);   // [0, 0.6) s: 0.1 s of the long silence kept
  EXPECT_EQ(tr.utterances[1].num_samples, 17600);  // [1.4, 2.5) s
  // the sample-accurate reference of each part, relative to its start: (start, end, phone)
  auto rows = [&](const Utterance& u) {
    std::vector<std::tuple<int64_t, int64_t, std::string>> v;
    for (const auto& r : u.reference) v.emplace_back(r.start, r.end, bk.phones[r.label]);
    return v;
  };
  using Row = std::tuple<int64_t, int64_t, std::string>;
  EXPECT_EQ(rows(tr.utterances[0]), (std::vector<Row>{{0, 3200, "sil"}, {3200, 8000, "s"}, {8000, 9600, "sil"}}));
  EXPECT_EQ(rows(tr.utterances[1]), (std::vector<Row>{{0, 1600, "sil"}, {1600, 6400, "t"}, {6400, 12800, "sil"},
                                                      {12800, 16000, "aa"}, {16000, 17600, "sil"}}));
  // the second part's features are those of its slice of the recording
  const std::vector<short> part(sig.begin() + 22400, sig.end());
  testutil::write_audio(d.str("part.wav"), part, 16000, SF_FORMAT_WAV);
  FeatureOptions fo;
  int32_t T = 0;
  EXPECT_EQ(compute_features(read_audio(d.str("part.wav")), fo, &T), tr.utterances[1].features);
}

TEST(PrepareCorpus, AnyRateAndChannelCountIsResampled) {
  testutil::TempDir d;
  std::vector<short> stereo;
  for (short v : testutil::test_signal(44100)) stereo.push_back(v), stereo.push_back(v);
  testutil::write_audio(d.str("m/a.ogg"), stereo, 44100, SF_FORMAT_OGG, 2, SF_FORMAT_VORBIS);
  testutil::write_audio(d.str("m/b.wav"), testutil::test_signal(8000), 8000, SF_FORMAT_WAV);
  testutil::write_text(d.str("m/manifest.csv"),
                       "audio,speaker,split,segments\na.ogg,x,train,0 0.5 sil; 0.5 1 aa\nb.wav,y,dev,0 1 aa\n");
  testutil::write_text(d.str("tiny.yaml"), kPhoneSet);
  const PrepareSummary s = prepare_corpus_into(d.str("m"), d.str("wd"), d.str("tiny.yaml"), "");
  EXPECT_EQ(s.skipped, 0);
  const Split tr = load_split(d.str("wd"), "train");
  ASSERT_EQ(tr.utterances.size(), 1u);
  EXPECT_EQ(tr.utterances[0].num_frames, 98);  // 1 s at 16 kHz: 1 + (16000 - 400) / 160
  EXPECT_EQ(tr.utterances[0].labels[20], 0);
  EXPECT_EQ(tr.utterances[0].labels[80], 1);
  EXPECT_EQ(load_split(d.str("wd"), "dev").utterances.size(), 1u);
}

TEST(PrepareCorpusCli, StrictIsOneErrorLineExitOneAndHelpNamesTheFlags) {
  testutil::TempDir d;
  testutil::write_audio(d.str("m/a.wav"), testutil::test_signal(16000), 16000, SF_FORMAT_WAV);
  testutil::write_text(d.str("m/manifest.csv"), "audio,speaker,segments\na.wav,x,0 1 sil\nb.wav,y,0 1 sil\n");
  const std::string bin = TIMITSEG_BINARY;
  std::string out;
  EXPECT_EQ(testutil::run_capture(bin + " prepare --corpus " + d.str("m") + " --out " + d.str("wd") +
                                      " --strict --no-progress --log-level error", &out),
            1);
  EXPECT_EQ(out, "error: " + d.str("m/manifest.csv") + ":3: audio " + d.str("m/b.wav") +
                     " is missing (--strict: nothing written)\n");
  EXPECT_FALSE(fs::exists(d.str("wd/manifest.json")));
  EXPECT_EQ(testutil::run_capture(bin + " prepare --corpus " + d.str("m") + " --out " + d.str("wd") +
                                      " --no-progress --log-level error",
                                  &out),
            0);
  EXPECT_TRUE(fs::exists(d.str("wd/manifest.json")));
  EXPECT_EQ(testutil::run_capture(bin + " prepare --help", &out), 0);
  for (const char* flag : {"--corpus", "--format", "--phone-set", "--split-file", "--tier", "--dev-fraction",
                           "--test-fraction", "--timit"})
    EXPECT_NE(out.find(flag), std::string::npos) << flag;
  EXPECT_EQ(testutil::run_capture(bin + " prepare --out " + d.str("wd2"), &out), 1);
  EXPECT_NE(out.find("give the corpus: --timit DIR (TIMIT) or --corpus DIR"), std::string::npos) << out;
}

// The TIMIT path as the oracle: a synth corpus prepared by `prepare --timit`
// and, as a manifest of the same audio with the .PHN intervals in seconds, by
// `prepare --corpus` with the shipped timit61 set: every utterance both hold
// has bitwise the same features and, frame by frame, the same label names.
TEST(PrepareCorpus, ManifestOfATimitCorpusMatchesTheTimitPath) {
  testutil::TempDir d;
  SynthOptions so;
  so.out_dir = d.str("timit");
  so.speakers = 6;
  so.utterances_per_speaker = 2;
  so.seed = 5;
  synth_corpus(so);
  std::string csv = "id,audio,speaker,split,segments\n";
  for (const auto& e : fs::recursive_directory_iterator(d.str("timit"))) {
    const fs::path p = e.path();
    if (p.extension() != ".PHN" || p.stem().string().rfind("SA", 0) == 0) continue;
    std::string segs, line;
    std::istringstream in(timitseg::read_file(p.string()));
    while (std::getline(in, line)) {
      std::istringstream f(line);
      long a = 0, b = 0;
      std::string l;
      if (!(f >> a >> b >> l)) continue;
      char buf[96];
      std::snprintf(buf, sizeof buf, "%s%.7f %.7f %s", segs.empty() ? "" : "; ", a / 16000.0, b / 16000.0, l.c_str());
      segs += buf;
    }
    const std::string spk = to_lower(p.parent_path().filename().string());
    const std::string part = to_lower(p.parent_path().parent_path().parent_path().filename().string());
    const std::string wav = p.parent_path().string() + "/" + p.stem().string() + ".WAV";
    csv += spk + "/" + to_lower(p.stem().string()) + "," + wav + "," + spk + "," + part + ",\"" + segs + "\"\n";
  }
  testutil::write_text(d.str("m/manifest.csv"), csv);
  PrepareOptions po;
  po.timit_dir = d.str("timit");
  po.workdir = d.str("wd_timit");
  po.progress = false;
  prepare(po);
  EXPECT_EQ(prepare_corpus_into(d.str("m"), d.str("wd_m"), "timit61", "").skipped, 0);
  const auto ta = load_workdir_phone_set(d.str("wd_timit")).labels, tb = load_workdir_phone_set(d.str("wd_m")).labels;
  std::map<std::string, const Utterance*> mine;
  std::vector<Split> keep;
  for (const std::string split : {"train", "dev", "test"}) keep.push_back(load_split(d.str("wd_m"), split));
  for (const auto& s : keep)
    for (const auto& u : s.utterances) mine[u.id] = &u;
  int compared = 0;
  for (const std::string split : {"train", "dev", "test"})
    for (const auto& u : load_split(d.str("wd_timit"), split).utterances) {
      const std::string key = u.id.substr(u.id.find('/', u.id.find('/') + 1) + 1);  // train/dr1/spk/utt -> spk/utt
      ASSERT_TRUE(mine.count(key)) << key;
      const Utterance& v = *mine[key];
      EXPECT_EQ(u.features, v.features) << key;
      ASSERT_EQ(u.labels.size(), v.labels.size()) << key;
      for (size_t t = 0; t < u.labels.size(); ++t) ASSERT_EQ(ta[u.labels[t]], tb[v.labels[t]]) << key << " frame " << t;
      // the recorded sample-accurate reference is the .PHN's rows (q merged into the phone before)
      EXPECT_TRUE(u.reference.empty()) << key << ": TIMIT's path reads the .PHN beside the audio";
      EXPECT_EQ(v.reference_rate, 16000) << key;
      std::vector<std::tuple<int64_t, int64_t, std::string>> want, got;
      std::istringstream phn(timitseg::read_file(fs::path(u.audio_path).replace_extension(".PHN").string()));
      for (int64_t a, b; phn >> a >> b;) {
        std::string l;
        phn >> l;
        if (l == "q" && !want.empty()) std::get<1>(want.back()) = b;
        else want.emplace_back(a, b, l);
      }
      for (const auto& r : v.reference) got.emplace_back(r.start, r.end, tb[r.label]);
      EXPECT_EQ(got, want) << key;
      ++compared;
    }
  EXPECT_GE(compared, 12);
}

// An espeak-ng corpus (IPA labels) in each layout synth writes, TIMIT's
// included (through the corpus's phone set, not TIMIT's 61 phones), prepares to
// the same splits and, utterance by utterance, the same features and label names.
TEST(PrepareCorpus, EspeakCorpusInEveryLayoutPreparesAlike) {
  if (!espeak_built_in()) GTEST_SKIP() << "libespeak-ng is not built in";
  testutil::TempDir d;
  std::map<std::string, std::map<std::string, std::pair<std::vector<float>, std::vector<std::string>>>> by_layout;
  for (const std::string layout : {"textgrid", "buckeye", "kaldi", "manifest", "timit"}) {
    SCOPED_TRACE(layout);
    SynthOptions so;
    so.out_dir = d.str(layout);
    so.voice = SynthVoice::espeak;
    so.language = "es";
    so.layout = timitseg::common::enum_value<CorpusFormat>(layout, "layout");
    so.speakers = 4;
    so.utterances_per_speaker = 2;
    so.seed = 3;
    synth_corpus(so);
    const std::string splits = fs::exists(d.str(layout + "/splits.txt")) ? d.str(layout + "/splits.txt") : "";
    const PrepareSummary s = prepare_corpus_into(d.str(layout), d.str("wd_" + layout), d.str(layout + "/phone_set.yaml"),
                                                 splits, false, layout == "timit" ? "timit" : "");
    EXPECT_EQ(s.skipped, 0);
    for (const auto& p : s.problems) ADD_FAILURE() << p;
    if (layout == "timit") {
      EXPECT_EQ(s.sa_excluded, 4);  // the timit layout has SA1; prepare leaves it out, as TIMIT's
      // without --phone-set (and --format detected) the corpus's own phone_set.yaml: the same WORKDIR
      prepare_corpus_into(d.str(layout), d.str("wd_timit_own"), "", "");
      for (const std::string f : {"train.safetensors", "dev.safetensors", "test.safetensors", "phone_set.yaml"})
        EXPECT_EQ(timitseg::read_file(d.str("wd_timit_own/" + f)), timitseg::read_file(d.str("wd_timit/" + f))) << f;
    }
    const auto names = load_workdir_phone_set(d.str("wd_" + layout)).labels;
    for (const std::string split : {"train", "dev", "test"})
      for (const auto& u : load_split(d.str("wd_" + layout), split).utterances) {
        std::vector<std::string> l;
        for (int32_t x : u.labels) l.push_back(names[x]);
        std::string id = u.id.substr(u.id.rfind('/') + 1);  // SPEAKER_UTT; TIMIT's ids: part/dr/speaker/utt
        if (layout == "timit") id = u.id.substr(u.id.rfind('/', u.id.rfind('/') - 1) + 1), id[id.find('/')] = '_';
        by_layout[layout][split + ":" + id] = {u.features, l};
      }
  }
  EXPECT_EQ(by_layout["textgrid"].size(), 8u);
  for (const auto& [layout, utts] : by_layout) EXPECT_EQ(utts, by_layout["textgrid"]) << layout;
}
