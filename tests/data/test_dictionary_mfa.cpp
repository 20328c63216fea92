// Pronunciation dictionaries in MFA's format (data/transcripts.h): optional
// probabilities and silence figures, several pronunciations per word, UTF-8
// words and IPA phones kept byte for byte; the format detected; the candidate
// pronunciations words_to_phones offers; every missing word named with its count.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "data/transcripts.h"

namespace timitseg::data {
namespace {

using V = std::vector<std::string>;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const TranscriptError& e) {
    return e.what();
  }
  return "(no error)";
}

// A hand-written MFA dictionary: no numbers, one probability, probability + three silence figures
// (tab-separated, as MFA writes them), a word on two lines, UTF-8 words and IPA phones.
const char* kMfa =
    "# a comment\n"
    "chat\tʃ a\n"
    "tomate\t0.8\tt o m a t\n"
    "tomate\t0.2\tt ɔ m a t\n"
    "garçon 1.0 0.5 1.2 0.9 ɡ a ʁ s ɔ̃\n"
    "\n"
    "日本  0.6  n i h o ɴ\n"
    "日本  1.0  n i p p o ɴ\r\n";

TEST(DictionaryMfa, ParsesProbabilitiesSilenceFiguresAndUtf8) {
  const Dictionary d = Dictionary::parse("fr.dict", kMfa, DictFormat::mfa);
  EXPECT_EQ(d.format(), DictFormat::mfa);
  EXPECT_EQ(d.size(), 4u);
  ASSERT_NE(d.lookup("chat"), nullptr);
  EXPECT_EQ(*d.lookup("chat"), V({"ʃ", "a"}));
  EXPECT_DOUBLE_EQ(d.info("chat")[0].prob, 1.0);  // no number: probability 1
  EXPECT_EQ(d.info("chat")[0].line, 2);
  ASSERT_NE(d.pronunciations("tomate"), nullptr);
  ASSERT_EQ(d.pronunciations("tomate")->size(), 2u);
  EXPECT_EQ((*d.pronunciations("tomate"))[1], V({"t", "ɔ", "m", "a", "t"}));
  EXPECT_DOUBLE_EQ(d.info("tomate")[0].prob, 0.8);
  EXPECT_DOUBLE_EQ(d.info("tomate")[1].prob, 0.2);
  EXPECT_EQ(d.info("tomate")[1].line, 4);
  // four numbers: the first is the probability, the silence figures are not phones
  EXPECT_EQ(*d.lookup("garçon"), V({"ɡ", "a", "ʁ", "s", "ɔ̃"}));
  EXPECT_DOUBLE_EQ(d.info("garçon")[0].prob, 1.0);
  EXPECT_EQ(*d.lookup("GARçON"), V({"ɡ", "a", "ʁ", "s", "ɔ̃"}));  // ASCII letters matched in any case
  EXPECT_EQ(d.pronunciations("日本")->size(), 2u);
  EXPECT_EQ((*d.pronunciations("日本"))[1], V({"n", "i", "p", "p", "o", "ɴ"}));  // CR LF line end dropped
  EXPECT_EQ(d.pronunciations("chien"), nullptr);
}

TEST(DictionaryMfa, FormatDetected) {
  EXPECT_EQ(dict_format_from_text(DictFormatSetting::automatic, kMfa), DictFormat::mfa);
  EXPECT_EQ(dict_format_from_text(DictFormatSetting::automatic, "HELLO  HH AH0 L OW1\n"), DictFormat::cmudict);
  EXPECT_EQ(dict_format_from_text(DictFormatSetting::automatic, "hello\t1.0\tHH AH0 L OW1\n"), DictFormat::mfa);  // a number: not CMUdict
  EXPECT_EQ(dict_format_from_text(DictFormatSetting::automatic, "hello  /hh ah l ow1/\n"), DictFormat::timit);
  EXPECT_EQ(dict_format_from_text(DictFormatSetting::mfa, "HELLO  HH AH0 L OW1\n"), DictFormat::mfa);
  DictFormatSetting unused{};
  EXPECT_FALSE(timitseg::common::parse_enum("kaldi", &unused));
}

// One line that reads as ARPAbet without a stress digit is not taken for CMUdict
// (whose format maps the phones and adds TIMIT's closures): it is MFA's, phones as
// written; every entry line counts, not the first alone.
TEST(DictionaryMfa, FormatNotGuessedFromOneAmbiguousLine) {
  EXPECT_EQ(dict_format_from_text(DictFormatSetting::automatic, "zzz\tl\n"), DictFormat::mfa);
  EXPECT_EQ(dict_format_from_text(DictFormatSetting::automatic, "bad\tb a d\n"), DictFormat::mfa);        // 'a' is not ARPAbet
  EXPECT_EQ(dict_format_from_text(DictFormatSetting::automatic, "bed\tb eh d\nzzz\tl\n"), DictFormat::mfa);  // no stress digit anywhere
  EXPECT_EQ(dict_format_from_text(DictFormatSetting::automatic, ";;; c\nZZZ  L\nBED  B EH1 D  # a comment\n"), DictFormat::cmudict);
  EXPECT_EQ(dict_format_from_text(DictFormatSetting::automatic, "HELLO  HH AH0 L OW1\nbonjour b ɔ̃ ʒ u ʁ\n"), DictFormat::mfa);  // a later line
  // the MFA reading keeps 'd' as written: no closure is added to it
  const Dictionary d = Dictionary::parse("z.dict", "bed\tb eh d\n", dict_format_from_text(DictFormatSetting::automatic, "bed\tb eh d\n"));
  WordOptions wo;
  wo.edge_silence = false;
  EXPECT_EQ(words_to_phones({{"bed", 1}}, d, "u", wo).phones, V({"b", "eh", "d"}));
}

TEST(DictionaryMfa, ErrorsNameFileAndLine) {
  EXPECT_EQ(error_of([] { Dictionary::parse("x.dict", "a\t0.5 0.5 a\n", DictFormat::mfa); }),
            "x.dict:1: expected after the word 0, 1 or 4 numbers (a pronunciation probability, then three silence "
            "probabilities; MFA dictionary format), got 2");
  EXPECT_EQ(error_of([] { Dictionary::parse("x.dict", "ok a\nb 1.5 b\n", DictFormat::mfa); }),
            "x.dict:2: pronunciation probability '1.5' of 'b' is not in (0, 1]");
  EXPECT_EQ(error_of([] { Dictionary::parse("x.dict", "ok a\nb 0.5\n", DictFormat::mfa); }),
            "x.dict:2: word 'b' has no phones");
  EXPECT_EQ(error_of([] { Dictionary::parse("x.dict", "# only a comment\n", DictFormat::mfa); }),
            "x.dict: no dictionary entries");
}

TEST(DictionaryMfa, WordsToPhonesOffersEveryCombination) {
  const Dictionary d = Dictionary::parse("fr.dict", kMfa, DictFormat::mfa);
  WordOptions o;
  o.edge_silence = false;
  // tomate (0.8, 0.2) x 日本 (0.6, 1.0) x chat (1): 4 candidates; the primary takes each word's most
  // probable pronunciation (tomate's first, 日本's second); no closures for MFA phones (t stays t).
  const Transcript t = words_to_phones({{"tomate", 1}, {"日本", 1}, {"chat", 1}}, d, "u.txt", o);
  EXPECT_EQ(t.phones, V({"t", "o", "m", "a", "t", "n", "i", "p", "p", "o", "ɴ", "ʃ", "a"}));
  EXPECT_NEAR(t.log_prob, std::log(0.8) + std::log(1.0), 1e-12);
  EXPECT_EQ(t.words, V({"tomate", "日本", "chat"}));
  ASSERT_EQ(t.alternatives.size(), 3u);
  std::set<std::pair<std::string, std::string>> seen{{t.phones[1], t.phones[7]}};
  for (const Transcript& a : t.alternatives) {
    seen.emplace(a.phones[1], a.phones[7]);
    const double want = std::log(a.phones[1] == "o" ? 0.8 : 0.2) + std::log(a.phones[7] == "p" ? 1.0 : 0.6);
    EXPECT_NEAR(a.log_prob, want, 1e-12);
    EXPECT_EQ(a.words, t.words);
    EXPECT_EQ(a.word_of_phone.size(), a.phones.size());
  }
  EXPECT_EQ(seen.size(), 4u);  // every combination once
  // a cap of 2: tomate is expanded (2), 日本 would make 4 and keeps its most probable
  o.max_candidates = 2;
  const Transcript c = words_to_phones({{"tomate", 1}, {"日本", 1}}, d, "u.txt", o);
  ASSERT_EQ(c.alternatives.size(), 1u);
  EXPECT_EQ(c.alternatives[0].phones[1], "ɔ");
  EXPECT_EQ(c.alternatives[0].phones[7], "p");
}

TEST(DictionaryMfa, MissingWordsAllNamedWithCounts) {
  const Dictionary d = Dictionary::parse("fr.dict", kMfa, DictFormat::mfa);
  try {
    words_to_phones({{"chat", 1}, {"chien", 2}, {"loup", 2}, {"chien", 3}}, d, "u.txt", WordOptions{});
    FAIL() << "no error";
  } catch (const MissingWordsError& e) {
    EXPECT_EQ(std::string(e.what()),
              "u.txt:2: 2 words are not in the dictionary fr.dict (3 occurrences): 'chien' (2), 'loup' (1)");
    EXPECT_EQ(e.words(), V({"chien", "loup", "chien"}));
  }
  EXPECT_EQ(missing_words_line({"ß", "ß"}, "D"), "word 'ß' is not in the dictionary D (2 times)");
  // with a g2p, missing words are pronounced by it (and only they)
  WordOptions o;
  o.edge_silence = false;
  o.g2p = [](const std::string& w) { return w == "chien" ? V({"ʃ", "j", "ɛ̃"}) : V({"l", "u"}); };
  const Transcript t = words_to_phones({{"chat", 1}, {"chien", 1}}, d, "u.txt", o);
  EXPECT_EQ(t.phones, V({"ʃ", "a", "ʃ", "j", "ɛ̃"}));
  o.g2p = [](const std::string&) { return V{}; };
  EXPECT_EQ(error_of([&] { words_to_phones({{"chien", 4}}, d, "u.txt", o); }),
            "u.txt:4: the g2p gave no phones for word 'chien'");
}

}  // namespace
}  // namespace timitseg::data
