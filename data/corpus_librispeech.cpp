// LibriSpeech's layout: SPEAKER/CHAPTER/SPEAKER-CHAPTER-UTT.flac (or .wav) with
// SPEAKER/CHAPTER/SPEAKER-CHAPTER.trans.txt, lines "SPEAKER-CHAPTER-UTT WORD WORD ..."
// (labels without times: the words of each utterance). --corpus is such a tree, or a
// folder of them (LibriSpeech's subsets: a folder named train-*, dev-* or test-* on
// the way down gives the split; none: prepare splits by speaker).
#include <filesystem>
#include <set>
#include <sstream>

#include "common/files.h"
#include "common/walk.h"
#include "data/corpus_formats.h"

namespace fs = std::filesystem;

namespace timitseg::data {

namespace {

// The split of a path's subset folder (train-clean-100 -> train), "" without one, and the subset.
std::string subset_split(const fs::path& rel, std::string* subset) {
  for (const auto& part : rel.parent_path()) {
    const std::string p = to_lower(part.string());
    for (const char* s : {"train", "dev", "test"})
      if (p.rfind(std::string(s) + "-", 0) == 0 || p == s) return *subset = part.string(), s;
  }
  return "";
}

// The entries of one SPEAKER-CHAPTER.trans.txt (rel: its path under root).
void read_trans(const fs::path& root, const fs::path& rel, const std::set<std::string>& have,
                std::vector<CorpusEntry>& out) {
  const std::string path = (root / rel).string();
  std::string subset;
  const std::string split = subset_split(rel, &subset);
  std::istringstream in(decode_text(read_file(path)));
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    std::istringstream f(line);
    std::string utt;
    if (!(f >> utt)) continue;
    CorpusEntry e;
    e.id = subset.empty() ? utt : subset + "/" + utt;
    e.speaker = utt.substr(0, utt.find('-'));
    if (!split.empty()) e.split = common::enum_value<SplitName>(split, rel.string());
    e.label_path = e.transcript_path = path;
    e.transcript_line = n;
    e.transcript_kind = TranscriptKind::words;
    for (std::string w; f >> w;) e.tokens.push_back(w);
    const fs::path stem = rel.parent_path() / utt;
    for (const char* ext : {".flac", ".wav", ".FLAC", ".WAV"})
      if (have.count(stem.string() + ext)) {
        e.audio_path = (root / (stem.string() + ext)).string();
        break;
      }
    if (e.audio_path.empty())
      e.problems.push_back({path, n, "no audio " + utt + ".flac (or .wav) beside it", true});
    out.push_back(std::move(e));
  }
}

}  // namespace

std::vector<CorpusEntry> scan_librispeech(const std::string& root, std::vector<Problem>* problems) {
  std::vector<std::string> walk_problems;
  const std::vector<fs::path> files = walk_files(root, &walk_problems);
  for (const auto& w : walk_problems) problems->push_back({root, 0, w, false});
  std::set<std::string> have;
  for (const auto& rel : files) have.insert(rel.string());
  std::vector<CorpusEntry> out;
  for (const auto& rel : files) {
    const std::string name = rel.filename().string();
    if (name.size() > 10 && to_lower(name.substr(name.size() - 10)) == ".trans.txt") read_trans(root, rel, have, out);
  }
  if (out.empty())
    throw std::runtime_error(root + ": no SPEAKER-CHAPTER.trans.txt (LibriSpeech's layout: "
                             "SPEAKER/CHAPTER/*.flac with SPEAKER-CHAPTER.trans.txt)");
  return out;
}

}  // namespace timitseg::data
