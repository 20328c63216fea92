// `align --g2p espeak` in every language `synth` ships word lists for: ordinary
// sentences (clitics, numbers, capitals, punctuation) read as align reads a word
// list, pronounced word by word by the G2P, must land in the phone set that
// `synth --voice espeak` writes for the language (synth's own path:
// synth_espeak_utterance, its phone-set YAML), silences included; and one real
// alignment from words in French, on a checkpoint trained for one epoch on a
// tiny `synth --voice espeak --language fr` corpus.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "data/espeak_tts.h"
#include "data/phone_set.h"
#include "data/synth.h"
#include "data/synth_espeak.h"
#include "data/synth_layouts.h"
#include "data/transcripts.h"
#include "eval/align.h"
#include "eval/align_dictionary.h"
#include "model/labels.h"
#include "tests/support/cli.h"

namespace fs = std::filesystem;
using namespace timitseg;

namespace {

// Ordinary sentences of each shipped language; the G2P language is espeak-ng's code.
const std::map<std::string, std::vector<std::string>>& sentences() {
  static const std::map<std::string, std::vector<std::string>> s = {
      {"fr",
       {"Il habite à Paris, et je le vois : ce n'est pas l'homme qu'il cherche !",
        "Aujourd'hui, Marie a acheté 12 pommes au marché.", "« Ne le dis pas », répond-il."}},
      {"es",
       {"¿Dónde está el niño? Vive en Madrid desde 2010.", "Me lo dijo ayer, pero no lo creo.",
        "La señora García compró 25 naranjas."}},
      {"de",
       {"Das Haus ist groß, und wir wohnen seit 1998 in Berlin.", "Ich hab's ihm gestern gesagt!",
        "Frau Müller kauft 4 Äpfel."}},
      {"en",
       {"It's twelve o'clock, and John isn't here yet.", "We bought 3 apples in New York.",
        "I'd like the book, please!"}},
      {"cmn", {"我是王，我爱唱。", "十五时，我找水！"}},
      {"it",
       {"Oggi piove molto a Roma, e l'acqua è fredda.", "Perché non me lo dici? Vivo qui dal 2015.",
        "La signora Bianchi compra 7 mele."}},
      {"nl",
       {"Het huis is groot, en we wonen sinds 1998 in Utrecht.", "Ik heb 't hem gisteren gezegd!",
        "Mevrouw de Vries koopt 4 appels."}},
  };
  return s;
}

std::string espeak_code(const std::string& lang) { return lang == "en" ? "en-us" : lang; }

std::vector<std::string> tokens_of(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string t; in >> t;) out.push_back(t);
  return out;
}

}  // namespace

// The G2P's labels are synth's: espeak's reduced-vowel mark is not part of a label
// (French je, le, ce, ne end in the schwa of "petit", not "ə-").
TEST(AlignG2pLanguages, EspeakLabelsAreNormalizedOnce) {
  EXPECT_EQ(data::espeak_label("ə-"), "ə");
  EXPECT_EQ(data::espeak_label("a-"), "a");
  EXPECT_EQ(data::espeak_label("ɔ̃"), "ɔ̃");
  EXPECT_EQ(data::espeak_label("-"), "-");
  if (!data::espeak_built_in()) GTEST_SKIP() << data::espeak_missing_message();
  for (const std::string w : {"je", "le", "ce", "ne"}) {
    const std::vector<std::string> p = data::espeak_phones(w, "fr");
    ASSERT_EQ(p.size(), 2u) << w;
    EXPECT_EQ(p[1], "ə") << w;
  }
  const std::vector<std::string> petit = data::espeak_phones("petit", "fr");
  EXPECT_NE(std::find(petit.begin(), petit.end(), "ə"), petit.end());
}

// Every word of ordinary sentences, pronounced by the G2P as align does (the words of a
// list line, punctuation stripped, case kept), maps into the phone set synth writes for
// the language (those sentences and its word list): the edge silences are that set's
// `sil`, no closure is added.
TEST(AlignG2pLanguages, G2pPhonesAreInSynthsPhoneSetInEveryShippedLanguage) {
  if (!data::espeak_built_in()) GTEST_SKIP() << data::espeak_missing_message();
  ASSERT_EQ(data::espeak_text_languages(), (std::vector<std::string>{"cmn", "de", "en", "es", "fr", "it", "nl"}));
  const std::vector<data::SynthSpeaker> spks = data::synth_speakers(4, 5);
  for (const std::string& lang : data::espeak_text_languages()) {
    ASSERT_TRUE(sentences().count(lang)) << lang;
    // synth's labels of the language: the sentences, each spoken as `synth --text` speaks a
    // line, and the shipped word list spoken as one line (allophones of context: Spanish
    // 'ɡ' after a pause, 'ɣ' between vowels)
    std::set<std::string> labels;
    std::string all_words;
    for (const std::string& w : *data::espeak_vocabulary(lang)) all_words += w + " ";
    std::vector<std::string> lines = sentences().at(lang);
    lines.push_back(all_words);
    for (const std::string& sentence : lines) {
      data::EspeakTexts t;
      t.language = espeak_code(lang);
      t.lines = {sentence};
      const data::SynthUtterance u = data::synth_espeak_utterance(spks[0], t, 5, 0, false, data::kFliteNoiseDb);
      for (const auto& p : u.phones) labels.insert(p.label);
    }
    const data::PhoneSetSpec spec =
        data::PhoneSetSpec::parse(data::espeak_phone_set_yaml(espeak_code(lang), labels), "synth " + lang);
    const model::LabelSet ls = model::LabelSet::make(spec);
    eval::AlignOptions o;
    o.g2p = timitseg::data::G2pEngine::espeak;
    o.dict = "one.dict";
    o.language = espeak_code(lang);
    const data::WordOptions wo = eval::words_for_labels(eval::with_g2p(o).words, ls);
    const data::Dictionary none = data::Dictionary::parse("one.dict", "zzz\tsil\n", data::DictFormat::mfa);
    for (const std::string& sentence : sentences().at(lang)) {
      const std::vector<data::Word> words = data::words_of_tokens(tokens_of(sentence), 1);
      ASSERT_FALSE(words.empty());
      for (const data::Word& w : words) EXPECT_EQ(data::strip_punctuation(w.text), w.text);
      const data::Transcript tr = data::words_to_phones(words, none, "s", wo);
      EXPECT_EQ(tr.phones.front(), "sil") << lang;
      EXPECT_EQ(tr.phones.back(), "sil") << lang;
      for (const std::string& p : tr.phones)
        EXPECT_TRUE(labels.count(p)) << lang << ": G2P phone '" << p << "' of \"" << sentence
                                     << "\" is not a label synth writes for the language";
      EXPECT_NO_THROW(eval::to_classes(tr, ls)) << lang << ": " << sentence;
      EXPECT_EQ(tr.words.size(), words.size());
    }
  }
}

// The whole command: a French corpus of one ordinary sentence, a one-epoch checkpoint on
// its own phone set, and `align --words --dict ONE-WORD --g2p espeak --language fr`
// aligning every file, the words tier writing the words as given.
TEST(AlignG2pLanguages, BinaryAlignsFrenchFromWords) {
  if (!data::espeak_built_in()) GTEST_SKIP() << data::espeak_missing_message();
  const fs::path dir = testsupport::fresh_temp_dir("timitseg_align_g2p_fr");
  const std::string sentence = sentences().at("fr")[0];
  std::ofstream(dir / "text.txt") << sentence << "\n";
  const fs::path corpus = dir / "corpus", work = dir / "work";
  using testsupport::run;
  testsupport::Cmd c = run("synth --voice espeak --language fr --text " + (dir / "text.txt").string() +
                           " --format textgrid --out " + corpus.string() +
                           " --speakers 4 --utterances-per-speaker 2 --seed 3");
  ASSERT_EQ(c.rc, 0) << c.output;
  c = run("prepare --corpus " + corpus.string() + " --format textgrid --phone-set " +
          (corpus / "phone_set.yaml").string() + " --split-file " + (corpus / "splits.txt").string() + " --out " +
          work.string() + " --no-progress");
  ASSERT_EQ(c.rc, 0) << c.output;
  std::ofstream(dir / "tiny.yaml") << "data:\n  workdir: " << work.string()
                                   << "\nmodel:\n  hidden_dim: 8\n  num_layers: 1\n"
                                      "crf:\n  max_duration: 8\n  backend: cpu\n"
                                      "train:\n  epochs: 1\n  batch_size: 4\n  lr: 0.01\n  seed: 3\n  threads: 2\n"
                                      "  run_dir: "
                                   << (dir / "run").string() << "\n";
  c = run("train --config " + (dir / "tiny.yaml").string() + " --device cpu");
  ASSERT_EQ(c.rc, 0) << c.output;
  std::vector<fs::path> wavs;
  for (const auto& e : fs::recursive_directory_iterator(corpus))
    if (e.path().extension() == ".wav") wavs.push_back(e.path());
  ASSERT_GE(wavs.size(), 4u);
  std::ofstream list(dir / "words.txt");
  for (const fs::path& w : wavs) list << w.string() << " " << sentence << "\n";
  list.close();
  std::ofstream(dir / "one.dict") << "zzz\tl\n";  // one word: every word of the list pronounced by espeak-ng
  c = run("align --checkpoint " + (dir / "run" / "checkpoints" / "best.safetensors").string() + " --words " +
          (dir / "words.txt").string() + " --dict " + (dir / "one.dict").string() +
          " --g2p espeak --language fr --out " + (dir / "aligned").string() + " --device cpu");
  ASSERT_EQ(c.rc, 0) << c.output;
  for (const fs::path& w : wavs) {
    const std::string tg = testsupport::slurp(dir / "aligned" / (w.stem().string() + ".TextGrid"));
    for (const std::string word : {"Il", "Paris", "n'est", "l'homme", "qu'il"})
      EXPECT_NE(tg.find("text = \"" + word + "\""), std::string::npos) << word << " in " << w;
    EXPECT_EQ(tg.find("text = \"Paris,\""), std::string::npos);  // punctuation is no part of a word
  }
  // The transcript beside each file, as prepare reads the layout: the TextGrid's words
  // (with --dict) or its phones (without), aligned as the list was.
  c = run("align --checkpoint " + (dir / "run" / "checkpoints" / "best.safetensors").string() + " " + corpus.string() +
          " --dict " + (dir / "one.dict").string() + " --g2p espeak --language fr --out " + (dir / "beside").string() +
          " --device cpu");
  ASSERT_EQ(c.rc, 0) << c.output;
  c = run("align --checkpoint " + (dir / "run" / "checkpoints" / "best.safetensors").string() + " " + corpus.string() +
          " --out " + (dir / "beside-phones").string() + " --device cpu");
  ASSERT_EQ(c.rc, 0) << c.output;
  size_t words_tiers = 0, phone_outputs = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir / "beside"))
    if (e.path().extension() == ".TextGrid") {
      const std::string tg = testsupport::slurp(e.path());
      words_tiers += tg.find("text = \"Paris\"") != std::string::npos && tg.find("text = \"Il\"") != std::string::npos;
    }
  for (const auto& e : fs::recursive_directory_iterator(dir / "beside-phones")) phone_outputs += e.path().extension() == ".PHN";
  EXPECT_EQ(words_tiers, wavs.size());
  EXPECT_EQ(phone_outputs, wavs.size());
  // Buckeye's .words and a .lab of the sentence (MFA's transcript) beside a copy of one file
  const fs::path other = dir / "other";
  fs::create_directories(other);
  fs::copy_file(wavs[0], other / "b.wav");
  fs::copy_file(wavs[0], other / "m.wav");
  std::ofstream words_file(other / "b.words");
  words_file << "header\n#\n";
  double t = 0.1;
  words_file << t << " 121 <SIL>; <SIL>; <SIL>; null\n";
  for (const data::Word& w : data::words_of_tokens(tokens_of(sentence), 0)) words_file << (t += 0.2) << " 121 " << w.text << "; x; x; n\n";
  words_file.close();
  std::ofstream(other / "m.lab") << sentence << "\n";
  c = run("align --checkpoint " + (dir / "run" / "checkpoints" / "best.safetensors").string() + " " + other.string() +
          " --dict " + (dir / "one.dict").string() + " --g2p espeak --language fr --out " + (dir / "other-out").string() +
          " --device cpu");
  ASSERT_EQ(c.rc, 0) << c.output;
  for (const std::string stem : {"b", "m"}) {
    const std::string tg = testsupport::slurp(dir / "other-out" / (stem + ".TextGrid"));
    EXPECT_NE(tg.find("text = \"l'homme\""), std::string::npos) << stem;
    EXPECT_EQ(tg.find("SIL"), std::string::npos) << stem;  // Buckeye's non-words are no words
  }
  fs::remove_all(dir);
}
