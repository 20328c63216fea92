#include "data/corpus.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>

#include "common/text.h"
#include "common/walk.h"
#include "data/phones.h"
#include "data/timit_lists.h"

namespace fs = std::filesystem;

namespace timitseg::data {

std::string to_lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string Problem::str() const {
  std::string s = file;
  if (line > 0) s += ":" + std::to_string(line);
  // The severity is not part of the text: the log line already says
  // "[warning]", and the summary counts errors (skipped) and warnings apart.
  return s + ": " + message;
}

namespace {
bool parse_int64(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  size_t i = (s[0] == '-' || s[0] == '+') ? 1 : 0;
  if (i == s.size()) return false;
  for (size_t k = i; k < s.size(); ++k)
    if (!std::isdigit(static_cast<unsigned char>(s[k]))) return false;
  try {
    *out = std::stoll(s);
  } catch (...) {
    return false;
  }
  return true;
}

// The problems of a .PHN file, each with its line (0: the whole file).
struct PhnReport {
  const std::string& path;
  std::vector<Problem>* problems;
  void operator()(int line, const std::string& msg, bool error) const {
    if (problems) problems->push_back({path, line, msg, error});
  }
};

// Where a readable line stands in the file: where the previous phone ended,
// and whether the line before was unreadable.
struct PhnCursor {
  int64_t prev_end = 0;
  bool have_prev = false, after_bad = false;
};

// The checks of one readable line, in the order they are reported: its own
// fields (negative start, start not before end, past the audio, unknown phone),
// then, when those pass, its place after the previous phone. True when the
// line is an error. An overlap with an earlier phone is one even after an
// unreadable line (an unreadable line never hides it); gaps (warnings) are not
// judged against an unreadable line.
bool phn_line_errors(const PhnEntry& e, int64_t num_samples, const PhnCursor& c, const PhnReport& report) {
  const int lineno = e.line;
  bool bad = false;
  if (e.start < 0) { report(lineno, "start " + std::to_string(e.start) + " is negative", true); bad = true; }
  if (e.start >= e.end) {
    report(lineno, "start " + std::to_string(e.start) + " is not before end " + std::to_string(e.end), true);
    bad = true;
  }
  if (num_samples >= 0 && e.end > num_samples) {
    report(lineno, "end " + std::to_string(e.end) + " is past the end of the audio (" + std::to_string(num_samples) +
                       " samples)", true);
    bad = true;
  }
  if (PhoneSet::timit().index61(e.phone) < 0) { report(lineno, "unknown phone '" + e.phone + "'", true); bad = true; }
  if (!bad && c.have_prev && e.start < c.prev_end) {
    report(lineno, "overlaps the previous phone (starts at " + std::to_string(e.start) + ", previous ends at " +
                       std::to_string(c.prev_end) + ")", true);
    bad = true;
  } else if (!bad && !c.after_bad) {
    if (c.have_prev && e.start > c.prev_end) {
      report(lineno, "gap of " + std::to_string(e.start - c.prev_end) + " samples after the previous phone (" +
                         std::to_string(c.prev_end) + " .. " + std::to_string(e.start) + ")", false);
    } else if (!c.have_prev && e.start > 0) {
      report(lineno, "gap of " + std::to_string(e.start) + " samples before the first phone", false);
    }
  }
  return bad;
}
}  // namespace

std::vector<PhnEntry> parse_phn(const std::string& path, const std::string& text, int64_t num_samples,
                                std::vector<Problem>* problems) {
  std::vector<PhnEntry> out;
  const PhnReport report{path, problems};
  // An invisible character (byte-order mark, zero-width or no-break space)
  // would surface as a puzzling "unknown phone" or field error: name it.
  InvisibleChar invisible;
  if (find_invisible(text, &invisible)) {
    report(invisible.line,
           "column " + std::to_string(invisible.column) + ": " + invisible.name +
               ": an invisible character; delete it (or save the file as plain UTF-8 without a byte-order mark)",
           true);
    return out;
  }
  std::istringstream in(text);
  std::string line;
  int lineno = 0;
  bool any_error = false;
  PhnCursor c;
  int last_line = 0;  // line of the last phone whose times were read
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::istringstream ls(line);
    std::vector<std::string> fields;
    std::string f;
    while (ls >> f) fields.push_back(f);
    if (fields.empty()) continue;  // blank line
    PhnEntry e;
    e.line = lineno;
    if (fields.size() != 3 || !parse_int64(fields[0], &e.start) || !parse_int64(fields[1], &e.end)) {
      report(lineno, "expected 'start end phone' (two integers and a label), got '" + line + "'", true);
      any_error = true;
      c.after_bad = true;  // no gap / overlap verdict against an unreadable line
      continue;
    }
    e.phone = fields[2];
    const bool bad = phn_line_errors(e, num_samples, c, report);
    c.after_bad = false;
    last_line = lineno;
    if (bad) {
      any_error = true;
      // a line whose times are sound (e.g. only the phone is unknown) still
      // marks where the next phone should start
      if (e.start >= 0 && e.start < e.end) { c.prev_end = std::max(c.prev_end, e.end); c.have_prev = true; }
      continue;
    }
    c.prev_end = e.end;
    c.have_prev = true;
    out.push_back(e);
  }
  // Audio after the last phone: reported like any other gap (a warning; its
  // frames are labelled h#, see frame_labels). Real TIMIT files often stop a
  // few samples short (TRAIN/DR1/FCJF0/SA1: last phone ends at 46720 of 46797).
  // Up to one default frame length (400 samples, 25 ms) is normal and not
  // reported, so real TIMIT does not flood the log; longer tails are.
  constexpr int64_t kTrailingGapTolerance = 400;
  if (num_samples >= 0 && c.have_prev && !c.after_bad && num_samples - c.prev_end > kTrailingGapTolerance)
    report(last_line, "gap of " + std::to_string(num_samples - c.prev_end) + " samples after the last phone (" +
                          std::to_string(c.prev_end) + " .. " + std::to_string(num_samples) + ")", false);
  if (!any_error) {
    if (out.empty()) report(0, "no phones", true);
    else if (std::all_of(out.begin(), out.end(), [](const PhnEntry& e) { return e.phone == "q"; }))
      report(0, "only q (glottal stop) phones: no frame can be labelled", true);
  }
  return out;
}

std::vector<int32_t> frame_labels(const std::vector<PhnEntry>& phones, int64_t num_frames, const FeatureOptions& opts,
                                  double scale) {
  const PhoneSet& ps = PhoneSet::timit();
  if (phones.empty()) throw std::invalid_argument("frame_labels: no phones");
  // Resolve q: label of the preceding phone (after resolution), else the next non-q.
  const int q = ps.index61("q");
  std::vector<int> lab(phones.size());
  for (size_t i = 0; i < phones.size(); ++i) {
    int idx = ps.index61(phones[i].phone);
    if (idx < 0) throw std::invalid_argument("frame_labels: unknown phone '" + phones[i].phone + "'");
    lab[i] = idx;
  }
  int first_non_q = -1;
  for (size_t i = 0; i < lab.size(); ++i)
    if (lab[i] != q) { first_non_q = static_cast<int>(i); break; }
  if (first_non_q < 0) throw std::invalid_argument("frame_labels: only q phones");
  for (size_t i = 0; i < lab.size(); ++i)
    if (lab[i] == q) lab[i] = (i == 0 || static_cast<int>(i) < first_non_q) ? lab[first_non_q] : lab[i - 1];
  const int silence = ps.index61("h#");
  const double last_end = static_cast<double>(phones.back().end) * scale;
  std::vector<int32_t> out(static_cast<size_t>(num_frames));
  size_t p = 0;  // last phone whose start <= centre
  for (int64_t t = 0; t < num_frames; ++t) {
    const double c = static_cast<double>(frame_center_sample(t, opts));
    while (p + 1 < phones.size() && phones[p + 1].start * scale <= c) ++p;
    // covering phone, or the one before a gap; first phone before it starts;
    // h# (silence) past the end of the last phone (audio the .PHN does not cover)
    out[static_cast<size_t>(t)] = c >= last_end ? silence : lab[p];
  }
  return out;
}

namespace {
// The folder walker of the project (common/walk.h): links to files and folders
// followed, a dangling link or a link cycle reported as a warning and skipped.
std::vector<FolderEntry> sorted_entries(const fs::path& dir, std::vector<Problem>* problems) {
  std::vector<std::string> lines;
  std::vector<FolderEntry> v = list_folder(dir, &lines);
  if (problems)
    for (const std::string& l : lines) {
      const size_t colon = l.find(": ");
      problems->push_back({l.substr(0, colon), 0, l.substr(colon + 2), false});
    }
  return v;
}
bool is_folder(const FolderEntry& e) { return e.kind == FolderEntry::kFolder; }

// One speaker folder of PART/DR: its utterances (a .WAV, with its .PHN when
// there is one; a .PHN without a .WAV) into *out, ids already in *seen (id ->
// path) reported as duplicates and ignored.
void scan_speaker(SplitName part, const std::string& dr, const fs::path& dir,
                  std::map<std::string, std::string>* seen, std::vector<CorpusUtterance>* out,
                  std::vector<Problem>* problems) {
  auto report = [&](const std::string& file, const std::string& msg, bool error) {
    if (problems) problems->push_back({file, 0, msg, error});
  };
  const std::string spk = to_lower(dir.filename().string());
  std::map<std::string, std::string> phn_by_stem;
  std::vector<std::pair<std::string, std::string>> wavs;  // stem, path
  for (const auto& fe : sorted_entries(dir, problems)) {
    if (fe.kind != FolderEntry::kFile) continue;
    const std::string fname = fe.path.filename().string();
    const std::string lower = to_lower(fname);
    if (lower.size() < 5) continue;
    const std::string ext = lower.substr(lower.size() - 4);
    std::string stem = lower.substr(0, lower.size() - 4);
    // converted copies beside the originals: "SI1027.WAV.wav" is the same utterance as "SI1027.WAV"
    if (ext == ".wav" && stem.size() > 4 && stem.substr(stem.size() - 4) == ".wav") stem.resize(stem.size() - 4);
    if (ext == ".wav") {
      wavs.emplace_back(stem, fe.path.string());
    } else if (ext == ".phn") {
      auto [pit, fresh] = phn_by_stem.emplace(stem, fe.path.string());
      if (!fresh)
        report(fe.path.string(), "duplicate of " + pit->second + " (same utterance, other letter case): ignored", false);
    }
  }
  std::set<std::string> phn_used;
  for (const auto& [stem, wav] : wavs) {
    CorpusUtterance u{part, dr, spk, stem, wav, ""};
    auto it = phn_by_stem.find(stem);
    if (it != phn_by_stem.end()) u.phn_path = it->second;
    auto [sit, inserted] = seen->emplace(u.id(), wav);
    if (!inserted) {
      report(wav, "duplicate of " + sit->second + " (same utterance, other letter case or format): ignored", false);
      continue;
    }
    phn_used.insert(stem);
    out->push_back(u);
  }
  // a .PHN without a .WAV: listed with an empty wav_path, so that prepare
  // reports it ("no matching .WAV file"), counts it as skipped and --strict stops
  for (const auto& [stem, phn] : phn_by_stem) {
    if (phn_used.count(stem)) continue;
    CorpusUtterance u{part, dr, spk, stem, "", phn};
    auto [sit, inserted] = seen->emplace(u.id(), phn);
    if (inserted) out->push_back(u);
    else report(phn, "duplicate of " + sit->second + " (same utterance, other letter case): ignored", false);
  }
}
}  // namespace

std::vector<CorpusUtterance> scan_timit(const std::string& root, std::vector<Problem>* problems) {
  auto report = [&](const std::string& file, const std::string& msg, bool error) {
    if (problems) problems->push_back({file, 0, msg, error});
  };
  std::error_code ec;
  if (!fs::is_directory(root, ec)) throw std::runtime_error(root + ": not a folder");
  std::vector<CorpusUtterance> out;
  std::map<std::string, std::string> seen;  // id -> wav path
  bool found_part = false;
  for (const auto& pe : sorted_entries(root, problems)) {
    SplitName part{};
    if (!is_folder(pe) || !common::parse_enum(to_lower(pe.path.filename().string()), &part) ||
        (part != SplitName::train && part != SplitName::test))
      continue;
    found_part = true;
    for (const auto& de : sorted_entries(pe.path, problems)) {
      if (!is_folder(de)) continue;
      const std::string dr = to_lower(de.path.filename().string());
      if (dr.rfind("dr", 0) != 0) {
        report(de.path.string(), "not a dialect-region folder (DR1..DR8): ignored", false);
        continue;
      }
      for (const auto& se : sorted_entries(de.path, problems))
        if (is_folder(se)) scan_speaker(part, dr, se.path, &seen, &out, problems);
    }
  }
  if (!found_part) {
    std::string hint;  // copies often nest the tree one level down (e.g. timit/TIMIT/TRAIN)
    for (const auto& e : sorted_entries(root, nullptr))
      if (is_folder(e))
        for (const auto& f : sorted_entries(e.path, nullptr)) {
          const std::string n = to_lower(f.path.filename().string());
          if (is_folder(f) && (is_split(n, SplitName::train) || is_split(n, SplitName::test)) && hint.empty())
            hint = " (did you mean --timit " + e.path.string() + "?)";
        }
    throw std::runtime_error(root + ": no TRAIN or TEST folder (either letter case): not a TIMIT tree" + hint);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id() < b.id(); });
  return out;
}

std::vector<std::string> splits_of(const CorpusUtterance& u) {
  if (u.is_sa()) return {};
  if (u.part == SplitName::train) return {common::to_string(SplitName::train)};
  std::vector<std::string> s{common::to_string(SplitName::test)};
  if (dev_speakers().count(u.speaker)) s.push_back(common::to_string(SplitName::dev));
  if (core_test_speakers().count(u.speaker)) s.push_back(common::to_string(SplitName::core_test));
  return s;
}

std::vector<std::string> choose_dev_speakers(std::vector<std::string> train_speakers, int n, uint64_t seed) {
  std::sort(train_speakers.begin(), train_speakers.end());
  train_speakers.erase(std::unique(train_speakers.begin(), train_speakers.end()), train_speakers.end());
  const size_t m = train_speakers.size();
  if (n < 1 || static_cast<size_t>(n) >= m)
    throw std::invalid_argument("cannot take " + std::to_string(n) + " dev speaker" + (n == 1 ? "" : "s") + " from " +
                                std::to_string(m) + " TRAIN speaker" + (m == 1 ? "" : "s") +
                                " (between 1 and " + std::to_string(m > 0 ? m - 1 : 0) +
                                ": train must keep at least one speaker)");
  std::mt19937_64 rng(seed);
  for (size_t i = m - 1; i > 0; --i) std::swap(train_speakers[i], train_speakers[rng() % (i + 1)]);
  train_speakers.resize(static_cast<size_t>(n));
  std::sort(train_speakers.begin(), train_speakers.end());
  return train_speakers;
}

}  // namespace timitseg::data
