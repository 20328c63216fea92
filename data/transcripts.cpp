// Dictionaries and transcripts for forced alignment (see transcripts.h).
#include "data/transcripts.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
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

// The dictionary key of a word: ASCII letters and the Latin-1 capitals (À..Þ but ×, UTF-8
// C3 80..C3 9E) and Œ lowered; every other byte kept.
std::string key_of(const std::string& word) {
  std::string s = lower(word);
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    const auto a = static_cast<unsigned char>(s[i]), b = static_cast<unsigned char>(s[i + 1]);
    if (a == 0xC3 && b >= 0x80 && b <= 0x9E && b != 0x97) s[i + 1] = static_cast<char>(b + 0x20), ++i;
    else if (a == 0xC5 && b == 0x92) s[i + 1] = static_cast<char>(0x93), ++i;
  }
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

// A whole token that reads as a finite number ("0.5", "1", "1e-3").
bool is_number(const std::string& s, double* v) {
  if (s.empty()) return false;
  char* end = nullptr;
  const double x = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(x)) return false;
  *v = x;
  return true;
}

// An MFA line's fields after the word: the probability (1 when absent) and the phones.
double mfa_fields(const std::string& path, int ln, const std::vector<std::string>& tok, std::vector<std::string>& pron) {
  size_t k = 1;
  double numbers[4] = {0, 0, 0, 0};
  while (k < tok.size() && k <= 4 && is_number(tok[k], &numbers[k - 1])) ++k;
  const size_t count = k - 1;
  if (count == 2 || count == 3)
    fail(path, ln, "expected after the word 0, 1 or 4 numbers (a pronunciation probability, then three silence "
                   "probabilities; MFA dictionary format), got " + std::to_string(count));
  if (count >= 1 && !(numbers[0] > 0.0 && numbers[0] <= 1.0))
    fail(path, ln, "pronunciation probability " + quoted(tok[1]) + " of " + quoted(tok[0]) + " is not in (0, 1]");
  pron.assign(tok.begin() + static_cast<std::ptrdiff_t>(k), tok.end());
  return count >= 1 ? numbers[0] : 1.0;
}

}  // namespace

DictFormat dict_format_from_text(DictFormatSetting setting, const std::string& text) {
  switch (setting) {
    case DictFormatSetting::timit: return DictFormat::timit;
    case DictFormatSetting::cmudict: return DictFormat::cmudict;
    case DictFormatSetting::mfa: return DictFormat::mfa;
    case DictFormatSetting::automatic: break;
  }
  // TIMIT's when the first entry line has its '/'; CMUdict's only when every entry line is
  // "WORD ARPAbet..." and some phone carries a stress digit (CMUdict marks every vowel): the
  // formats give other phones (ARPAbet mapped, closures), so one ambiguous line is not enough.
  bool first = true, arpabet = true, stress = false;
  for (const std::string& line : lines_of(text)) {
    const std::vector<std::string> t = tokens_of(line);
    if (t.empty() || t[0][0] == ';' || t[0][0] == '#') continue;
    if (first && line.find('/') != std::string::npos) return DictFormat::timit;
    first = false;
    for (size_t k = 1; k < t.size() && arpabet; ++k) {
      if (t[k][0] == '#') break;  // CMUdict's trailing comment
      arpabet = !arpabet_to_timit(t[k]).empty();
      stress = stress || std::isdigit(static_cast<unsigned char>(t[k].back()));
    }
    arpabet = arpabet && t.size() > 1;
    if (!arpabet) return DictFormat::mfa;
  }
  if (first) return DictFormat::timit;
  return stress ? DictFormat::cmudict : DictFormat::mfa;
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
  d.format_ = format;
  const std::vector<std::string> lines = lines_of(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    const int ln = static_cast<int>(i + 1);
    std::string line = lines[i];
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    if (line[first] == ';' || (format == DictFormat::mfa && line[first] == '#')) continue;  // comment lines
    if (format == DictFormat::cmudict) {
      const size_t hash = line.find('#');
      if (hash != std::string::npos) line = line.substr(0, hash);
    }
    std::vector<std::string> tok = tokens_of(line);
    if (tok.empty()) continue;
    std::string word = tok[0];
    std::vector<std::string> pron;
    double prob = 1.0;
    if (format == DictFormat::mfa) {
      prob = mfa_fields(path, ln, tok, pron);
    } else if (format == DictFormat::timit) {
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
    d.entries_[key_of(word)].push_back(std::move(pron));
    d.info_[key_of(word)].push_back(PronunciationInfo{prob, ln});
  }
  if (d.entries_.empty()) fail(path, 0, "no dictionary entries");
  return d;
}

Dictionary Dictionary::load(const std::string& path, DictFormatSetting format) {
  const std::string text = read_file(path);
  return parse(path, text, dict_format_from_text(format, text));
}

const std::vector<std::string>* Dictionary::lookup(const std::string& word) const {
  auto it = entries_.find(key_of(word));
  return it == entries_.end() ? nullptr : &it->second.front();
}

const std::vector<std::vector<std::string>>* Dictionary::pronunciations(const std::string& word) const {
  auto it = entries_.find(key_of(word));
  return it == entries_.end() ? nullptr : &it->second;
}

const std::vector<PronunciationInfo>& Dictionary::info(const std::string& word) const {
  return info_.at(key_of(word));
}

std::string missing_words_line(const std::vector<std::string>& words, const std::string& dict_path) {
  std::map<std::string, int> count;
  for (const std::string& w : words) ++count[w];
  std::vector<std::pair<std::string, int>> order(count.begin(), count.end());
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  if (order.size() == 1)
    return "word " + quoted(order[0].first) + " is not in the dictionary " + dict_path +
           (order[0].second > 1 ? " (" + std::to_string(order[0].second) + " times)" : std::string());
  std::string list;
  for (const auto& [w, n] : order) list += (list.empty() ? "" : ", ") + quoted(w) + " (" + std::to_string(n) + ")";
  return std::to_string(order.size()) + " words are not in the dictionary " + dict_path + " (" +
         std::to_string(words.size()) + " occurrences): " + list;
}

std::string strip_punctuation(const std::string& token) {
  static const std::vector<std::string> kMarks = {".", ",", ";", ":", "!", "?", "\"", "(", ")", "[", "]", "{", "}",
                                                  "«", "»", "„", "“", "”", "‘", "’", "¿", "¡", "…", "–", "—",
                                                  "。", "，", "、", "！", "？", "：", "；", "（", "）", "「", "」"};
  size_t a = 0, b = token.size();
  for (bool more = true; more && a < b;) {
    more = false;
    for (const std::string& m : kMarks)
      if (token.compare(a, m.size(), m) == 0 && a + m.size() <= b) a += m.size(), more = true;
  }
  for (bool more = true; more && a < b;) {
    more = false;
    for (const std::string& m : kMarks)
      if (b - a >= m.size() && token.compare(b - m.size(), m.size(), m) == 0) b -= m.size(), more = true;
  }
  return token.substr(a, b - a);
}

std::vector<Word> words_of_tokens(const std::vector<std::string>& tokens, int line) {
  std::vector<Word> out;
  for (const std::string& t : tokens) {
    std::string w = strip_punctuation(t);
    if (!w.empty()) out.push_back(Word{std::move(w), line});
  }
  return out;
}

std::vector<Word> parse_wrd(const std::string& path, const std::string& text) {
  std::vector<Word> out;
  const std::vector<std::string> lines = lines_of(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::vector<std::string> t = tokens_of(lines[i]);
    if (t.empty()) continue;
    if (t.size() != 3 || !is_integer(t[0]) || !is_integer(t[1]))
      fail(path, static_cast<int>(i + 1), "expected 'start end word', got " + quoted(lines[i]));
    std::string w = strip_punctuation(t[2]);  // as the words of a .TXT (a mark alone is no word)
    if (!w.empty()) out.push_back(Word{std::move(w), static_cast<int>(i + 1)});
  }
  if (out.empty()) fail(path, 0, "empty transcript (no words)");
  return out;
}

std::vector<Word> parse_txt(const std::string& path, const std::string& text) {
  std::vector<Word> out;
  const std::vector<std::string> lines = lines_of(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    std::vector<std::string> t = tokens_of(lines[i]);
    if (out.empty() && t.size() >= 2 && is_integer(t[0]) && is_integer(t[1]))  // TIMIT's sample range
      t.erase(t.begin(), t.begin() + 2);
    for (Word& w : words_of_tokens(t, static_cast<int>(i + 1))) out.push_back(std::move(w));
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

namespace {

// One word's pronunciations (the dictionary's, or the g2p's) with their log probabilities.
struct WordProns {
  const std::vector<std::vector<std::string>>* prons = nullptr;
  std::vector<std::vector<std::string>> own;  // g2p's
  std::vector<double> log_prob;
  size_t best = 0;  // the most probable (first of equal ones)
  const std::vector<std::vector<std::string>>& list() const { return prons ? *prons : own; }
};

std::vector<WordProns> word_pronunciations(const std::vector<Word>& words, const Dictionary& dict,
                                           const std::string& source, const WordOptions& o) {
  std::vector<WordProns> out(words.size());
  std::vector<std::string> missing;
  int first_line = 0;
  for (size_t i = 0; i < words.size(); ++i) {
    WordProns& wp = out[i];
    wp.prons = dict.pronunciations(words[i].text);
    if (wp.prons) {
      for (const PronunciationInfo& in : dict.info(words[i].text)) wp.log_prob.push_back(std::log(in.prob));
      wp.best = static_cast<size_t>(std::max_element(wp.log_prob.begin(), wp.log_prob.end()) - wp.log_prob.begin());
    } else if (o.g2p) {
      wp.own.push_back(o.g2p(words[i].text));
      if (wp.own.back().empty()) fail(source, words[i].line, "the g2p gave no phones for word " + quoted(words[i].text));
      wp.log_prob.push_back(0.0);
    } else {
      if (missing.empty()) first_line = words[i].line;
      missing.push_back(words[i].text);
    }
  }
  if (!missing.empty())
    throw MissingWordsError(source + (first_line > 0 ? ":" + std::to_string(first_line) : std::string()) + ": " +
                                missing_words_line(missing, dict.path()),
                            missing);
  return out;
}

}  // namespace

Transcript words_to_phones(const std::vector<Word>& words, const Dictionary& dict, const std::string& source,
                           const WordOptions& o) {
  if (words.empty()) fail(source, 0, "empty transcript (no words)");
  const std::vector<WordProns> wp = word_pronunciations(words, dict, source, o);
  const bool closures = o.closures && dict.format() != DictFormat::mfa;  // TIMIT names only
  // The combinations offered: choice[k][i] = pronunciation of word i in candidate k; the first takes every
  // word's most probable one, then the words with several are expanded in order while within max_candidates.
  std::vector<std::vector<size_t>> choice(1);
  for (const WordProns& w : wp) choice[0].push_back(w.best);
  for (size_t i = 0; i < wp.size(); ++i) {
    const size_t m = wp[i].list().size();
    if (m < 2 || choice.size() * m > static_cast<size_t>(std::max(1, o.max_candidates))) continue;
    const size_t n = choice.size();
    for (size_t a = 0; a < m; ++a) {
      if (a == wp[i].best) continue;
      for (size_t k = 0; k < n; ++k) {
        choice.push_back(choice[k]);
        choice.back()[i] = a;
      }
    }
  }
  auto build = [&](const std::vector<size_t>& pick) {
    Transcript tr;
    tr.source = source;
    auto add = [&](const std::string& p, int w, bool optional = false) {
      tr.phones.push_back(p);
      tr.word_of_phone.push_back(w);
      tr.optional.push_back(optional ? 1 : 0);
    };
    const bool opt = o.optional_silence;
    const std::string edge = o.silence.empty() ? "h#" : o.silence, between = o.silence.empty() ? "pau" : o.silence;
    if (o.edge_silence) add(edge, -1, opt);
    for (size_t i = 0; i < words.size(); ++i) {
      if (i > 0 && o.word_silence) add(between, -1, opt);
      tr.words.push_back(words[i].text);
      tr.log_prob += wp[i].log_prob[pick[i]];
      for (const std::string& p : wp[i].list()[pick[i]])
        for (const std::string& q : closures ? with_closure(p) : std::vector<std::string>{p})
          add(q, static_cast<int>(i));
    }
    if (o.edge_silence) add(edge, -1, opt);
    return tr;
  };
  Transcript tr = build(choice[0]);
  for (size_t k = 1; k < choice.size(); ++k) tr.alternatives.push_back(build(choice[k]));
  return tr;
}

}  // namespace timitseg::data
