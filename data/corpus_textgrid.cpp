// Praat TextGrid reading (long and short text formats, UTF-8 or UTF-16) and
// the MFA corpus layout: SPEAKER/UTT.{wav,flac,ogg} beside SPEAKER/UTT.TextGrid.
//
// Both text formats hold the same sequence of strings, numbers and <flags>;
// the long format adds keys ("xmin =", "intervals: size =") and bracketed item
// numbers, which the tokenizer skips. So one token stream reads either.
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <set>
#include <sstream>
#include <filesystem>
#include <stdexcept>

#include "common/files.h"
#include "common/walk.h"
#include "data/corpus_formats.h"

namespace fs = std::filesystem;

namespace timitseg::data {

namespace {

struct Token {
  enum Kind { number, string, flag } kind;
  double value = 0.0;
  std::string text;
  int line = 0;
};

std::vector<Token> tokenize(const std::string& s) {
  std::vector<Token> out;
  int line = 1;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '\n') {
      ++line, ++i;
    } else if (c == '"') {  // a string; "" is a quote inside it
      Token t{Token::string, 0.0, "", line};
      for (++i; i < s.size(); ++i) {
        if (s[i] == '"' && i + 1 < s.size() && s[i + 1] == '"') t.text += '"', ++i;
        else if (s[i] == '"') break;
        else t.text += s[i];
        if (s[i] == '\n') ++line;
      }
      ++i;
      out.push_back(t);
    } else if (c == '[') {  // item numbers of the long format
      while (i < s.size() && s[i] != ']' && s[i] != '\n') ++i;
    } else if (c == '!') {  // comment (short format)
      while (i < s.size() && s[i] != '\n') ++i;
    } else if (c == ' ' || c == '\t' || c == '\r' || c == '=' || c == ':' || c == ']') {
      ++i;
    } else {  // a bare word: a number, a <flag>, or a key (skipped)
      size_t j = i;
      while (j < s.size() && !std::isspace(static_cast<unsigned char>(s[j])) && s[j] != '"' && s[j] != '=') ++j;
      const std::string w = s.substr(i, j - i);
      char* end = nullptr;
      const double v = std::strtod(w.c_str(), &end);
      if (!w.empty() && end == w.c_str() + w.size()) out.push_back({Token::number, v, w, line});
      else if (w.size() > 2 && w.front() == '<' && w.back() == '>') out.push_back({Token::flag, 0.0, w, line});
      i = j;
    }
  }
  return out;
}

// Reads the token stream of a TextGrid; throws std::runtime_error (line, message).
struct Reader {
  const std::vector<Token>& t;
  size_t at = 0;
  struct Bad : std::runtime_error {
    int line;
    Bad(int l, const std::string& m) : std::runtime_error(m), line(l) {}
  };
  int line() const { return at < t.size() ? t[at].line : (t.empty() ? 0 : t.back().line); }
  const Token& next(Token::Kind k, const char* what) {
    if (at >= t.size()) throw Bad(line(), std::string("ends before ") + what);
    if (t[at].kind != k)
      throw Bad(t[at].line, std::string("expected ") + what + ", got '" + t[at].text + "'");
    return t[at++];
  }
  double number(const char* what) { return next(Token::number, what).value; }
  std::string str(const char* what) { return next(Token::string, what).text; }
  int count(const char* what) {
    const double v = number(what);
    if (v < 0 || v != static_cast<double>(static_cast<long>(v)) || v > 1e8)
      throw Bad(t[at - 1].line, std::string("bad ") + what + " '" + t[at - 1].text + "'");
    return static_cast<int>(v);
  }
};

}  // namespace

std::vector<LabelInterval> parse_textgrid(const std::string& path, const std::string& bytes, const std::string& tier,
                                          std::vector<Problem>* problems) {
  const std::vector<Token> toks = tokenize(decode_text(bytes));
  Reader r{toks};
  std::vector<LabelInterval> found;
  std::string names;
  bool have = false;
  try {
    if (r.str("\"ooTextFile\"") != "ooTextFile") throw Reader::Bad(1, "not a Praat text file (no \"ooTextFile\")");
    if (r.str("\"TextGrid\"") != "TextGrid") throw Reader::Bad(r.line(), "not a TextGrid");
    r.number("xmin");
    r.number("xmax");
    int tiers = 0;
    if (r.at < toks.size() && toks[r.at].kind == Token::flag) {
      if (toks[r.at++].text == "<exists>") tiers = r.count("the number of tiers");
    } else {
      tiers = r.count("the number of tiers");
    }
    for (int k = 0; k < tiers; ++k) {
      const std::string cls = r.str("a tier class");
      const std::string name = r.str("a tier name");
      names += (names.empty() ? "'" : ", '") + name + "'";
      r.number("tier xmin");
      r.number("tier xmax");
      const int n = r.count("the number of intervals");
      const bool intervals = cls == "IntervalTier";
      if (!intervals && cls != "TextTier") throw Reader::Bad(r.line(), "unknown tier class '" + cls + "'");
      const bool wanted = intervals && name == tier && !have;
      for (int i = 0; i < n; ++i) {
        LabelInterval iv;
        iv.start = r.number("a time");
        if (intervals) iv.end = r.number("an interval's xmax");
        iv.line = r.line();
        iv.label = r.str("a label");
        if (wanted) found.push_back(iv);
      }
      have = have || wanted;
    }
  } catch (const Reader::Bad& e) {
    problems->push_back({path, e.line, std::string("unreadable TextGrid: ") + e.what(), true});
    return {};
  }
  if (!have) {
    problems->push_back({path, 0, "no interval tier named '" + tier + "' (tiers: " + (names.empty() ? "none" : names) +
                                      "; choose one with --tier)", true});
    return {};
  }
  // Praat tiers cover the whole time range: leading/trailing empty intervals stay (silence)
  return found;
}

namespace {

// The speaker of an MFA-layout file: its folder (relative to ROOT; files directly
// in ROOT: the utterance name up to its first '_' or '-').
std::string mfa_speaker(const fs::path& rel) {
  const std::string folder = rel.parent_path().generic_string();
  if (!folder.empty()) return folder;
  const std::string s = rel.stem().string();
  return s.substr(0, std::min(s.find('_'), s.find('-')));
}

// MFA's other layout: UTT.{wav,flac,ogg} with no TextGrid and UTT.lab or UTT.txt
// beside it (the words, no times): label_kind transcript.
void add_transcript_files(const std::string& root, const std::vector<fs::path>& files, const std::set<std::string>& have,
                          std::vector<CorpusEntry>& out) {
  for (const auto& rel : files) {
    const std::string ext = to_lower(rel.extension().string());
    if (ext != ".wav" && ext != ".flac" && ext != ".ogg") continue;
    const fs::path stem = rel.parent_path() / rel.stem();
    if (have.count(stem.string() + ".TextGrid") || have.count(stem.string() + ".textgrid")) continue;
    for (const char* t : {".lab", ".txt", ".LAB", ".TXT"}) {
      if (!have.count(stem.string() + t)) continue;
      CorpusEntry e;
      e.id = stem.generic_string();
      e.speaker = mfa_speaker(rel);
      e.audio_path = (fs::path(root) / rel).string();
      e.label_path = (fs::path(root) / (stem.string() + t)).string();
      e.label_kind = LabelFileKind::transcript;
      out.push_back(std::move(e));
      break;
    }
  }
}

// MFA layout: every UTT.TextGrid with UTT.{wav,flac,ogg} beside it (the speaker:
// mfa_speaker), and the audio with UTT.lab or UTT.txt and no TextGrid beside it.
std::vector<CorpusEntry> scan_textgrid(const std::string& root, std::vector<Problem>* problems) {
  std::vector<CorpusEntry> out;
  std::vector<std::string> walk_problems;
  const std::vector<fs::path> files = walk_files(root, &walk_problems);
  for (const auto& w : walk_problems) problems->push_back({root, 0, w, false});
  std::set<std::string> have;
  for (const auto& rel : files) have.insert(rel.string());
  for (const auto& rel : files) {
    if (to_lower(rel.extension().string()) != ".textgrid") continue;
    CorpusEntry e;
    const fs::path stem = rel.parent_path() / rel.stem();
    e.id = stem.generic_string();
    e.speaker = mfa_speaker(rel);
    e.label_path = (fs::path(root) / rel).string();
    e.label_kind = LabelFileKind::textgrid;
    for (const char* ext : {".wav", ".flac", ".ogg", ".WAV", ".FLAC", ".OGG"})
      if (have.count(stem.string() + ext)) {
        e.audio_path = (fs::path(root) / (stem.string() + ext)).string();
        break;
      }
    if (e.audio_path.empty())
      e.problems.push_back({e.label_path, 0, "no audio beside it (" + stem.filename().string() + ".wav, .flac or .ogg)",
                            true});
    out.push_back(std::move(e));
  }
  add_transcript_files(root, files, have, out);
  // audio without its TextGrid (nor a .lab/.txt transcript): one warning each (counted), not an utterance
  std::set<std::string> labelled;
  for (const auto& rel : files) {
    const std::string ext = to_lower(rel.extension().string());
    if (ext == ".textgrid" || ext == ".lab" || ext == ".txt") labelled.insert((rel.parent_path() / rel.stem()).string());
  }
  for (const auto& rel : files) {
    const std::string ext = to_lower(rel.extension().string());
    if ((ext == ".wav" || ext == ".flac" || ext == ".ogg") && !labelled.count((rel.parent_path() / rel.stem()).string()))
      problems->push_back({(fs::path(root) / rel).string(), 0,
                           "no " + rel.stem().string() + ".TextGrid beside it: audio without labels, not read", false});
  }
  return out;
}

}  // namespace

// Defined in data/corpus_buckeye.cpp, data/corpus_kaldi.cpp and data/corpus_manifest.cpp.
std::vector<CorpusEntry> scan_buckeye(const std::string& root, std::vector<Problem>* problems);
std::vector<CorpusEntry> scan_kaldi(const std::string& root, std::vector<Problem>* problems);
std::vector<CorpusEntry> scan_manifest(const std::string& path, std::vector<Problem>* problems);
std::vector<CorpusEntry> scan_librispeech(const std::string& root, std::vector<Problem>* problems);

std::vector<CorpusEntry> scan_corpus(const std::string& path, CorpusFormat format, const ReaderOptions&,
                                     std::vector<Problem>* problems, int64_t* sa_excluded) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw std::runtime_error("--corpus " + path + ": does not exist");
  std::vector<CorpusEntry> out;
  switch (format) {
    case CorpusFormat::textgrid: out = scan_textgrid(path, problems); break;
    case CorpusFormat::buckeye: out = scan_buckeye(path, problems); break;
    case CorpusFormat::kaldi: out = scan_kaldi(path, problems); break;
    case CorpusFormat::manifest: out = scan_manifest(path, problems); break;
    case CorpusFormat::librispeech: out = scan_librispeech(path, problems); break;
    case CorpusFormat::timit: {
      int64_t sa = 0;
      out = scan_timit_layout(path, problems, &sa);
      if (sa_excluded) *sa_excluded = sa;
      break;
    }
  }
  if (out.empty())
    throw std::runtime_error("--corpus " + path + ": no utterances of format " + corpus_format_name(format) + " found");
  std::sort(out.begin(), out.end(), [](const CorpusEntry& a, const CorpusEntry& b) { return a.id < b.id; });
  for (size_t i = 1; i < out.size(); ++i)
    if (out[i].id == out[i - 1].id)
      out[i].problems.push_back({out[i].label_path, 0, "duplicate utterance id '" + out[i].id + "'", true});
  return out;
}

namespace {

// Words of a transcript as written: split at white space, punctuation around them
// (.,;:!?"()) dropped, silence words (sil, sp, <sil>, silence) left out.
std::vector<std::string> transcript_words(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string w; in >> w;) {
    const size_t a = w.find_first_not_of(".,;:!?\"()"), b = w.find_last_not_of(".,;:!?\"()");
    if (a == std::string::npos) continue;
    w = w.substr(a, b + 1 - a);
    const std::string l = to_lower(w);
    if (l != "sil" && l != "sp" && l != "<sil>" && l != "silence") out.push_back(w);
  }
  return out;
}

// MFA's other layout: UTT.lab or UTT.txt beside the audio, the words of the utterance.
void read_transcript_file(CorpusEntry& e, const std::string& bytes) {
  e.transcript_kind = TranscriptKind::words;
  e.transcript_path = e.label_path;
  e.transcript_line = 0;
  e.tokens = transcript_words(decode_text(bytes));
}

// A TextGrid's phone tier; without one (the default tier name) its words tier as a
// transcript without times (MFA's input layout).
void read_textgrid(CorpusEntry& e, const std::string& bytes, const ReaderOptions& reader_opts) {
  std::vector<Problem> ps;
  e.intervals = parse_textgrid(e.label_path, bytes, reader_opts.tier, &ps);
  const bool no_tier = ps.size() == 1 && ps[0].message.rfind("no interval tier named", 0) == 0;
  if (no_tier && reader_opts.tier == "phones") {
    std::vector<Problem> wp;
    const std::vector<LabelInterval> words = parse_textgrid(e.label_path, bytes, "words", &wp);
    if (wp.empty()) {
      std::string text;
      for (const auto& iv : words) text += iv.label + " ";
      e.transcript_kind = TranscriptKind::words;
      e.transcript_path = e.label_path;
      e.transcript_line = words.empty() ? 0 : words.front().line;
      e.tokens = transcript_words(text);
      return;
    }
    ps[0].message += " and no words tier";
  }
  e.problems.insert(e.problems.end(), ps.begin(), ps.end());
}

}  // namespace

void read_labels(CorpusEntry& e, const ReaderOptions& reader_opts) {
  for (const auto& p : e.problems)
    if (p.error) return;
  if (e.label_kind == LabelFileKind::spill) {
    e.intervals = e.spill->read(e.spans);
  } else if (e.label_kind != LabelFileKind::none) {
    std::string bytes;
    try {
      bytes = read_file(e.label_path);
    } catch (const std::exception&) {
      e.problems.push_back({e.label_path, 0, "cannot read", true});
      return;
    }
    switch (e.label_kind) {
      case LabelFileKind::transcript: read_transcript_file(e, bytes); break;
      case LabelFileKind::textgrid: read_textgrid(e, bytes, reader_opts); break;
      case LabelFileKind::buckeye: e.intervals = parse_buckeye_phones(e.label_path, bytes, &e.problems); break;
      case LabelFileKind::phn: {
        const int rate = audio_file_rate(e.audio_path);
        if (rate <= 0) {  // process_entry's read of the audio names the problem
          e.problems.push_back({e.audio_path, 0, "cannot read the audio header (libsndfile)", true});
          return;
        }
        e.intervals = parse_sample_labels(e.label_path, bytes, rate, &e.problems);
        break;
      }
      case LabelFileKind::seconds:
      case LabelFileKind::none:
      case LabelFileKind::spill: e.intervals = parse_seconds_labels(e.label_path, bytes, &e.problems); break;
    }
  }
  for (const auto& p : e.problems)
    if (p.error) return;
  if (e.intervals.empty() && e.transcript_kind != TranscriptKind::none) return;  // a transcript without times
  check_intervals(e.label_path, e.intervals, -1.0, &e.problems);
}

}  // namespace timitseg::data
