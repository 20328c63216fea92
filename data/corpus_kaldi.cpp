// A Kaldi data directory: wav.scp (RECORDING PATH; pipes refused), optional
// segments (UTT RECORDING START END, seconds), utt2spk, and the phone
// alignment as a CTM (UTT CHANNEL START DURATION PHONE [CONF], times relative
// to the utterance, as ali-to-phones --ctm-output writes them) in a file
// named phones.ctm, ctm or ali.ctm; without a CTM, the transcripts of `text`
// (UTT word word ...: labels without times). --corpus is the data dir or a folder of
// data dirs named train, dev, test (their names are the splits).
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>

#include "common/files.h"
#include "data/corpus_formats.h"
#include "data/transcripts.h"

namespace fs = std::filesystem;

namespace timitseg::data {

namespace {

struct KaldiLine {
  int line;
  std::vector<std::string> f;
  std::string text;
};

// Non-empty lines split on whitespace; missing file: empty (exists = false).
std::vector<KaldiLine> read_table(const fs::path& p, bool* exists) {
  std::error_code ec;
  *exists = fs::is_regular_file(p, ec);
  std::vector<KaldiLine> out;
  if (!*exists) return out;
  std::istringstream in(decode_text(read_file(p.string())));
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::istringstream f(line);
    KaldiLine k{n, {}, line};
    for (std::string w; f >> w;) k.f.push_back(w);
    if (!k.f.empty()) out.push_back(std::move(k));
  }
  return out;
}

double to_seconds(const std::string& s, bool* ok) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  *ok = !s.empty() && end == s.c_str() + s.size();
  return v;
}

// Kaldi's word-position suffixes (_B _I _E _S) are not part of the phone.
std::string strip_position(const std::string& p) {
  if (p.size() > 2 && p[p.size() - 2] == '_' && std::string("BIES").find(p.back()) != std::string::npos)
    return p.substr(0, p.size() - 2);
  return p;
}

// Calls fn(line number, line) for each line of a text file as read_table
// splits it (any encoding decode_text reads), streamed when it is UTF-8, so
// that a CTM of any size is never in memory whole (UTF-16 is decoded whole).
template <class Fn>
void for_each_line(const fs::path& p, Fn fn) {
  const std::unique_ptr<std::istream> text = open_text(p.string());
  std::string line;
  for (int n = 1; std::getline(*text, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    fn(n, line);
  }
}

// The CTM's intervals, by utterance, into a spill file (each entry's spans of it).
void read_ctm(const fs::path& ctm, std::map<std::string, CorpusEntry*>& by_utt, std::vector<Problem>* problems) {
  auto spill = std::make_shared<IntervalSpill>();
  for_each_line(ctm, [&](int line, const std::string& text) {
    std::istringstream fields(text);
    KaldiLine k{line, {}, text};
    for (std::string w; fields >> w;) k.f.push_back(w);
    if (k.f.empty()) return;
    bool ok1 = false, ok2 = false;
    LabelInterval iv;
    iv.line = k.line;
    if (k.f.size() >= 5) {
      iv.start = to_seconds(k.f[2], &ok1);
      iv.end = iv.start + to_seconds(k.f[3], &ok2);
    }
    auto it = by_utt.find(k.f[0]);
    if (!ok1 || !ok2) {  // the utterance it names, if any, is skipped
      const Problem p{ctm.string(), k.line, "expected 'UTT CHANNEL START DURATION PHONE', got '" + k.text + "'", true};
      if (it != by_utt.end()) it->second->problems.push_back(p);
      else problems->push_back(p);
      return;
    }
    if (it == by_utt.end()) {
      problems->push_back({ctm.string(), k.line, "utterance '" + k.f[0] + "' is not in wav.scp/segments", false});
      return;
    }
    iv.label = strip_position(k.f[4]);
    spill->append(iv, &it->second->spans);
  });
  for (auto& [utt, e] : by_utt) e->spill = spill, e->label_kind = LabelFileKind::spill;
}

// The transcripts of `text` (lines "UTT word word ...") into the entries (words); an
// utterance without a line gets one error, a line of no utterance one warning.
void read_text(const fs::path& path, const std::vector<KaldiLine>& text, std::map<std::string, CorpusEntry*>& by_utt,
               std::vector<Problem>* problems) {
  for (const KaldiLine& k : text) {
    auto it = by_utt.find(k.f[0]);
    if (it == by_utt.end()) {
      problems->push_back({path.string(), k.line, "utterance '" + k.f[0] + "' is not in wav.scp/segments", false});
      continue;
    }
    CorpusEntry& e = *it->second;
    if (e.transcript_kind != TranscriptKind::none) {
      e.problems.push_back({path.string(), k.line, "a second transcript of '" + k.f[0] + "'", true});
      continue;
    }
    e.transcript_kind = TranscriptKind::words;
    e.tokens.assign(k.f.begin() + 1, k.f.end());
    e.transcript_path = path.string();
    e.transcript_line = k.line;
  }
  for (auto& [utt, e] : by_utt)
    if (e->transcript_kind == TranscriptKind::none)
      e->problems.push_back({path.string(), 0, "no transcript of '" + utt + "' (no line 'UTT word ...')", true});
}

std::vector<CorpusEntry> scan_data_dir(const fs::path& dir, const std::string& split, std::vector<Problem>* problems) {
  bool has_seg = false, has_spk = false;
  std::error_code ec;
  const bool has_scp = fs::is_regular_file(dir / "wav.scp", ec);
  const auto seg = read_table(dir / "segments", &has_seg);
  const auto spk = read_table(dir / "utt2spk", &has_spk);
  const std::string scp_path = (dir / "wav.scp").string();
  if (!has_scp) throw std::runtime_error(scp_path + ": missing (a Kaldi data dir holds wav.scp)");
  fs::path ctm;
  for (const char* name : {"phones.ctm", "ctm", "ali.ctm"})
    if (fs::is_regular_file(dir / name)) ctm = dir / name;
  bool has_text = false;
  const auto text = ctm.empty() ? read_table(dir / "text", &has_text) : std::vector<KaldiLine>{};
  if (ctm.empty() && !has_text)
    throw std::runtime_error(dir.string() + ": no phone alignment (phones.ctm, ctm or ali.ctm: 'UTT CHANNEL START "
                             "DURATION PHONE' lines, e.g. from ali-to-phones --ctm-output) and no transcripts (text: "
                             "'UTT word word ...' lines)");
  const std::vector<WavScpLine> scp = parse_wav_scp(read_file(scp_path));
  std::map<std::string, std::string> audio;  // recording -> path ("" for a refused line)
  std::map<std::string, Problem> refused;
  for (const WavScpLine& k : scp) {
    std::string path = k.audio;
    if (k.pipe) {
      refused[k.id] = {scp_path, k.line, "'" + k.id + "' is a command ('... |'), not a file: timitseg reads "
                                         "audio files only (write the audio out, e.g. with wav-copy)", true};
      path.clear();
    } else if (path.empty()) {
      refused[k.id] = {scp_path, k.line, "expected 'RECORDING PATH', got only '" + k.id + "'", true};
    } else if (fs::path(path).is_relative()) {
      path = (dir / path).string();
    }
    audio[k.id] = path;
  }
  std::map<std::string, std::string> utt2spk;
  for (const auto& k : spk)
    if (k.f.size() >= 2) utt2spk[k.f[0]] = k.f[1];
  std::vector<CorpusEntry> out;
  auto add = [&](const std::string& utt, const std::string& rec, int line, const std::string& file) {
    CorpusEntry e;
    e.id = split.empty() ? utt : split + "/" + utt;
    if (!split.empty()) e.split = common::enum_value<SplitName>(split, dir.string());
    e.label_path = ctm.empty() ? (dir / "text").string() : ctm.string();
    auto a = audio.find(rec);
    if (a == audio.end()) e.problems.push_back({file, line, "recording '" + rec + "' is not in wav.scp", true});
    else if (a->second.empty()) e.problems.push_back(refused[rec]);
    else e.audio_path = a->second;
    auto s = utt2spk.find(utt);
    e.speaker = s != utt2spk.end() ? s->second : utt;
    if (has_spk && s == utt2spk.end())
      e.problems.push_back({(dir / "utt2spk").string(), 0, "utterance '" + utt + "' has no speaker", true});
    out.push_back(std::move(e));
    return &out.back();
  };
  out.reserve(has_seg ? seg.size() : scp.size());
  if (!has_seg)
    for (const WavScpLine& k : scp) add(k.id, k.id, k.line, scp_path);
  for (const auto& k : seg) {  // has_seg
    CorpusEntry* e = add(k.f[0], k.f.size() > 1 ? k.f[1] : k.f[0], k.line, (dir / "segments").string());
    bool ok1 = false, ok2 = false;
    if (k.f.size() >= 4) e->seg_start = to_seconds(k.f[2], &ok1), e->seg_end = to_seconds(k.f[3], &ok2);
    if (!ok1 || !ok2 || !(e->seg_start >= 0) || !(e->seg_end > e->seg_start))
      e->problems.push_back({(dir / "segments").string(), k.line,
                             "expected 'UTT RECORDING START END' (seconds, START < END), got '" + k.text + "'", true});
  }
  std::map<std::string, CorpusEntry*> by_utt;
  for (auto& e : out) by_utt[split.empty() ? e.id : e.id.substr(split.size() + 1)] = &e;
  if (!ctm.empty()) read_ctm(ctm, by_utt, problems);
  else read_text(dir / "text", text, by_utt, problems);
  return out;
}

}  // namespace

std::vector<WavScpLine> parse_wav_scp(const std::string& bytes) {
  std::vector<WavScpLine> out;
  std::istringstream in(decode_text(bytes));
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const size_t a = line.find_first_not_of(" \t\r");
    if (a == std::string::npos || line[a] == '#') continue;
    const size_t b = std::min(line.size(), line.find_first_of(" \t\r", a));
    WavScpLine l;
    l.line = n;
    l.id = line.substr(a, b - a);
    const size_t c = line.find_first_not_of(" \t\r", b), d = line.find_last_not_of(" \t\r");
    if (c != std::string::npos) l.audio = line.substr(c, d + 1 - c);
    l.pipe = !l.audio.empty() && l.audio.back() == '|';
    out.push_back(std::move(l));
  }
  return out;
}

std::map<std::string, std::string> read_wav_scp(const std::string& path) {
  std::map<std::string, std::string> scp;
  for (const WavScpLine& l : parse_wav_scp(read_file(path))) {
    const std::string at = "--wav-scp " + path + ":" + std::to_string(l.line) + ": ";
    if (l.audio.empty()) throw std::invalid_argument(at + "expected 'UTTID AUDIO', got only '" + l.id + "'");
    if (l.pipe || l.audio.find_first_of(" \t") != std::string::npos)  // a command line, its arguments
      throw std::invalid_argument(at + "'" + l.id + "' is given by a command; only an audio file path is supported");
    if (l.id == "." || l.id == ".." || l.id.find('/') != std::string::npos)
      throw std::invalid_argument(at + "utterance id '" + l.id + "' cannot name an output file (no '/', '.' or '..')");
    if (!scp.emplace(l.id, l.audio).second) throw std::invalid_argument(at + "utterance id '" + l.id + "' given twice");
  }
  return scp;
}

std::vector<CorpusEntry> scan_kaldi(const std::string& root, std::vector<Problem>* problems) {
  const fs::path r(root);
  if (fs::exists(r / "wav.scp")) return scan_data_dir(r, "", problems);
  std::vector<CorpusEntry> out;
  for (const char* split : {"train", "dev", "test"})
    if (fs::exists(r / split / "wav.scp")) {
      auto part = scan_data_dir(r / split, split, problems);
      for (auto& e : part) out.push_back(std::move(e));
    }
  if (out.empty()) throw std::runtime_error(root + ": no wav.scp (nor train|dev|test/wav.scp): not a Kaldi data dir");
  return out;
}

}  // namespace timitseg::data
