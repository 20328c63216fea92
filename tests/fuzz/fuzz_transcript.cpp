// libFuzzer target: the transcript readers of forced alignment
// (data/transcripts.h): list files (--phones / --words: "AUDIO tok ..."),
// TIMIT .WRD and .TXT files, and the phones of a .PHN file. Input: the text,
// given to every reader.
// Invariants: a rejected input throws data::TranscriptError naming the file
// on one line (a line inside the file when it names one); accepted output is
// non-empty; list entries have an audio path, at least one token, no white
// space in any of them, distinct audio paths, increasing lines; words are
// as written in the text (case kept), non-empty, without punctuation around
// them; .PHN phones are 61-set names other than q.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "data/phones.h"
#include "data/transcripts.h"
#include "tests/fuzz/fuzz_util.h"

using namespace timitseg;

namespace {

int lines_in(const std::string& text) { return static_cast<int>(std::count(text.begin(), text.end(), '\n')) + 1; }

void check_error(const data::TranscriptError& e, const std::string& path, const std::string& text) {
  fuzz::expect_error_names(e, path);
  const std::string what = e.what();
  if (what.rfind(path + ":", 0) == 0 && std::isdigit(static_cast<unsigned char>(what[path.size() + 1]))) {
    const int line = std::stoi(what.substr(path.size() + 1));
    fuzz::check(line >= 1 && line <= lines_in(text), "error names a line outside the file: " + what);
  }
}

bool has_space(const std::string& s) {
  return std::any_of(s.begin(), s.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)); });
}

void check_words(const std::vector<data::Word>& words, const std::string& text) {
  fuzz::check(!words.empty(), "accepted a transcript without words");
  for (const data::Word& w : words) {
    fuzz::check(!w.text.empty() && !has_space(w.text), "empty word or word with white space");
    fuzz::check(data::strip_punctuation(w.text) == w.text, "punctuation around a word: " + w.text);
    fuzz::check(text.find(w.text) != std::string::npos, "a word not as written in the text: " + w.text);
    fuzz::check(w.line >= 1 && w.line <= lines_in(text), "word line outside the file");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  {
    const std::string path = "FUZZ/list.txt";
    try {
      const std::vector<data::ListEntry> list = data::parse_list(path, text);
      fuzz::check(!list.empty(), "accepted an empty list");
      std::set<std::string> audio;
      int last = 0;
      for (const data::ListEntry& e : list) {
        fuzz::check(!e.audio.empty() && !has_space(e.audio), "bad audio path");
        fuzz::check(audio.insert(e.audio).second, "audio path listed twice: " + e.audio);
        // an entry without tokens is allowed: align reports that input's empty transcript (issue 41)
        for (const std::string& t : e.tokens) fuzz::check(!t.empty() && !has_space(t), "bad token");
        fuzz::check(e.line > last && e.line <= lines_in(text), "entry lines not increasing inside the file");
        last = e.line;
      }
    } catch (const data::TranscriptError& e) {
      check_error(e, path, text);
    }
  }
  {
    const std::string path = "FUZZ/SI1.WRD";
    try {
      check_words(data::parse_wrd(path, text), text);
    } catch (const data::TranscriptError& e) {
      check_error(e, path, text);
    }
  }
  {
    const std::string path = "FUZZ/SI1.TXT";
    try {
      check_words(data::parse_txt(path, text), text);
    } catch (const data::TranscriptError& e) {
      check_error(e, path, text);
    }
  }
  {
    const std::string path = "FUZZ/SI1.PHN";
    try {
      const std::vector<std::string> phones = data::parse_phn_phones(path, text);
      fuzz::check(!phones.empty(), "accepted a .PHN without phones");
      for (const std::string& p : phones)
        fuzz::check(data::PhoneSet::timit().index61(p) >= 0 && p != "q", "accepted phone '" + p + "'");
    } catch (const data::TranscriptError& e) {
      check_error(e, path, text);
    }
  }
  return 0;
}
