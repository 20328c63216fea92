// libFuzzer target: the pronunciation dictionary reader (data::Dictionary::parse,
// TIMIT's TIMITDIC.TXT format, CMUdict's and MFA's) and data::words_to_phones with
// what it accepts. Input: the first byte picks the format (timit, cmudict,
// auto-detected, mfa), the rest is the dictionary's text.
// Invariants: a rejected input throws data::TranscriptError naming the file
// on one line (a line inside the file when it names one); an accepted
// dictionary has entries, every word is lower case and non-empty, every
// pronunciation non-empty and made of TIMIT 61-set phones other than q (MFA:
// phones as written, non-empty, without white space; probabilities in (0, 1]);
// every word looks itself up; words_to_phones of its words gives h#, each
// word's most probable pronunciation (with closures, but for MFA), h#, and maps
// every phone back to its word.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string>
#include <vector>

#include "data/phones.h"
#include "data/transcripts.h"
#include "tests/fuzz/fuzz_util.h"

using namespace timitseg;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string path = "FUZZ/dict.txt";
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const data::DictFormatSetting formats[] = {data::DictFormatSetting::timit, data::DictFormatSetting::cmudict,
                                             data::DictFormatSetting::automatic, data::DictFormatSetting::mfa};
  const data::DictFormatSetting format = formats[data[0] % 4];
  data::Dictionary dict;
  try {
    dict = data::Dictionary::parse(path, text, data::dict_format_from_text(format, text));
  } catch (const data::TranscriptError& e) {
    fuzz::expect_error_names(e, path);
    const std::string what = e.what();
    const int lines = static_cast<int>(std::count(text.begin(), text.end(), '\n')) + 1;
    if (what.rfind(path + ":", 0) == 0 && std::isdigit(static_cast<unsigned char>(what[path.size() + 1]))) {
      const int line = std::stoi(what.substr(path.size() + 1));
      fuzz::check(line >= 1 && line <= lines, "error names a line outside the file: " + what);
    }
    return 0;
  }
  fuzz::check(dict.size() > 0, "accepted a dictionary without entries");
  const data::PhoneSet& ps = data::PhoneSet::timit();
  const bool mfa = dict.format() == data::DictFormat::mfa;
  std::vector<data::Word> words;
  for (const auto& [word, prons] : dict.entries()) {
    fuzz::check(!word.empty(), "accepted an empty word");
    for (char c : word) fuzz::check(!std::isupper(static_cast<unsigned char>(c)), "word not lower case: " + word);
    fuzz::check(!prons.empty(), "word without pronunciations: " + word);
    for (const auto& pron : prons) {
      fuzz::check(!pron.empty(), "empty pronunciation of " + word);
      for (const std::string& p : pron) {
        if (mfa)
          fuzz::check(!p.empty() && p.find_first_of(" \t\r\n") == std::string::npos, "MFA phone '" + p + "'");
        else
          fuzz::check(ps.index61(p) >= 0 && p != "q", "accepted phone '" + p + "' is not a 61-set phone other than q");
      }
    }
    for (const data::PronunciationInfo& in : dict.info(word))
      fuzz::check(in.prob > 0.0 && in.prob <= 1.0, "probability out of (0, 1] for " + word);
    fuzz::check(dict.lookup(word) == &prons.front(), "lookup of '" + word + "' does not give its first entry");
    if (words.size() < 20) words.push_back(data::Word{word, 0});
  }
  const data::Transcript tr = data::words_to_phones(words, dict, "FUZZ/words", data::WordOptions{});
  fuzz::check(tr.phones.size() == tr.word_of_phone.size() && tr.phones.size() == tr.optional.size(),
              "phones, word_of_phone and optional differ in size");
  fuzz::check(tr.optional.front() == 1 && tr.optional.back() == 1, "edge silences are not optional");
  fuzz::check(tr.phones.front() == "h#" && tr.phones.back() == "h#", "no edge silence");
  fuzz::check(tr.words.size() == words.size(), "words lost");
  size_t n = 1;
  for (size_t w = 0; w < words.size(); ++w) {
    const std::vector<data::PronunciationInfo>& info = dict.info(words[w].text);
    size_t best = 0;
    for (size_t k = 1; k < info.size(); ++k)
      if (info[k].prob > info[best].prob) best = k;
    for (const std::string& p : (*dict.pronunciations(words[w].text))[best])
      for (const std::string& q : mfa ? std::vector<std::string>{p} : data::with_closure(p)) {
        fuzz::check(n < tr.phones.size() && tr.phones[n] == q && tr.word_of_phone[n] == static_cast<int>(w),
                    "words_to_phones differs from the dictionary at phone " + std::to_string(n));
        ++n;
      }
  }
  fuzz::check(n + 1 == tr.phones.size(), "words_to_phones has extra phones");
  return 0;
}
