// prepare --corpus of labels without times (transcripts): every layout that holds
// them (manifest phones / text, Kaldi text, MFA .lab and TextGrid words tier,
// LibriSpeech), prepared and loaded back; the sequences checked against the
// dictionary's pronunciations (looked up here, by name), the optional silence at
// both ends and between words; a manifest mixing times and transcripts; each bad
// input one line naming its file and row, the rest prepared, nothing with
// --strict; synth's LibriSpeech layout prepared with espeak's G2P.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/files.h"
#include "common/safetensors.h"
#include "common/sha256.h"
#include "data/dataset.h"
#include "data/espeak_tts.h"
#include "data/phone_set.h"
#include "data/synth.h"
#include "util.h"

namespace fs = std::filesystem;
using namespace timitseg::data;

namespace {

// An MFA dictionary: "hello" has two pronunciations (the first, more probable, kept).
const char* kDict =
    "hello\t0.9\th ə l oʊ\n"
    "hello\t0.1\th ɛ l oʊ\n"
    "world\tw ɜ l d\n"
    "big\tb ɪ ɡ\n"
    "dog\td ɔ ɡ\n"
    "good\tɡ ʊ d\n";

std::vector<std::string> words_of(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> v;
  for (std::string w; in >> w;) v.push_back(w);
  return v;
}

// The transcript a word sequence must give (names, optional flags), computed from the
// dictionary text above: sil? w1 sil? w2 ... sil?, equal neighbours merged.
std::pair<std::vector<std::string>, std::vector<int>> expected_words(const std::string& text) {
  std::map<std::string, std::vector<std::string>> first;
  std::istringstream d(kDict);
  for (std::string line; std::getline(d, line);) {
    std::istringstream f(line);
    std::string w, tok;
    f >> w;
    std::vector<std::string> ph;
    while (f >> tok)
      if (tok.find_first_not_of("0123456789.") != std::string::npos) ph.push_back(tok);
    first.emplace(w, ph);
  }
  std::vector<std::string> names{"sil"};
  std::vector<int> opt{1};
  auto push = [&](const std::string& n, int o) {
    if (names.back() == n) opt.back() = opt.back() && o;
    else names.push_back(n), opt.push_back(o);
  };
  const auto ws = words_of(text);
  for (size_t i = 0; i < ws.size(); ++i) {
    std::string lw = ws[i];
    for (char& c : lw) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (i > 0) push("sil", 1);
    for (const auto& p : first.at(lw)) push(p, 0);
  }
  push("sil", 1);
  return {names, opt};
}

// sil? PHONES sil? (no optional silence at an end the phones start or end with sil)
std::pair<std::vector<std::string>, std::vector<int>> expected_phones(const std::string& phones) {
  const auto toks = words_of(phones);
  std::vector<std::string> names;
  std::vector<int> opt;
  if (toks.front() != "sil") names.push_back("sil"), opt.push_back(1);
  for (const auto& p : toks)
    if (names.empty() || names.back() != p) names.push_back(p), opt.push_back(0);
  if (toks.back() != "sil") names.push_back("sil"), opt.push_back(1);
  return {names, opt};
}

struct Loaded {
  std::map<std::string, Utterance> utts;  // id -> utterance (every split)
  std::map<std::string, std::string> split_of;
  std::vector<std::string> labels;        // the WORKDIR's label table
  nlohmann::json manifest;
};

Loaded load_all(const std::string& wd) {
  Loaded l;
  l.labels = load_workdir_phone_set(wd).labels;
  l.manifest = nlohmann::json::parse(timitseg::read_file(wd + "/manifest.json"));
  for (const std::string split : {"train", "dev", "core-test", "test"})
    for (auto& u : load_split(wd, split).utterances) l.split_of[u.id] = split, l.utts[u.id] = std::move(u);
  return l;
}

// The transcript of u as names and flags (with alternatives: each slot's first, the primary path).
std::pair<std::vector<std::string>, std::vector<int>> named(const Loaded& l, const Utterance& u) {
  std::pair<std::vector<std::string>, std::vector<int>> out;
  for (size_t k = 0; k < u.transcript.size(); ++k) {
    if (!u.transcript_slot.empty() && (u.transcript_slot.at(k) & 255) != 0) continue;
    out.first.push_back(l.labels.at(static_cast<size_t>(u.transcript[k])));
    out.second.push_back(u.transcript_optional.at(k));
  }
  return out;
}

void expect_transcript_only(const Utterance& u) {
  EXPECT_FALSE(u.has_times()) << u.id;
  EXPECT_TRUE(u.labels.empty() && u.segments.empty() && u.reference.empty()) << u.id;
  EXPECT_GT(u.num_frames, 0) << u.id;
  EXPECT_EQ(u.features.size(), static_cast<size_t>(u.num_frames) * static_cast<size_t>(u.dim)) << u.id;
  EXPECT_EQ(u.transcript.size(), u.transcript_optional.size()) << u.id;
}

PrepareSummary prepare_into(const std::string& corpus, const std::string& out, const std::string& dict = "",
                            const std::string& format = "", const std::string& phone_set = "", bool strict = false) {
  PrepareOptions po;
  po.corpus_dir = corpus;
  if (!format.empty()) po.corpus_format = timitseg::common::enum_value<CorpusFormat>(format, "format");
  po.workdir = out;
  po.dict = dict;
  po.phone_set = phone_set;
  po.threads = 2;
  po.progress = false;
  po.strict = strict;
  return prepare(po);
}

// 3 speakers x 2 utterances of 1.2 s (one speaker per split), each a word transcript.
const std::vector<std::string> kTexts = {"hello world", "big dog", "good dog", "hello big world", "dog", "World Good"};

void write_wavs(const std::string& dir, const std::string& sub = "") {
  for (int k = 0; k < 6; ++k)
    testutil::write_audio(dir + "/" + sub + "s" + std::to_string(k / 2) + "_u" + std::to_string(k % 2) + ".wav",
                          testutil::test_signal(19200, static_cast<unsigned>(k + 1)), 16000, SF_FORMAT_WAV);
}
std::string split_of_speaker(int s) { return s == 0 ? "train" : s == 1 ? "dev" : "test"; }

}  // namespace

TEST(PrepareTranscripts, ManifestPhonesColumnLoadsBackAsTheSequence) {
  testutil::TempDir d;
  write_wavs(d.str("m"));
  const std::vector<std::string> phones = {"a b c", "c c a", "sil b a", "a b sil", "c", "a sil c b"};
  std::string csv = "audio,speaker,split,phones\n";
  for (int k = 0; k < 6; ++k)
    csv += "s" + std::to_string(k / 2) + "_u" + std::to_string(k % 2) + ".wav,s" + std::to_string(k / 2) + "," +
           split_of_speaker(k / 2) + "," + phones[k] + "\n";
  testutil::write_text(d.str("m/manifest.csv"), csv);
  const PrepareSummary s = prepare_into(d.str("m"), d.str("wd"));
  EXPECT_EQ(s.skipped, 0);
  EXPECT_EQ(s.transcript_only, 6);
  const Loaded l = load_all(d.str("wd"));
  ASSERT_EQ(l.utts.size(), 6u);
  for (int k = 0; k < 6; ++k) {
    const std::string id = "s" + std::to_string(k / 2) + "_u" + std::to_string(k % 2);
    SCOPED_TRACE(id);
    const Utterance& u = l.utts.at(id);
    expect_transcript_only(u);
    EXPECT_EQ(named(l, u), expected_phones(phones[k]));
    EXPECT_EQ(l.split_of.at(id), split_of_speaker(k / 2));
    EXPECT_EQ(u.num_frames, 118);  // 1.2 s: 1 + (19200 - 400) / 160
  }
  EXPECT_EQ(l.manifest["splits"]["train"]["transcript_only"], 2);
  EXPECT_EQ(l.manifest["splits"]["train"]["with_times"], 0);
  // the derived phone set: the transcripts' phones and silence
  EXPECT_EQ(l.labels.size(), 4u);
  // the split files hold the transcript tensors, and a WORKDIR of times none (the other tests' bitwise checks)
  EXPECT_NE(timitseg::read_file(d.str("wd/train.safetensors")).find("utt_transcript_offsets"), std::string::npos);
}

TEST(PrepareTranscripts, ManifestTextThroughAnMfaDictionaryGivesEveryPronunciation) {
  testutil::TempDir d;
  write_wavs(d.str("m"), "audio/");
  testutil::write_text(d.str("dict.txt"), kDict);
  std::string jsonl;
  for (int k = 0; k < 6; ++k)
    jsonl += nlohmann::json{{"audio", "audio/s" + std::to_string(k / 2) + "_u" + std::to_string(k % 2) + ".wav"},
                            {"id", "u" + std::to_string(k)},
                            {"speaker", "s" + std::to_string(k / 2)},
                            {"split", split_of_speaker(k / 2)},
                            {"text", kTexts[k]}}
                 .dump() + "\n";
  testutil::write_text(d.str("m/manifest.jsonl"), jsonl);
  const PrepareSummary s = prepare_into(d.str("m"), d.str("wd"), d.str("dict.txt"));
  EXPECT_EQ(s.skipped, 0);
  for (const auto& p : s.problems) ADD_FAILURE() << p;
  const Loaded l = load_all(d.str("wd"));
  ASSERT_EQ(l.utts.size(), 6u);
  for (int k = 0; k < 6; ++k) {
    SCOPED_TRACE(kTexts[k]);
    const Utterance& u = l.utts.at("u" + std::to_string(k));
    expect_transcript_only(u);
    EXPECT_EQ(named(l, u), expected_words(kTexts[k]));
    // 'hello' has two pronunciations: its slot holds both, the more probable first (alternative 0)
    const bool hello = kTexts[k].rfind("hello", 0) == 0;
    ASSERT_EQ(u.transcript_slot.empty(), !hello);
    if (!hello) continue;
    std::vector<std::string> second;
    for (size_t i = 0; i < u.transcript.size(); ++i)
      if ((u.transcript_slot[i] & 255) == 1) {
        EXPECT_EQ(u.transcript_slot[i] >> 8, 1);  // slot 0: the optional silence before it
        EXPECT_EQ(u.transcript_optional[i], 0);
        second.push_back(l.labels.at(static_cast<size_t>(u.transcript[i])));
      }
    EXPECT_EQ(second, (std::vector<std::string>{"h", "ɛ", "l", "oʊ"}));
    EXPECT_EQ(u.transcript_slot.front(), 0);      // the silence: slot 0, alternative 0
    EXPECT_EQ(u.transcript_slot.at(1), 1 << 8);   // h of the first pronunciation
    EXPECT_EQ(u.transcript_slot.at(5), 1 << 8 | 1);  // h of the second
    EXPECT_EQ(u.transcript_slot.at(9), 2 << 8);   // the silence after 'hello'
  }
  // the phone set: the dictionary's phones (ɛ too, though only in an alternative) and sil
  EXPECT_EQ(l.labels.size(), 14u);
  EXPECT_NE(std::find(l.labels.begin(), l.labels.end(), "ɛ"), l.labels.end());
  EXPECT_EQ(l.manifest["transcripts"]["words_with_alternatives"], 2);  // the two 'hello's
}

TEST(PrepareTranscripts, ManifestMixingTimesAndTranscripts) {
  testutil::TempDir d;
  write_wavs(d.str("m"));
  // s0_u0 times; s0_u1 phones; s1_u0 times + the same phones (times kept); the others phones
  std::string jsonl;
  for (int k = 0; k < 6; ++k) {
    nlohmann::json row = {{"audio", "s" + std::to_string(k / 2) + "_u" + std::to_string(k % 2) + ".wav"},
                          {"speaker", "s" + std::to_string(k / 2)}, {"split", split_of_speaker(k / 2)}};
    if (k == 0 || k == 2) row["segments"] = {{0.0, 0.3, "sil"}, {0.3, 0.7, "a"}, {0.7, 1.2, "b"}};
    if (k == 2) row["phones"] = "a b";
    if (k != 0 && k != 2) row["phones"] = {"b", "a"};
    jsonl += row.dump() + "\n";
  }
  testutil::write_text(d.str("m/manifest.jsonl"), jsonl);
  const PrepareSummary s = prepare_into(d.str("m"), d.str("wd"));
  EXPECT_EQ(s.skipped, 0);
  for (const auto& p : s.problems) ADD_FAILURE() << p;
  EXPECT_EQ(s.transcript_only, 4);
  const Loaded l = load_all(d.str("wd"));
  for (const auto& [id, u] : l.utts) {
    SCOPED_TRACE(id);
    const bool timed = id == "s0_u0" || id == "s1_u0";
    EXPECT_EQ(u.has_times(), timed);
    if (timed) {
      EXPECT_TRUE(u.transcript.empty() && u.transcript_optional.empty());
      EXPECT_EQ(u.labels.size(), static_cast<size_t>(u.num_frames));
      EXPECT_EQ(l.labels.at(static_cast<size_t>(u.labels.at(50))), "a");  // frame 50's centre: 0.5125 s
    } else {
      expect_transcript_only(u);
      EXPECT_EQ(named(l, u), expected_phones("b a"));
    }
  }
  EXPECT_EQ(l.manifest["splits"]["train"]["with_times"], 1);
  EXPECT_EQ(l.manifest["splits"]["train"]["transcript_only"], 1);
  EXPECT_EQ(l.manifest["splits"]["dev"]["with_times"], 1);
}

TEST(PrepareTranscripts, KaldiTextMfaLabAndTextGridWordsAndLibriSpeech) {
  testutil::TempDir d;
  testutil::write_text(d.str("dict.txt"), kDict);
  // Kaldi: train/dev/test data dirs, text and no CTM
  for (int s = 0; s < 3; ++s) {
    const std::string dir = d.str("kaldi/" + split_of_speaker(s));
    std::string scp, u2s, text;
    for (int u = 0; u < 2; ++u) {
      const int k = 2 * s + u;
      const std::string id = "s" + std::to_string(s) + "_u" + std::to_string(u);
      testutil::write_audio(dir + "/" + id + ".wav", testutil::test_signal(19200, static_cast<unsigned>(k + 1)), 16000,
                            SF_FORMAT_WAV);
      scp += id + " " + id + ".wav\n", u2s += id + " s" + std::to_string(s) + "\n", text += id + " " + kTexts[k] + "\n";
    }
    testutil::write_text(dir + "/wav.scp", scp), testutil::write_text(dir + "/utt2spk", u2s);
    testutil::write_text(dir + "/text", text);
  }
  // MFA: SPEAKER/UTT.wav with UTT.lab (the first speaker), UTT.txt or a TextGrid with a words tier only
  for (int k = 0; k < 6; ++k) {
    const std::string base = d.str("mfa/s" + std::to_string(k / 2) + "/u" + std::to_string(k % 2));
    testutil::write_audio(base + ".wav", testutil::test_signal(19200, static_cast<unsigned>(k + 1)), 16000, SF_FORMAT_WAV);
    if (k < 2) testutil::write_text(base + ".lab", kTexts[k] + "\n");
    else if (k < 4) testutil::write_text(base + ".txt", kTexts[k] + ".\n");
    else {
      const auto ws = words_of(kTexts[k]);
      std::string tg = "File type = \"ooTextFile\"\nObject class = \"TextGrid\"\n\nxmin = 0\nxmax = 1.2\ntiers? "
                       "<exists>\nsize = 1\nitem []:\n    item [1]:\n        class = \"IntervalTier\"\n        name = "
                       "\"words\"\n        xmin = 0\n        xmax = 1.2\n        intervals: size = " +
                       std::to_string(ws.size() + 1) + "\n";
      for (size_t i = 0; i <= ws.size(); ++i)
        tg += "        intervals [" + std::to_string(i + 1) + "]:\n            xmin = " + std::to_string(i * 0.2) +
              "\n            xmax = " + (i == ws.size() ? std::string("1.2") : std::to_string((i + 1) * 0.2)) +
              "\n            text = \"" + (i == ws.size() ? std::string("") : ws[i]) + "\"\n";
      testutil::write_text(base + ".TextGrid", tg);
    }
  }
  // LibriSpeech: SUBSET/SPEAKER/CHAPTER/SPEAKER-CHAPTER-UTT.flac, SPEAKER-CHAPTER.trans.txt (upper case)
  for (int s = 0; s < 3; ++s) {
    const std::string spk = std::to_string(100 + s), dir = d.str("libri/" + split_of_speaker(s) + "-clean/" + spk + "/7");
    std::string trans;
    for (int u = 0; u < 2; ++u) {
      const int k = 2 * s + u;
      const std::string id = spk + "-7-000" + std::to_string(u);
      testutil::write_audio(dir + "/" + id + ".flac", testutil::test_signal(19200, static_cast<unsigned>(k + 1)),
                            16000, SF_FORMAT_FLAC);
      std::string upper = kTexts[k];
      for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      trans += id + " " + upper + "\n";
    }
    testutil::write_text(dir + "/" + spk + "-7.trans.txt", trans);
  }
  testutil::write_text(d.str("splits.txt"), "s0 train\ns1 dev\ns2 test\n");
  for (const std::string layout : {"kaldi", "mfa", "libri"}) {
    SCOPED_TRACE(layout);
    PrepareOptions po;
    po.corpus_dir = d.str(layout);
    po.workdir = d.str("wd_" + layout);
    po.dict = d.str("dict.txt");
    po.split_file = layout == "mfa" ? d.str("splits.txt") : "";
    po.threads = 2;
    po.progress = false;
    const PrepareSummary s = prepare(po);
    EXPECT_EQ(s.skipped, 0);
    for (const auto& p : s.problems) ADD_FAILURE() << p;
    EXPECT_EQ(s.transcript_only, 6);
    const Loaded l = load_all(d.str("wd_" + layout));
    ASSERT_EQ(l.utts.size(), 6u);
    int k = 0;
    for (const std::string split : {"train", "dev", "test"})
      for (const auto& [id, u] : l.utts) {
        if (l.split_of.at(id) != split) continue;
        SCOPED_TRACE(id);
        expect_transcript_only(u);
        EXPECT_EQ(named(l, u), expected_words(kTexts[k++]));  // ids sort in corpus order within a split
      }
    EXPECT_EQ(k, 6);
  }
  EXPECT_TRUE(load_all(d.str("wd_libri")).utts.count("train-clean/100-7-0000"));
}

TEST(PrepareTranscripts, BadInputsAreOneLineEachTheRestPreparedStrictWritesNothing) {
  testutil::TempDir d;
  write_wavs(d.str("m"));
  testutil::write_audio(d.str("m/short.wav"), testutil::test_signal(1600, 9), 16000, SF_FORMAT_WAV);  // 8 frames
  testutil::write_text(d.str("dict.txt"), kDict);
  testutil::write_text(d.str("set.yaml"), "name: abc\nphones: [sil, a, b, c, h, ə, l, oʊ, w, ɜ, d, ɔ, ɡ, ɪ, ʊ]\nsilence: [sil]\n");
  const std::string csv =
      "audio,speaker,split,phones,text,segments\n"
      "s0_u0.wav,s0,train,a b c,,\n"                       // 2: fine
      "s0_u1.wav,s0,train,,hello world,\n"                 // 3: fine
      "s1_u0.wav,s1,dev,,,\n"                              // 4: empty transcript (and no times)
      "s1_u1.wav,s1,dev,,hello cat,\n"                     // 5: 'cat' has no pronunciation
      "s2_u0.wav,s2,test,a x b,,\n"                        // 6: x is not in the phone set
      "s2_u1.wav,s2,test,a b,,0 0.5 sil; 0.5 1.2 c\n"      // 7: times say c, the phones a b
      "short.wav,s0,train,a b c a b c a b c a,,\n";      // 8: 10 phones in 8 frames
  testutil::write_text(d.str("m/manifest.csv"), csv);
  const PrepareSummary s = prepare_into(d.str("m"), d.str("wd"), d.str("dict.txt"), "", d.str("set.yaml"));
  const std::string mf = d.str("m/manifest.csv");
  const std::vector<std::string> want = {
      // hello's second pronunciation has a phone the set lacks: a warning, the first offered alone
      mf + ":3: pronunciation 'h ɛ l oʊ' (utterance s0_u1) has phone 'ɛ', which is not in phone set abc: not "
           "offered (the word's others are)",
      mf + ":4: empty transcript (utterance s1_u0)",
      mf + ":5: word 'cat' is not in the dictionary " + d.str("dict.txt") + " (utterance s1_u1)",
      mf + ":6: phone 'x' of utterance s2_u0 is not in phone set abc (nearest: h, a, b)",
      mf + ":7: the phones column 'a b' is not the sequence of the row's times 'c' (silence aside): give one of them",
      d.str("m/short.wav") + ": transcript too long for its audio: 8 frames cannot hold its 10 phones (utterance short)",
  };
  EXPECT_EQ(s.problems, want);
  EXPECT_EQ(s.skipped, 5);
  const std::map<std::string, int64_t> kinds = {{"empty transcript", 1}, {"word without pronunciation", 1},
                                                {"phone outside the phone set", 1}, {"times and transcript conflict", 1},
                                                {"transcript too long for its audio", 1}};
  EXPECT_EQ(s.skipped_by_kind, kinds);
  EXPECT_EQ(s.warnings, 1);
  const Loaded l = load_all(d.str("wd"));
  ASSERT_EQ(l.utts.size(), 2u);
  EXPECT_EQ(named(l, l.utts.at("s0_u0")), expected_phones("a b c"));
  EXPECT_EQ(named(l, l.utts.at("s0_u1")), expected_words("hello world"));
  // --strict: the first bad row stops, nothing written
  try {
    prepare_into(d.str("m"), d.str("wd_strict"), d.str("dict.txt"), "", d.str("set.yaml"), true);
    ADD_FAILURE() << "--strict did not stop";
  } catch (const std::exception& e) {
    EXPECT_EQ(std::string(e.what()), want[1] + " (--strict: nothing written)");
  }
  EXPECT_FALSE(fs::exists(d.str("wd_strict")));
  // words without --dict or --g2p: one line, before any work
  try {
    prepare_into(d.str("m"), d.str("wd_nodict"), "", "", d.str("set.yaml"));
    ADD_FAILURE() << "no dictionary accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("give --dict FILE or --g2p espeak --language L"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(d.str("wd_nodict")));
}

TEST(PrepareTranscripts, SynthLibriSpeechLayoutPreparesWithEspeakG2p) {
  if (!espeak_built_in()) GTEST_SKIP() << "libespeak-ng is not built in";
  testutil::TempDir d;
  SynthOptions so;
  so.out_dir = d.str("libri");
  so.voice = SynthVoice::espeak;
  so.language = "es";
  so.layout = CorpusFormat::librispeech;
  so.speakers = 4;
  so.utterances_per_speaker = 2;
  so.seed = 5;
  synth_corpus(so);
  // the layout: SUBSET/SPEAKER/1/SPEAKER-1-UTT.flac and SPEAKER-1.trans.txt, upper-case words
  std::map<std::string, std::string> text;  // utterance -> its words
  int flacs = 0;
  for (const auto& p : fs::recursive_directory_iterator(d.str("libri"))) {
    const std::string name = p.path().filename().string();
    flacs += p.path().extension() == ".flac";
    if (name.size() > 10 && name.substr(name.size() - 10) == ".trans.txt") {
      std::istringstream in(timitseg::read_file(p.path().string()));
      for (std::string line; std::getline(in, line);) {
        const std::string id = line.substr(0, line.find(' '));
        EXPECT_TRUE(fs::exists(p.path().parent_path() / (id + ".flac"))) << id;
        text[id] = line.substr(line.find(' ') + 1);
      }
    }
  }
  EXPECT_EQ(flacs, 8);
  ASSERT_EQ(text.size(), 8u);
  PrepareOptions po;
  po.corpus_dir = d.str("libri");
  po.workdir = d.str("wd");
  po.g2p = timitseg::data::G2pEngine::espeak;
  po.language = "es";
  po.threads = 2;
  po.progress = false;
  const PrepareSummary s = prepare(po);
  EXPECT_EQ(s.skipped, 0);
  for (const auto& p : s.problems) ADD_FAILURE() << p;
  EXPECT_EQ(s.transcript_only, 8);
  const Loaded l = load_all(d.str("wd"));
  ASSERT_EQ(l.utts.size(), 8u);
  for (const auto& [id, u] : l.utts) {
    SCOPED_TRACE(id);
    expect_transcript_only(u);
    // the oracle: espeak's phones of each (lower-cased) word, sil between and around
    std::vector<std::string> names{"sil"};
    std::vector<int> opt{1};
    const auto ws = words_of(text.at(id.substr(id.find('/') + 1)));
    for (size_t i = 0; i < ws.size(); ++i) {
      std::string w = ws[i];
      for (char& c : w) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (i > 0) names.push_back("sil"), opt.push_back(1);
      for (const auto& p : espeak_phones(w, "es"))
        if (names.back() != p) names.push_back(p), opt.push_back(0);
    }
    names.push_back("sil"), opt.push_back(1);
    EXPECT_EQ(named(l, u), std::make_pair(names, opt));
  }
}

TEST(PrepareTranscripts, AWorkdirOfTimesOnlyHasNoTranscriptTensors) {
  testutil::TempDir d;
  write_wavs(d.str("m"));
  std::string csv = "audio,speaker,split,segments\n";
  for (int k = 0; k < 6; ++k)
    csv += "s" + std::to_string(k / 2) + "_u" + std::to_string(k % 2) + ".wav,s" + std::to_string(k / 2) + "," +
           split_of_speaker(k / 2) + ",0 0.4 sil; 0.4 1.2 a\n";
  testutil::write_text(d.str("m/manifest.csv"), csv);
  const PrepareSummary s = prepare_into(d.str("m"), d.str("wd"));
  EXPECT_EQ(s.skipped, 0);
  EXPECT_EQ(s.transcript_only, 0);
  for (const std::string split : {"train", "dev", "test"}) {
    const std::string bytes = timitseg::read_file(d.str("wd/" + split + ".safetensors"));
    EXPECT_EQ(bytes.find("transcript"), std::string::npos) << split;
    EXPECT_EQ(bytes.find("\"times\""), std::string::npos) << split;
  }
  const Loaded l = load_all(d.str("wd"));
  ASSERT_EQ(l.utts.size(), 6u);
  for (const auto& [id, u] : l.utts) {
    EXPECT_TRUE(u.has_times()) << id;
    EXPECT_TRUE(u.transcript.empty() && u.transcript_optional.empty()) << id;
    EXPECT_EQ(u.labels.size(), static_cast<size_t>(u.num_frames)) << id;
  }
  EXPECT_EQ(l.manifest["splits"]["test"]["with_times"], 2);
  EXPECT_EQ(l.manifest["splits"]["test"]["transcript_only"], 0);
  EXPECT_FALSE(l.manifest.contains("transcripts"));
}

// The loader's checks of the transcript tensors (a cache edited and re-checksummed, as a
// bug in prepare would write it): an utterance of optional phones only, a frame label in
// an utterance without times, a transcript beside times.
TEST(PrepareTranscripts, LoaderRefusesTranscriptsThatBreakTheContract) {
  testutil::TempDir d;
  write_wavs(d.str("m"));
  std::string csv = "audio,speaker,split,phones,segments\n";
  for (int k = 0; k < 6; ++k)
    csv += "s" + std::to_string(k / 2) + "_u" + std::to_string(k % 2) + ".wav,s" + std::to_string(k / 2) + "," +
           split_of_speaker(k / 2) + (k == 1 ? ",,0 0.5 sil; 0.5 1.2 a\n" : ",a b,\n");
  testutil::write_text(d.str("m/manifest.csv"), csv);
  prepare_into(d.str("m"), d.str("wd"));
  const std::string file = d.str("wd/train.safetensors");
  const std::string original = timitseg::read_file(file);
  auto edit_and_load = [&](const std::function<void(timitseg::st::File&)>& edit) -> std::string {
    testutil::write_text(file, original);
    timitseg::st::File f = timitseg::st::load(file);
    edit(f);
    timitseg::st::save(file, f);
    nlohmann::json m = nlohmann::json::parse(timitseg::read_file(d.str("wd/manifest.json")));
    uint64_t bytes = 0;
    m["files"]["train.safetensors"]["sha256"] = timitseg::sha256_file(file, &bytes);
    m["files"]["train.safetensors"]["bytes"] = bytes;
    testutil::write_text(d.str("wd/manifest.json"), m.dump(2));
    try {
      load_split(d.str("wd"), "train");
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(edit_and_load([](timitseg::st::File&) {}), "");  // re-saved unchanged: loads
  // train: s0_u0 (phones), s0_u1 (times); transcripts [sil? a b sil?] then none
  std::string e = edit_and_load([](timitseg::st::File& f) {
    auto o = f.get("transcript_optional").to<uint8_t>();
    o.assign(o.size(), 0), o[0] = o[2] = 1;  // other flags within the rules (1 0 1 0): loads
    f.tensors["transcript_optional"] = timitseg::st::Tensor::from<uint8_t>({static_cast<int64_t>(o.size())}, o);
  });
  EXPECT_EQ(e, "");
  e = edit_and_load([](timitseg::st::File& f) {
    auto o = f.get("transcript_optional").to<uint8_t>();
    o.assign(o.size(), 1);
    f.tensors["transcript_optional"] = timitseg::st::Tensor::from<uint8_t>({static_cast<int64_t>(o.size())}, o);
  });
  EXPECT_NE(e.find("transcript of utterance 0 (s0_u0) has a bad optional flag"), std::string::npos) << e;
  e = edit_and_load([](timitseg::st::File& f) {
    auto l = f.get("labels").to<int32_t>();
    l[0] = 0;  // the first frame of s0_u0, which has no times
    f.tensors["labels"] = timitseg::st::Tensor::from<int32_t>({static_cast<int64_t>(l.size())}, l);
  });
  EXPECT_NE(e.find("in an utterance without times"), std::string::npos) << e;
  e = edit_and_load([](timitseg::st::File& f) {
    auto off = f.get("utt_transcript_offsets").to<int64_t>();
    off[1] -= 1;  // s0_u0 loses its last phone to s0_u1, which has times
    f.tensors["utt_transcript_offsets"] = timitseg::st::Tensor::from<int64_t>({static_cast<int64_t>(off.size())}, off);
  });
  EXPECT_NE(e.find("transcript of utterance 1 (s0_u1) is given beside its times"), std::string::npos) << e;
  // the slots of alternative pronunciations: (slot << 8) | alternative, in order
  auto with_slots = [&](std::vector<int32_t> v) {
    return edit_and_load([v](timitseg::st::File& f) {
      f.tensors["transcript_slots"] = timitseg::st::Tensor::from<int32_t>({static_cast<int64_t>(v.size())}, v);
    });
  };
  EXPECT_EQ(with_slots({0, 1 << 8, 1 << 8 | 1, 2 << 8}), "");  // sil? {a | b} sil?: loads
  e = with_slots({0, 1 << 8, 1 << 8 | 1, 1 << 8});             // back to alternative 0
  EXPECT_NE(e.find("transcript of utterance 0 (s0_u0) has a bad slot entry 256"), std::string::npos) << e;
  e = with_slots({0, 2 << 8, 2 << 8, 3 << 8});  // slot 1 skipped
  EXPECT_NE(e.find("bad slot entry 512"), std::string::npos) << e;
}

TEST(PrepareTranscriptsCli, AWordWithoutPronunciationIsOneLineAndHelpNamesTheFlags) {
  testutil::TempDir d;
  write_wavs(d.str("m"));
  testutil::write_text(d.str("dict.txt"), kDict);
  testutil::write_text(d.str("m/manifest.csv"), "audio,speaker,text\ns0_u0.wav,s0,hello world\ns0_u1.wav,s0,big cat\n"
                                                "s1_u0.wav,s1,good dog\ns2_u0.wav,s2,dog\n");
  const std::string bin = TIMITSEG_BINARY;
  const std::string cmd = bin + " prepare --corpus " + d.str("m") + " --dict " + d.str("dict.txt") + " --out " +
                          d.str("wd") + " --no-progress --log-level error";
  std::string out;
  EXPECT_EQ(testutil::run_capture(cmd + " --strict", &out), 1);
  EXPECT_EQ(out, "error: " + d.str("m/manifest.csv") + ":3: word 'cat' is not in the dictionary " + d.str("dict.txt") +
                     " (utterance s0_u1) (--strict: nothing written)\n");
  EXPECT_FALSE(fs::exists(d.str("wd")));
  EXPECT_EQ(testutil::run_capture(cmd, &out), 0);  // without --strict: the line, the others prepared
  ASSERT_NE(out.find("] [error] "), std::string::npos) << out;  // after the time stamp: one line
  EXPECT_EQ(out.substr(out.find("] [error] ") + 2), "[error] " + d.str("m/manifest.csv") +
                                                        ":3: word 'cat' is not in the dictionary " + d.str("dict.txt") +
                                                        " (utterance s0_u1) (s0_u1 skipped)\n");
  EXPECT_EQ(load_all(d.str("wd")).utts.size(), 3u);
  EXPECT_EQ(testutil::run_capture(bin + " prepare --help", &out), 0);
  for (const char* flag : {"--dict", "--dict-format", "--g2p", "--language", "librispeech"})
    EXPECT_NE(out.find(flag), std::string::npos) << flag;
}
