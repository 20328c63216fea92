// Dictionaries and transcripts for forced alignment (data/transcripts.h):
// both dictionary formats, the ARPAbet map, word and phone transcripts, and
// every error naming the file and line.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "data/phones.h"
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

TEST(Transcripts, TimitDictionaryFormat) {
  const std::string text =
      "; TIMITDIC.TXT-style header\n"
      ";\n"
      "a  /ax/\n"
      "a~n  /ey1/\n"
      "abbreviate  /ax b r iy1 v iy ey2 t/\r\n"
      "\n"
      "Water  /w ao1 t axr/\n";
  const Dictionary d = Dictionary::parse("TIMITDIC.TXT", text, DictFormat::timit);
  EXPECT_EQ(d.size(), 3u);
  ASSERT_NE(d.lookup("a"), nullptr);
  EXPECT_EQ(*d.lookup("a"), V({"ax"}));  // the first entry of a word with variants
  EXPECT_EQ(d.entries().at("a").size(), 2u);
  EXPECT_EQ(d.entries().at("a")[1], V({"ey"}));
  EXPECT_EQ(*d.lookup("ABBREVIATE"), V({"ax", "b", "r", "iy", "v", "iy", "ey", "t"}));
  EXPECT_EQ(*d.lookup("water"), V({"w", "ao", "t", "axr"}));
  EXPECT_EQ(d.lookup("year"), nullptr);
  EXPECT_EQ(dict_format_from_text(DictFormatSetting::automatic, text), DictFormat::timit);
}

TEST(Transcripts, CmudictFormatAndArpabetMap) {
  const std::string text =
      ";;; # CMUdict-style\n"
      "A  AH0\n"
      "A(2)  EY1\n"
      "GREASY  G R IY1 S IY0  # comment\n"
      "WATER  W AO1 T ER0\n"
      "BIRD  B ER1 D\n"
      "HUT  HH AH1 T\n";
  const Dictionary d = Dictionary::parse("cmudict.dict", text, DictFormat::cmudict);
  EXPECT_EQ(*d.lookup("a"), V({"ax"}));
  EXPECT_EQ(d.entries().at("a")[1], V({"ey"}));
  EXPECT_EQ(*d.lookup("greasy"), V({"g", "r", "iy", "s", "iy"}));
  EXPECT_EQ(*d.lookup("water"), V({"w", "ao", "t", "axr"}));
  EXPECT_EQ(*d.lookup("bird"), V({"b", "er", "d"}));
  EXPECT_EQ(*d.lookup("hut"), V({"hh", "ah", "t"}));
  EXPECT_EQ(dict_format_from_text(DictFormatSetting::automatic, text), DictFormat::cmudict);
  // The map: every ARPAbet symbol lands on a TIMIT 61-set phone.
  const V arpabet = {"AA", "AE", "AH", "AO", "AW", "AY", "B",  "CH", "D",  "DH", "EH", "ER", "EY",
                     "F",  "G",  "HH", "IH", "IY", "JH", "K",  "L",  "M",  "N",  "NG", "OW", "OY",
                     "P",  "R",  "S",  "SH", "T",  "TH", "UH", "UW", "V",  "W",  "Y",  "Z",  "ZH"};
  for (const std::string& a : arpabet) {
    const std::string t = arpabet_to_timit(a);
    EXPECT_GE(PhoneSet::timit().index61(t), 0) << a << " -> " << t;
  }
  EXPECT_EQ(arpabet_to_timit("AH0"), "ax");
  EXPECT_EQ(arpabet_to_timit("AH2"), "ah");
  EXPECT_EQ(arpabet_to_timit("ER0"), "axr");
  EXPECT_EQ(arpabet_to_timit("ER1"), "er");
  EXPECT_EQ(arpabet_to_timit("HH"), "hh");
  EXPECT_EQ(arpabet_to_timit("IY1"), "iy");
  EXPECT_EQ(arpabet_to_timit("B1"), "");  // stress on a consonant
  EXPECT_EQ(arpabet_to_timit("Q"), "");
  EXPECT_EQ(arpabet_to_timit("AX"), "");  // not ARPAbet as CMUdict writes it
}

TEST(Transcripts, DictionaryErrorsNameFileAndLine) {
  EXPECT_EQ(error_of([] { Dictionary::parse("D.TXT", "a  /ax/\nbad line\n", DictFormat::timit); }),
            "D.TXT:2: expected 'word  /p h o n e s/' (TIMIT dictionary format), got 'bad line'");
  EXPECT_EQ(error_of([] { Dictionary::parse("D.TXT", "a  /ax/\nb  /b xx1/\n", DictFormat::timit); }),
            "D.TXT:2: phone 'xx1' is not a TIMIT phone");
  EXPECT_EQ(error_of([] { Dictionary::parse("D.TXT", "a  //\n", DictFormat::timit); }),
            "D.TXT:1: word 'a' has no phones");
  EXPECT_EQ(error_of([] { Dictionary::parse("c.dict", "A  AH0\nB  B IY1 QQ\n", DictFormat::cmudict); }),
            "c.dict:2: phone 'QQ' is not ARPAbet (CMUdict format)");
  EXPECT_EQ(error_of([] { Dictionary::parse("c.dict", "A(x)  AH0\n", DictFormat::cmudict); }),
            "c.dict:1: expected 'WORD(N)' for a variant, got 'A(x)'");
  EXPECT_EQ(error_of([] { Dictionary::parse("c.dict", "WORD\n", DictFormat::cmudict); }),
            "c.dict:1: word 'WORD' has no phones");
  EXPECT_EQ(error_of([] { Dictionary::parse("c.dict", ";;; only comments\n", DictFormat::cmudict); }),
            "c.dict: no dictionary entries");
}

TEST(Transcripts, WordsToPhonesWithClosuresAndSilences) {
  const Dictionary d =
      Dictionary::parse("D", "she  /sh iy1/\nhad  /hh ae1 d/\nchecked  /ch eh1 k t/\n", DictFormat::timit);
  const std::vector<Word> words{{"she", 1}, {"had", 1}, {"checked", 2}};
  Transcript t = words_to_phones(words, d, "u.TXT", WordOptions{});
  EXPECT_EQ(t.phones, V({"h#", "sh", "iy", "hh", "ae", "dcl", "d", "tcl", "ch", "eh", "kcl", "k", "tcl", "t", "h#"}));
  EXPECT_EQ(t.word_of_phone, std::vector<int>({-1, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, -1}));
  EXPECT_EQ(t.optional, std::vector<int>({1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}));  // edge h# may be skipped
  EXPECT_EQ(t.words, V({"she", "had", "checked"}));
  t = words_to_phones(words, d, "u.TXT", WordOptions{false, false, true, true});
  EXPECT_EQ(t.phones, V({"sh", "iy", "pau", "hh", "ae", "d", "pau", "ch", "eh", "k", "t"}));
  EXPECT_EQ(t.word_of_phone, std::vector<int>({0, 0, -1, 1, 1, 1, -1, 2, 2, 2, 2}));
  EXPECT_EQ(t.optional, std::vector<int>({0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0}));
  t = words_to_phones(words, d, "u.TXT", WordOptions{false, true, true, false});  // obligatory silences
  EXPECT_EQ(t.phones.front(), "h#");
  EXPECT_EQ(t.optional, std::vector<int>(t.phones.size(), 0));
  EXPECT_EQ(error_of([&] { words_to_phones({{"she", 1}, {"zebra", 3}}, d, "u.TXT", WordOptions{}); }),
            "u.TXT:3: word 'zebra' is not in the dictionary D");
  EXPECT_EQ(error_of([&] { words_to_phones({}, d, "u.TXT", WordOptions{}); }), "u.TXT: empty transcript (no words)");
  EXPECT_EQ(with_closure("jh"), V({"dcl", "jh"}));
  EXPECT_EQ(with_closure("s"), V({"s"}));
}

TEST(Transcripts, WrdTxtPhnAndLists) {
  std::vector<Word> w = parse_wrd("S.WRD", "2360 5200 she\n5200 9680 HAD\n");
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[1].text, "HAD");  // as written: the outputs name it so, lookups ignore case
  EXPECT_EQ(w[1].line, 2);
  // a .WRD word loses its punctuation as a .TXT word does; a mark alone is no word (the fuzz target's oracle)
  w = parse_wrd("P.WRD", "2360 5200 .she\n5200 6000 ,\n6000 9680 had\n");
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].text, "she");
  EXPECT_EQ(w[1].text, "had");
  EXPECT_EQ(w[1].line, 3);
  w = parse_txt("S.TXT", "0 46797 She had your \"dark\" suit, in greasy wash-water all year.\n");
  std::vector<std::string> texts;
  for (const Word& x : w) texts.push_back(x.text);
  EXPECT_EQ(texts, V({"She", "had", "your", "dark", "suit", "in", "greasy", "wash-water", "all", "year"}));
  // punctuation around words in many scripts; apostrophes inside kept; punctuation alone is no word
  w = parse_txt("F.TXT", "« Il habite à Paris », dit-il ; l'homme — ¿Dónde? 我是王。 (12) ...\n");
  texts.clear();
  for (const Word& x : w) texts.push_back(x.text);
  EXPECT_EQ(texts, V({"Il", "habite", "à", "Paris", "dit-il", "l'homme", "Dónde", "我是王", "12"}));
  const Dictionary d = Dictionary::parse("D", "paris\t p a ʁ i\nété\te t e\n", DictFormat::mfa);
  EXPECT_NE(d.lookup("PARIS"), nullptr);
  EXPECT_NE(d.lookup("Été"), nullptr);  // a Latin-1 capital lowered too
  EXPECT_EQ(d.lookup("ÉTÉS"), nullptr);
  EXPECT_EQ(parse_phn_phones("S.PHN", "0 10 h#\n10 20 q\n20 30 ae\n"), V({"h#", "ae"}));
  const std::vector<ListEntry> l = parse_list("L", "# comment\n\na.wav h# b aa h#\nsub/b.wav sil\n");
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(l[0].audio, "a.wav");
  EXPECT_EQ(l[0].tokens, V({"h#", "b", "aa", "h#"}));
  EXPECT_EQ(l[0].line, 3);
  EXPECT_EQ(l[1].line, 4);
  EXPECT_EQ(error_of([] { parse_wrd("S.WRD", "1 2 she\n3 x had\n"); }),
            "S.WRD:2: expected 'start end word', got '3 x had'");
  EXPECT_EQ(error_of([] { parse_wrd("S.WRD", "\n"); }), "S.WRD: empty transcript (no words)");
  EXPECT_EQ(error_of([] { parse_txt("S.TXT", "0 100 ...\n"); }), "S.TXT: empty transcript (no words)");
  EXPECT_EQ(error_of([] { parse_phn_phones("S.PHN", "0 10 h#\n10 20 zz\n"); }),
            "S.PHN:2: phone 'zz' is not a TIMIT phone");
  EXPECT_EQ(error_of([] { parse_phn_phones("S.PHN", "0 10 q\n"); }), "S.PHN: empty transcript (no phones other than q)");
  {  // a line without tokens is an entry of its own: align reports that input only (issue 41)
    const std::vector<ListEntry> l = parse_list("L", "a.wav h#\nb.wav\n");
    ASSERT_EQ(l.size(), 2u);
    EXPECT_EQ(l[1].audio, "b.wav");
    EXPECT_TRUE(l[1].tokens.empty());
    EXPECT_EQ(l[1].line, 2);
  }
  EXPECT_EQ(error_of([] { parse_list("L", "a.wav h#\na.wav sil\n"); }), "L:2: 'a.wav' is listed twice (also line 1)");
  EXPECT_EQ(error_of([] { parse_list("L", "# nothing\n"); }), "L: no utterances listed");
}

}  // namespace
}  // namespace timitseg::data
