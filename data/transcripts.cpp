// Dictionaries and transcripts for forced alignment (see transcripts.h).
#include "data/transcripts.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <sstream>

#include "common/files.h"
#include "common/text.h"
#include "data/phones.h"

namespace timitseg::data {

namespace {

[[noreturn]] void fail(const std::string& path, int line, const std::string& msg) {
  throw TranscriptError(path + (line > 0 ? ":" + std::to_string(line) : std::string()) + ": " + msg);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Lines of TEXT without their line end (LF or CR LF).
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    out.push_back(line);
  }
  return out;
}

std::vector<std::string> tokens_of(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  std::string tok;
  while (in >> tok) out.push_back(tok);
  return out;
}

bool is_integer(const std::string& s) {
  if (s.empty() || s.size() > 18) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

bool is_61(const std::string& p) { return PhoneSet::timit().index61(p) >= 0; }

std::string quoted(const std::string& s) { return "'" + one_line(s.size() > 80 ? s.substr(0, 80) + "..." : s) + "'"; }

}  // namespace

DictFormat dict_format_from_text(const std::string& name, const std::string& text) {
  if (name == "timit") return DictFormat::timit;
  if (name == "cmudict") return DictFormat::cmudict;
  if (name != "auto") throw std::invalid_argument("--dict-format must be timit, cmudict or auto, got '" + name + "'");
  for (const std::string& line : lines_of(text)) {
    const std::vector<std::string> t = tokens_of(line);
    if (t.empty() || t[0][0] == ';' || t[0][0] == '#') continue;
    return line.find('/') != std::string::npos ? DictFormat::timit : DictFormat::cmudict;
  }
  return DictFormat::timit;
}

std::string arpabet_to_timit(const std::string& symbol) {
  static const std::set<std::string> kArpabet = {
      "aa", "ae", "ah", "ao", "aw", "ay", "b",  "ch", "d",  "dh", "eh", "er", "ey", "f",  "g",  "hh", "ih", "iy", "jh",
      "k",  "l",  "m",  "n",  "ng", "ow", "oy", "p",  "r",  "s",  "sh", "t",  "th", "uh", "uw", "v",  "w",  "y",  "z",
      "zh"};
  std::string s = lower(symbol);
  char stress = 0;
  if (!s.empty() && (s.back() == '0' || s.back() == '1' || s.back() == '2')) stress = s.back(), s.pop_back();
  if (!kArpabet.count(s)) return "";
  // Stress digits go on vowels only.
  static const std::set<std::string> kVowels = {"aa", "ae", "ah", "ao", "aw", "ay", "eh", "er",
                                                "ey", "ih", "iy", "ow", "oy", "uh", "uw"};
  if (stress && !kVowels.count(s)) return "";
  if (s == "ah" && stress == '0') return "ax";
  if (s == "er" && stress == '0') return "axr";
  return s;
}

Dictionary Dictionary::parse(const std::string& path, const std::string& text, DictFormat format) {
  Dictionary d;
  d.path_ = path;
  const std::vector<std::string> lines = lines_of(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    const int ln = static_cast<int>(i + 1);
    std::string line = lines[i];
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    if (line[first] == ';') continue;  // TIMIT ';' and CMUdict ';;;' comments
    if (format == DictFormat::cmudict) {
      const size_t hash = line.find('#');
      if (hash != std::string::npos) line = line.substr(0, hash);
    }
    std::vector<std::string> tok = tokens_of(line);
    if (tok.empty()) continue;
    std::string word = tok[0];
    std::vector<std::string> pron;
    if (format == DictFormat::timit) {
      const size_t a = line.find('/'), b = line.rfind('/');
      if (a == std::string::npos || b == a || tokens_of(line.substr(0, a)).size() != 1 ||
          !tokens_of(line.substr(b + 1)).empty())
        fail(path, ln, "expected 'word  /p h o n e s/' (TIMIT dictionary format), got " + quoted(lines[i]));
      word = tokens_of(line.substr(0, a))[0];
      const size_t tilde = word.find('~');
      if (tilde == 0) fail(path, ln, "empty word before '~' in " + quoted(lines[i]));
      if (tilde != std::string::npos) word = word.substr(0, tilde);
      for (std::string p : tokens_of(line.substr(a + 1, b - a - 1))) {
        const std::string written = p;
        while (!p.empty() && (p.back() == '1' || p.back() == '2')) p.pop_back();
        if (!is_61(p) || p == "q") fail(path, ln, "phone " + quoted(written) + " is not a TIMIT phone");
        pron.push_back(p);
      }
    } else {
      const size_t paren = word.find('(');
      if (paren == 0) fail(path, ln, "empty word in " + quoted(lines[i]));
      if (paren != std::string::npos) {
        const std::string rest = word.substr(paren);
        if (rest.size() < 3 || rest.back() != ')' || !is_integer(rest.substr(1, rest.size() - 2)))
          fail(path, ln, "expected 'WORD(N)' for a variant, got " + quoted(word));
        word = word.substr(0, paren);
      }
      for (size_t k = 1; k < tok.size(); ++k) {
        const std::string p = arpabet_to_timit(tok[k]);
        if (p.empty()) fail(path, ln, "phone " + quoted(tok[k]) + " is not ARPAbet (CMUdict format)");
        pron.push_back(p);
      }
    }
    if (pron.empty()) fail(path, ln, "word " + quoted(word) + " has no phones");
    d.entries_[lower(word)].push_back(std::move(pron));
  }
  if (d.entries_.empty()) fail(path, 0, "no dictionary entries");
  return d;
}

Dictionary Dictionary::load(const std::string& path, const std::string& format_name) {
  const std::string text = read_file(path);
  return parse(path, text, dict_format_from_text(format_name, text));
}

const std::vector<std::string>* Dictionary::lookup(const std::string& word) const {
  auto it = entries_.find(lower(word));
  return it == entries_.end() ? nullptr : &it->second.front();
}

std::vector<Word> parse_wrd(const std::string& path, const std::string& text) {
  std::vector<Word> out;
  const std::vector<std::string> lines = lines_of(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::vector<std::string> t = tokens_of(lines[i]);
    if (t.empty()) continue;
    if (t.size() != 3 || !is_integer(t[0]) || !is_integer(t[1]))
      fail(path, static_cast<int>(i + 1), "expected 'start end word', got " + quoted(lines[i]));
    out.push_back(Word{lower(t[2]), static_cast<int>(i + 1)});
  }
  if (out.empty()) fail(path, 0, "empty transcript (no words)");
  return out;
}

std::vector<Word> parse_txt(const std::string& path, const std::string& text) {
  std::vector<Word> out;
  const std::vector<std::string> lines = lines_of(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    std::vector<std::string> t = tokens_of(lines[i]);
    size_t k = 0;
    if (out.empty() && t.size() >= 2 && is_integer(t[0]) && is_integer(t[1])) k = 2;  // TIMIT's sample range
    for (; k < t.size(); ++k) {
      std::string w = t[k];
      auto punct = [](char c) { return std::string(".,;:!?\"()").find(c) != std::string::npos; };
      while (!w.empty() && punct(w.front())) w.erase(w.begin());
      while (!w.empty() && punct(w.back())) w.pop_back();
      if (!w.empty()) out.push_back(Word{lower(w), static_cast<int>(i + 1)});
    }
  }
  if (out.empty()) fail(path, 0, "empty transcript (no words)");
  return out;
}

std::vector<std::string> parse_phn_phones(const std::string& path, const std::string& text) {
  std::vector<std::string> out;
  const std::vector<std::string> lines = lines_of(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::vector<std::string> t = tokens_of(lines[i]);
    if (t.empty()) continue;
    if (t.size() != 3 || !is_integer(t[0]) || !is_integer(t[1]))
      fail(path, static_cast<int>(i + 1), "expected 'start end phone', got " + quoted(lines[i]));
    if (!is_61(t[2])) fail(path, static_cast<int>(i + 1), "phone " + quoted(t[2]) + " is not a TIMIT phone");
    if (t[2] != "q") out.push_back(t[2]);
  }
  if (out.empty()) fail(path, 0, "empty transcript (no phones other than q)");
  return out;
}

std::vector<ListEntry> parse_list(const std::string& path, const std::string& text) {
  std::vector<ListEntry> out;
  std::map<std::string, int> seen;
  const std::vector<std::string> lines = lines_of(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    const int ln = static_cast<int>(i + 1);
    std::vector<std::string> t = tokens_of(lines[i]);
    if (t.empty() || t[0][0] == '#') continue;
    auto [it, fresh] = seen.emplace(t[0], ln);
    if (!fresh) fail(path, ln, quoted(t[0]) + " is listed twice (also line " + std::to_string(it->second) + ")");
    ListEntry e;
    e.audio = t[0];
    e.tokens.assign(t.begin() + 1, t.end());
    e.line = ln;
    out.push_back(std::move(e));
  }
  if (out.empty()) fail(path, 0, "no utterances listed");
  return out;
}

std::vector<std::string> with_closure(const std::string& p) {
  static const std::map<std::string, std::string> kClosure = {{"b", "bcl"}, {"d", "dcl"}, {"g", "gcl"},
                                                              {"p", "pcl"}, {"t", "tcl"}, {"k", "kcl"},
                                                              {"ch", "tcl"}, {"jh", "dcl"}};
  auto it = kClosure.find(p);
  if (it == kClosure.end()) return {p};
  return {it->second, p};
}

Transcript words_to_phones(const std::vector<Word>& words, const Dictionary& dict, const std::string& source,
                           const WordOptions& o) {
  if (words.empty()) fail(source, 0, "empty transcript (no words)");
  Transcript tr;
  tr.source = source;
  auto add = [&](const std::string& p, int w, bool optional = false) {
    tr.phones.push_back(p);
    tr.word_of_phone.push_back(w);
    tr.optional.push_back(optional ? 1 : 0);
  };
  const bool opt = o.optional_silence;
  if (o.edge_silence) add("h#", -1, opt);
  for (size_t i = 0; i < words.size(); ++i) {
    const Word& w = words[i];
    const std::vector<std::string>* pron = dict.lookup(w.text);
    if (!pron)
      throw TranscriptError(source + (w.line > 0 ? ":" + std::to_string(w.line) : std::string()) + ": word " +
                            quoted(w.text) + " is not in the dictionary " + dict.path());
    if (i > 0 && o.word_silence) add("pau", -1, opt);
    tr.words.push_back(w.text);
    for (const std::string& p : *pron)
      for (const std::string& q : o.closures ? with_closure(p) : std::vector<std::string>{p})
        add(q, static_cast<int>(i));
  }
  if (o.edge_silence) add("h#", -1, opt);
  return tr;
}

}  // namespace timitseg::data
