// The Buckeye corpus: speaker folders (s01, s02, ...) of UTT.wav with
// UTT.phones and UTT.words, possibly one folder deeper (s01/s0101a/s0101a.wav
// as the distribution's zip files unpack). Labels come from .phones; its
// labels are mapped to phones by configs/phone_sets/buckeye.yaml at prepare.
#include <filesystem>
#include <set>
#include <sstream>

#include "common/walk.h"
#include "data/corpus_formats.h"

namespace fs = std::filesystem;

namespace timitseg::data {

std::vector<LabelInterval> parse_buckeye_phones(const std::string& path, const std::string& bytes,
                                                std::vector<Problem>* problems) {
  std::istringstream in(decode_text(bytes));
  std::string line;
  int n = 0;
  bool header = true;
  std::vector<LabelInterval> out;
  double prev = 0.0;
  while (std::getline(in, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t a = line.find_first_not_of(" \t");
    if (header) {  // "signal", "type", "color", "comment", "font", "separator", "nfields", then "#"
      if (a != std::string::npos && line[a] == '#' && line.find_first_not_of(" \t", a + 1) == std::string::npos)
        header = false;
      continue;
    }
    if (a == std::string::npos) continue;
    std::istringstream f(line);
    std::string end_s, color;
    f >> end_s >> color;
    LabelInterval iv;
    iv.line = n;
    char* endp = nullptr;
    iv.end = std::strtod(end_s.c_str(), &endp);
    if (endp != end_s.c_str() + end_s.size() || end_s.empty()) {
      problems->push_back({path, n, "expected 'END COLOR LABEL' (END in seconds), got '" + line.substr(a) + "'", true});
      return {};
    }
    std::getline(f, iv.label);
    const size_t semi = iv.label.find(';');
    if (semi != std::string::npos) iv.label.erase(semi);  // "ah; *": the annotators' marks
    const size_t b = iv.label.find_first_not_of(" \t"), e = iv.label.find_last_not_of(" \t");
    iv.label = b == std::string::npos ? "" : iv.label.substr(b, e - b + 1);
    iv.start = prev;
    prev = iv.end;
    if (iv.end == iv.start) continue;  // a zero-length entry (a mark, not a segment)
    out.push_back(iv);
  }
  if (header) {
    problems->push_back({path, 0, "no '#' line ending the header (not a Buckeye .phones file?)", true});
    return {};
  }
  return out;
}

std::vector<CorpusEntry> scan_buckeye(const std::string& root, std::vector<Problem>* problems) {
  std::vector<std::string> walk_problems;
  const std::vector<fs::path> files = walk_files(root, &walk_problems);
  for (const auto& w : walk_problems) problems->push_back({root, 0, w, false});
  std::set<std::string> have;
  for (const auto& rel : files) have.insert(rel.string());
  std::vector<CorpusEntry> out;
  for (const auto& rel : files) {
    if (rel.extension() != ".phones") continue;
    const fs::path stem = rel.parent_path() / rel.stem();
    CorpusEntry e;
    e.id = stem.generic_string();
    e.speaker = rel.begin()->string() == rel.string() ? rel.stem().string().substr(0, 3) : rel.begin()->string();
    e.label_path = (fs::path(root) / rel).string();
    e.label_kind = LabelFileKind::buckeye;
    for (const char* ext : {".wav", ".WAV", ".flac"})
      if (have.count(stem.string() + ext)) e.audio_path = (fs::path(root) / (stem.string() + ext)).string();
    if (e.audio_path.empty())
      e.problems.push_back({e.label_path, 0, "no " + rel.stem().string() + ".wav beside it", true});
    if (!have.count(stem.string() + ".words"))
      problems->push_back({e.label_path, 0, "no " + rel.stem().string() + ".words beside it (not needed: labels "
                                            "come from .phones)", false});
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace timitseg::data
