// The espeak-ng corpus (data/synth_espeak.h, data/synth_layouts.h, docs/synth.md):
// the shipped word lists spoken in their own language, utterances in three languages
// whose labels tile the 16 kHz audio with quiet silences, determinism per seed (and
// for any thread count, byte for byte), each layout's files, the phone-set YAML, and
// the one-line errors of an unknown language / a language without a word list.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "data/espeak_tts.h"
#include "data/synth.h"
#include "data/synth_espeak.h"
#include "data/synth_layouts.h"
#include "util.h"

using namespace timitseg::data;
namespace fs = std::filesystem;

#define REQUIRE_ESPEAK()                                                                                   \
  do {                                                                                                     \
    if (!espeak_built_in()) GTEST_SKIP() << "libespeak-ng is not built in (cmake -DTIMITSEG_ESPEAK=OFF or " \
                                            "libespeak-ng-dev missing): espeak tests skipped";              \
  } while (0)

namespace {

double rms_db(const std::vector<int16_t>& x, int64_t a, int64_t b) {
  double e = 0;
  for (int64_t n = a; n < b; ++n) e += double(x[n]) * x[n];
  return 10 * std::log10(e / double(std::max<int64_t>(1, b - a)) + 1.0);
}

// Every file under root, relative path -> bytes.
std::map<std::string, std::string> tree(const fs::path& root) {
  std::map<std::string, std::string> m;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file()) m[fs::relative(e.path(), root).generic_string()] = timitseg::read_file(e.path().string());
  return m;
}

SynthOptions espeak_opts(const std::string& out, const std::string& lang, const std::string& layout) {
  SynthOptions o;
  o.out_dir = out;
  o.voice = SynthVoice::espeak;
  o.language = lang;
  o.layout = timitseg::common::enum_value<CorpusFormat>(layout, "layout");
  o.speakers = 4;
  o.utterances_per_speaker = 2;
  o.seed = 7;
  o.noise_db = kFliteNoiseDb;
  return o;
}

}  // namespace

// Spoken as one text, no word of a shipped list makes espeak switch to another language.
TEST(SynthEspeak, WordListsAreSpokenInTheirOwnLanguage) {
  REQUIRE_ESPEAK();
  for (const std::string lang : espeak_text_languages()) {
    const auto* v = espeak_vocabulary(lang);
    ASSERT_NE(v, nullptr) << lang;
    EXPECT_GE(v->size(), 80u) << lang;
    std::string text;
    for (const auto& w : *v) text += w + " ";
    EspeakRequest r;
    r.language = lang == "en" ? "en-us" : lang;
    r.text = text;
    const EspeakOutput o = espeak_speak(r);
    EXPECT_EQ(o.language_switches, 0) << lang;
    EXPECT_EQ(o.words.size(), v->size()) << lang;
  }
  EXPECT_EQ(espeak_vocabulary("pt"), nullptr);
  EXPECT_EQ(espeak_vocabulary("es-419"), espeak_vocabulary("es"));
}

TEST(SynthEspeak, UtterancesTileTheAudioWithQuietSilencesInThreeLanguages) {
  REQUIRE_ESPEAK();
  const auto spks = synth_speakers(6, 11);
  for (const std::string lang : {"es", "de", "cmn"}) {
    const EspeakTexts t = espeak_texts(lang, "");
    for (int k = 0; k < 3; ++k) {
      const SynthSpeaker& spk = spks[static_cast<size_t>(k)];
      const SynthUtterance u = synth_espeak_utterance(spk, t, 11, k, false, kFliteNoiseDb);
      const int64_t N = static_cast<int64_t>(u.samples.size());
      ASSERT_GT(N, 16000 / 2) << lang;
      ASSERT_GE(u.phones.size(), 6u);
      EXPECT_EQ(u.phones.front().start, 0);
      EXPECT_EQ(u.phones.back().end, N);
      EXPECT_EQ(u.phones.front().label, kEspeakSilence) << "leading silence";
      EXPECT_EQ(u.phones.back().label, kEspeakSilence) << "trailing silence";
      double sil_e = 0, sp_e = 0;
      int64_t sil_n = 0, sp_n = 0;
      for (size_t i = 0; i < u.phones.size(); ++i) {
        const auto& p = u.phones[i];
        EXPECT_LT(p.start, p.end);
        EXPECT_FALSE(p.label.empty());
        if (i) EXPECT_EQ(u.phones[i - 1].end, p.start);
        for (int64_t n = p.start; n < p.end; ++n) (p.label == kEspeakSilence ? sil_e : sp_e) += double(u.samples[n]) * u.samples[n];
        (p.label == kEspeakSilence ? sil_n : sp_n) += p.end - p.start;
      }
      // the noise floor is -30 +- 7 dB below the speech: silences at least 15 dB quieter
      const double sil_db = 10 * std::log10(sil_e / sil_n + 1), sp_db = 10 * std::log10(sp_e / sp_n + 1);
      EXPECT_LT(sil_db, sp_db - 15.0) << lang << " utt " << k;
      EXPECT_LT(rms_db(u.samples, 0, u.phones.front().end), sp_db - 15.0);
      ASSERT_FALSE(u.words.empty());
      for (const auto& w : u.words) {
        EXPECT_LT(w.start, w.end);
        EXPECT_NE(u.text.find(w.text), std::string::npos) << w.text << " not in " << u.text;
      }
      // same inputs, same samples and labels
      const SynthUtterance again = synth_espeak_utterance(spk, t, 11, k, false, kFliteNoiseDb);
      EXPECT_EQ(again.samples, u.samples);
      EXPECT_EQ(again.phones.size(), u.phones.size());
    }
  }
}

// The whole corpus, twice: one thread and two threads give the same bytes; another seed does not.
TEST(SynthEspeak, CorpusIsByteIdenticalPerSeedForAnyThreadCount) {
  REQUIRE_ESPEAK();
  testutil::TempDir d;
  SynthOptions a = espeak_opts(d.str("a"), "es", "timit");
  a.threads = 1;
  SynthOptions b = espeak_opts(d.str("b"), "es", "timit");
  b.threads = 2;
  SynthOptions c = espeak_opts(d.str("c"), "es", "timit");
  c.seed = 8;
  const SynthSummary sa = synth_corpus(a);
  synth_corpus(b);
  synth_corpus(c);
  EXPECT_EQ(sa.files, 4 * 3);  // SA1 + 2 per speaker
  const auto ta = tree(d.path / "a"), tb = tree(d.path / "b"), tc = tree(d.path / "c");
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);
  int phn = 0;
  for (const auto& [rel, bytes] : ta)
    if (rel.size() > 4 && rel.substr(rel.size() - 4) == ".PHN") {
      ++phn;
      EXPECT_TRUE(ta.count(rel.substr(0, rel.size() - 4) + ".WRD")) << rel;
      EXPECT_TRUE(ta.count(rel.substr(0, rel.size() - 4) + ".TXT")) << rel;
    }
  EXPECT_EQ(phn, 12);
  EXPECT_TRUE(ta.count("phone_set.yaml"));
  for (const auto& e : fs::directory_iterator(d.path)) EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos);
}

TEST(SynthEspeak, EveryLayoutIsWritten) {
  REQUIRE_ESPEAK();
  testutil::TempDir d;
  for (const std::string& layout : timitseg::common::enum_words<CorpusFormat>()) {
    const SynthSummary s = synth_corpus(espeak_opts(d.str(layout), "de", layout));
    EXPECT_EQ(s.files, layout == "timit" ? 12 : 8) << layout;  // SA1 only in TIMIT's layout
  }
  // textgrid: SPEAKER/UTT.wav + UTT.TextGrid with words and phones tiers; splits.txt
  int grids = 0;
  for (const auto& [rel, bytes] : tree(d.path / "textgrid"))
    if (rel.find(".TextGrid") != std::string::npos) {
      ++grids;
      EXPECT_NE(bytes.find("name = \"words\""), std::string::npos);
      EXPECT_NE(bytes.find("name = \"phones\""), std::string::npos);
      EXPECT_TRUE(fs::exists(d.path / "textgrid" / (rel.substr(0, rel.size() - 9) + ".wav"))) << rel;
    }
  EXPECT_EQ(grids, 8);
  EXPECT_TRUE(fs::exists(d.path / "textgrid" / "splits.txt"));
  // buckeye: header up to '#', END COLOR LABEL lines, the first and last marks
  int phones = 0;
  for (const auto& [rel, bytes] : tree(d.path / "buckeye"))
    if (rel.find(".phones") != std::string::npos) {
      ++phones;
      EXPECT_EQ(bytes.rfind("signal ", 0), 0u);
      EXPECT_NE(bytes.find("\n#\n"), std::string::npos);
      EXPECT_NE(bytes.find("{B_TRANS}"), std::string::npos);
      EXPECT_NE(bytes.find(" SIL\n"), std::string::npos);
    }
  EXPECT_EQ(phones, 8);
  // kaldi: the three data dirs hold the 8 utterances once each; CTM lines have 5 fields
  int utts = 0;
  for (const std::string split : {"train", "dev", "test"}) {
    const fs::path dir = d.path / "kaldi" / split;
    std::istringstream scp(timitseg::read_file((dir / "wav.scp").string()));
    for (std::string id, path; scp >> id >> path;) {
      ++utts;
      EXPECT_TRUE(fs::path(path).is_absolute()) << path;
      EXPECT_TRUE(fs::exists(path)) << path;
    }
    std::istringstream ctm(timitseg::read_file((dir / "phones.ctm").string()));
    for (std::string line; std::getline(ctm, line);) {
      std::istringstream f(line);
      std::string u, ch, st, du, ph, extra;
      EXPECT_TRUE(f >> u >> ch >> st >> du >> ph) << line;
      EXPECT_FALSE(f >> extra) << line;
    }
    for (const char* name : {"segments", "utt2spk", "spk2utt", "text"}) EXPECT_TRUE(fs::exists(dir / name)) << name;
  }
  EXPECT_EQ(utts, 8);
  // manifest: one JSON line per utterance, segments tiling the audio
  std::istringstream man(timitseg::read_file(d.str("manifest/manifest.jsonl")));
  int rows = 0;
  for (std::string line; std::getline(man, line); ++rows) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_TRUE(fs::exists(d.path / "manifest" / j.at("audio").get<std::string>()));
    double at = 0;
    for (const auto& s : j.at("segments")) {
      EXPECT_DOUBLE_EQ(s.at(0).get<double>(), at);
      at = s.at(1).get<double>();
    }
  }
  EXPECT_EQ(rows, 8);
}

TEST(SynthEspeak, UnknownLanguageIsOneLineAndWritesNothing) {
  REQUIRE_ESPEAK();
  testutil::TempDir d;
  std::string out;
  EXPECT_NE(testutil::run_capture(std::string(TIMITSEG_BINARY) + " synth --voice espeak --language xx-nope --out " +
                                      d.str("c"), &out), 0);
  EXPECT_NE(out.find("'xx-nope'"), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_FALSE(fs::exists(d.path / "c"));
  // a real language without a shipped word list: asks for --text
  EXPECT_NE(testutil::run_capture(std::string(TIMITSEG_BINARY) + " synth --voice espeak --language pt --out " +
                                      d.str("c"), &out), 0);
  EXPECT_NE(out.find("--text"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(d.path / "c"));
  // ... which it speaks from --text
  testutil::write_text(d.str("pt.txt"), "O gato dorme no sofá.\nHoje chove muito.\n");
  ASSERT_EQ(testutil::run_capture(std::string(TIMITSEG_BINARY) + " synth --voice espeak --language pt --text " +
                                      d.str("pt.txt") + " --speakers 4 --utterances-per-speaker 1 --format manifest --out " +
                                      d.str("c") + " --log-level warn", &out), 0) << out;
  EXPECT_NE(timitseg::read_file(d.str("c/manifest.jsonl")).find("gato"), std::string::npos);
}

// A build without libespeak-ng (cmake -DTIMITSEG_ESPEAK=OFF): --voice espeak and the G2P
// are one line naming what to install; nothing is written. Skipped when it is built in.
TEST(SynthEspeak, VoiceEspeakWithoutLibespeakIsOneErrorLine) {
  if (espeak_built_in()) GTEST_SKIP() << "libespeak-ng is built in: this checks a -DTIMITSEG_ESPEAK=OFF build";
  EXPECT_THROW(espeak_phones("hola", "es"), std::runtime_error);
  testutil::TempDir d;
  std::string out;
  EXPECT_EQ(testutil::run_capture(std::string(TIMITSEG_BINARY) + " synth --voice espeak --language es --out " +
                                      d.str("c"), &out), 1);
  EXPECT_NE(out.find("libespeak-ng is not built in"), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_FALSE(fs::exists(d.path / "c"));
}
