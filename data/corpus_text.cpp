// Shared pieces of the corpus readers (data/corpus_formats.h): text decoding,
// CSV, "start end label" files, interval checks, format names and detection,
// splits by speaker and --split-file.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "common/files.h"
#include "common/walk.h"
#include "data/corpus_formats.h"

namespace fs = std::filesystem;

namespace timitseg::data {

namespace {

void put_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string utf16_to_utf8(const std::string& b, size_t from, bool little) {
  std::string out;
  out.reserve(b.size() / 2);
  auto unit = [&](size_t i) -> uint32_t {
    const auto lo = static_cast<unsigned char>(b[i + (little ? 0 : 1)]);
    const auto hi = static_cast<unsigned char>(b[i + (little ? 1 : 0)]);
    return static_cast<uint32_t>(hi) << 8 | lo;
  };
  for (size_t i = from; i + 1 < b.size(); i += 2) {
    uint32_t cp = unit(i);
    if (cp >= 0xD800 && cp < 0xDC00 && i + 3 < b.size()) {
      const uint32_t lo = unit(i + 2);
      if (lo >= 0xDC00 && lo < 0xE000) {
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        i += 2;
      }
    }
    put_utf8(out, cp);
  }
  return out;
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r\n") - a + 1);
}

std::string seconds_str(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", s);
  return buf;
}

}  // namespace

std::string decode_text(const std::string& b) {
  const auto u = [&](size_t i) { return static_cast<unsigned char>(b[i]); };
  if (b.size() >= 3 && u(0) == 0xEF && u(1) == 0xBB && u(2) == 0xBF) return b.substr(3);
  if (b.size() >= 2 && u(0) == 0xFF && u(1) == 0xFE) return utf16_to_utf8(b, 2, true);
  if (b.size() >= 2 && u(0) == 0xFE && u(1) == 0xFF) return utf16_to_utf8(b, 2, false);
  if (b.size() >= 4 && b.size() % 2 == 0) {  // no byte-order mark: ASCII text in UTF-16 has every other byte zero
    if (u(0) != 0 && u(1) == 0 && u(2) != 0 && u(3) == 0) return utf16_to_utf8(b, 0, true);
    if (u(0) == 0 && u(1) != 0 && u(2) == 0 && u(3) != 0) return utf16_to_utf8(b, 0, false);
  }
  return b;
}

std::unique_ptr<std::istream> open_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot read");
  unsigned char h[4] = {0, 0, 0, 0};
  in.read(reinterpret_cast<char*>(h), 4);
  const auto n = in.gcount();
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  // decode_text's rules, on the first bytes
  const bool bom8 = n >= 3 && h[0] == 0xEF && h[1] == 0xBB && h[2] == 0xBF;
  const bool bom16 = n >= 2 && ((h[0] == 0xFF && h[1] == 0xFE) || (h[0] == 0xFE && h[1] == 0xFF));
  const bool zeros16 = n >= 4 && size % 2 == 0 && ((h[0] && !h[1] && h[2] && !h[3]) || (!h[0] && h[1] && !h[2] && h[3]));
  if (!bom8 && (bom16 || zeros16)) return std::make_unique<std::istringstream>(decode_text(read_file(path)));
  in.clear();
  in.seekg(bom8 ? 3 : 0);
  return std::make_unique<std::ifstream>(std::move(in));
}

void for_each_csv_row(const std::string& path, std::istream& in, std::vector<Problem>* problems,
                      const std::function<void(CsvRow&&)>& fn) {
  CsvRow row;
  std::string field;
  int line = 1;
  bool quoted = false, any = false;
  row.line = 1;
  auto end_field = [&] {
    row.fields.push_back(field);
    field.clear();
  };
  auto end_row = [&] {
    if (any || !field.empty() || !row.fields.empty()) {
      end_field();
      fn(std::move(row));
    }
    row = CsvRow{};
    row.line = line;
    any = false;
  };
  std::streambuf* sb = in.rdbuf();
  for (int ci = sb->sbumpc(); ci != std::char_traits<char>::eof(); ci = sb->sbumpc()) {
    const char c = static_cast<char>(ci);
    if (quoted) {
      if (c == '"' && sb->sgetc() == '"') field += '"', sb->sbumpc();
      else if (c == '"') quoted = false;
      else field += c;
      if (c == '\n') ++line;
      continue;
    }
    if (c == '"' && field.empty()) quoted = any = true;
    else if (c == ',') end_field(), any = true;
    else if (c == '\n') ++line, end_row();
    else if (c != '\r') field += c;
  }
  if (quoted && problems) problems->push_back({path, row.line, "a quoted field is not closed (missing '\"')", true});
  end_row();
}

std::vector<CsvRow> parse_csv(const std::string& path, const std::string& text, std::vector<Problem>* problems) {
  std::vector<CsvRow> rows;
  std::istringstream in(text);
  for_each_csv_row(path, in, problems, [&](CsvRow&& r) { rows.push_back(std::move(r)); });
  return rows;
}

std::vector<LabelInterval> parse_seconds_labels(const std::string& path, const std::string& text,
                                                std::vector<Problem>* problems) {
  std::vector<LabelInterval> out;
  std::istringstream in(decode_text(text));
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const std::string t = trim(line);
    if (t.empty() || t[0] == '#') continue;
    std::istringstream f(t);
    LabelInterval iv;
    iv.line = n;
    if (!(f >> iv.start >> iv.end)) {
      problems->push_back({path, n, "expected 'START END LABEL' (seconds), got '" + t + "'", true});
      continue;
    }
    std::getline(f, iv.label);
    iv.label = trim(iv.label);
    out.push_back(iv);
  }
  return out;
}

void check_intervals(const std::string& path, const std::vector<LabelInterval>& iv, double audio_seconds,
                     std::vector<Problem>* problems) {
  if (iv.empty()) {
    problems->push_back({path, 0, "no labels", true});
    return;
  }
  // times written with a few decimals (a CTM's START + DURATION) may overlap by a rounding step
  const double tol = kIntervalOverlapTolerance;
  for (size_t i = 0; i < iv.size(); ++i) {
    const LabelInterval& a = iv[i];
    const std::string what = "'" + a.label + "' [" + seconds_str(a.start) + ", " + seconds_str(a.end) + ") s";
    if (!(a.start >= 0) || !std::isfinite(a.end)) {
      problems->push_back({path, a.line, what + ": start is negative or a time is not a number", true});
    } else if (!(a.start < a.end)) {
      problems->push_back({path, a.line, what + ": start is not before end", true});
    } else if (i > 0 && a.start < iv[i - 1].start) {
      problems->push_back({path, a.line, what + ": unsorted (starts before the previous interval, line " +
                                             std::to_string(iv[i - 1].line) + ")", true});
    } else if (i > 0 && a.start < iv[i - 1].end - tol) {
      problems->push_back({path, a.line, what + ": overlaps the previous interval (line " +
                                             std::to_string(iv[i - 1].line) + ", ends at " +
                                             seconds_str(iv[i - 1].end) + " s)", true});
    } else if (audio_seconds >= 0 && a.end > audio_seconds + 0.0005) {
      problems->push_back({path, a.line, what + ": past the end of the audio (" + seconds_str(audio_seconds) + " s)",
                           true});
    } else {
      continue;
    }
    return;  // one line per utterance: its first problem
  }
}

std::string corpus_format_name(CorpusFormat f) { return common::to_string(f); }

CorpusFormat parse_corpus_format(const std::string& name) {
  CorpusFormat f{};
  if (!common::parse_enum(name, &f))
    throw std::invalid_argument("--format " + name + ": not a corpus format (" + common::enum_choices<CorpusFormat>() +
                                ")");
  return f;
}

CorpusFormat detect_corpus_format(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  if (!fs::exists(p, ec)) throw std::invalid_argument("--corpus " + path + ": does not exist");
  std::vector<CorpusFormat> fits;
  if (fs::is_regular_file(p, ec)) {
    const std::string ext = to_lower(p.extension().string());
    if (ext == ".csv" || ext == ".jsonl" || ext == ".json") return CorpusFormat::manifest;
    throw std::invalid_argument("--corpus " + path + ": a file that is not a manifest (.csv, .jsonl); give --format");
  }
  bool kaldi = fs::exists(p / "wav.scp", ec);
  for (const char* s : {"train", "dev", "test"}) kaldi = kaldi || fs::exists(p / s / "wav.scp", ec);
  if (kaldi) fits.push_back(CorpusFormat::kaldi);
  if (fs::exists(p / "manifest.csv", ec) || fs::exists(p / "manifest.jsonl", ec)) fits.push_back(CorpusFormat::manifest);
  bool phn = false, tg = false, phones = false, libri = false;
  const std::vector<fs::path> files = walk_files(p, nullptr);
  std::set<std::string> audio;  // stems of audio files: an MFA .lab transcript sits beside one
  for (const fs::path& rel : files) {
    const std::string ext = to_lower(rel.extension().string());
    if (ext == ".wav" || ext == ".flac" || ext == ".ogg") audio.insert((rel.parent_path() / rel.stem()).string());
  }
  const bool manifest = !fits.empty() && fits.back() == CorpusFormat::manifest;  // its .lab files are label files
  for (const fs::path& rel : files) {
    const std::string ext = to_lower(rel.extension().string());
    const std::string top = to_lower(rel.begin()->string());
    phn = phn || (ext == ".phn" && (is_split(top, SplitName::train) || is_split(top, SplitName::test)));
    tg = tg || ext == ".textgrid" ||
         (ext == ".lab" && !manifest && audio.count((rel.parent_path() / rel.stem()).string()));
    libri = libri || to_lower(rel.filename().string()).find(".trans.txt") != std::string::npos;
    phones = phones || ext == ".phones";
  }
  if (phn) fits.push_back(CorpusFormat::timit);
  if (tg) fits.push_back(CorpusFormat::textgrid);
  if (phones) fits.push_back(CorpusFormat::buckeye);
  if (libri) fits.push_back(CorpusFormat::librispeech);
  if (fits.size() == 1) return fits[0];
  if (fits.empty())
    throw std::invalid_argument("--corpus " + path + ": no known corpus layout (wav.scp, manifest.csv/.jsonl, "
                                "TRAIN|TEST/**.PHN, **.TextGrid, **.lab, **.phones, **.trans.txt); give --format");
  std::string names;
  for (CorpusFormat f : fits) names += (names.empty() ? "" : ", ") + corpus_format_name(f);
  throw std::invalid_argument("--corpus " + path + ": fits several formats (" + names + "); choose one with --format");
}

std::vector<std::pair<std::string, std::string>> speaker_splits(std::vector<std::string> speakers,
                                                                double dev_fraction, double test_fraction,
                                                                uint64_t seed) {
  std::sort(speakers.begin(), speakers.end());
  speakers.erase(std::unique(speakers.begin(), speakers.end()), speakers.end());
  const int n = static_cast<int>(speakers.size());
  int n_dev = static_cast<int>(std::lround(dev_fraction * n)), n_test = static_cast<int>(std::lround(test_fraction * n));
  if (n >= 3) n_dev = std::max(n_dev, 1), n_test = std::max(n_test, 1);
  while (n_dev + n_test >= n && (n_dev > 0 || n_test > 0)) {  // train keeps a speaker
    if (n_dev >= n_test && n_dev > 0) --n_dev;
    else --n_test;
  }
  std::map<std::string, std::string> split;
  for (const auto& s : speakers) split[s] = "train";
  if (n_dev + n_test > 0) {
    const std::vector<std::string> held = choose_dev_speakers(speakers, n_dev + n_test, seed);
    std::vector<std::string> test;
    if (n_test > 0 && n_dev > 0) test = choose_dev_speakers(held, n_test, seed + 1);
    else if (n_test > 0) test = held;
    for (const auto& s : held) split[s] = "dev";
    for (const auto& s : test) split[s] = "test";
  }
  return {split.begin(), split.end()};
}

std::vector<std::pair<std::string, std::string>> read_split_file(const std::string& path) {
  std::istringstream in(decode_text(read_file(path)));
  std::map<std::string, std::pair<std::string, int>> seen;
  std::vector<std::pair<std::string, std::string>> out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const std::string t = trim(line);
    if (t.empty() || t[0] == '#') continue;
    std::istringstream f(t);
    std::string spk, split, extra;
    f >> spk >> split;
    const std::string where = path + ":" + std::to_string(n) + ": ";
    if (split.empty() || (f >> extra) || !is_corpus_split(split))
      throw std::runtime_error(where + "expected 'SPEAKER train|dev|test', got '" + t + "'");
    if (seen.count(spk))
      throw std::runtime_error(where + "speaker " + spk + " is already on line " + std::to_string(seen[spk].second) +
                               " (a speaker is in one split)");
    seen[spk] = {split, n};
    out.emplace_back(spk, split);
  }
  return out;
}

}  // namespace timitseg::data
