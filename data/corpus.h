// Reading a TIMIT tree: TRAIN|TEST / DR1..DR8 / SPEAKER / UTT.{WAV,PHN}, in
// either letter case; .PHN parsing and validation; split membership; frame
// labels (the phone covering each frame centre, q merged into its neighbour)
// and frame-level segments. See docs/data.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/features.h"
#include "data/split_name.h"

namespace timitseg::data {

// One validation finding. Rendered as "FILE:LINE: message" (line 0: the file
// as a whole, rendered "FILE: message"); the severity is not part of the text.
// error = the utterance is unusable (skipped by prepare, fatal with --strict);
// otherwise a warning (e.g. a gap).
struct Problem {
  std::string file;
  int line = 0;
  std::string message;
  bool error = true;
  std::string str() const;
};

// One line of a .PHN file: samples [start, end) carry `phone` (a 61-set label).
struct PhnEntry {
  int64_t start = 0, end = 0;
  std::string phone;
  int line = 0;  // 1-based line in the file
};

// Parses the text of a .PHN file (`path` is used in messages only) and validates
// it: each line `start end phone`, 0 <= start < end <= num_samples (skipped when
// num_samples < 0), a known 61-set phone, no overlap with the previous line
// (errors); gaps between consecutive phones, before the first, or between the
// last phone and the end of the audio (num_samples >= 0) are warnings.
// A file with no phones, or only q, is an error. Returns the entries that parsed.
std::vector<PhnEntry> parse_phn(const std::string& path, const std::string& text, int64_t num_samples,
                                std::vector<Problem>* problems);

// Frame labels [num_frames] (indices into PhoneSet::names61(), never q) of an
// utterance whose .PHN entries are valid (sorted, non-overlapping):
//  - frame t takes the phone covering frame_center_sample(t) (start <= c < end);
//  - a centre in a gap between phones takes the phone before it, a centre
//    before the first phone takes the first phone, a centre at or after the end
//    of the last phone (audio the .PHN does not cover) takes h# (silence);
//  - q (glottal stop, no 48/39 target) is merged into the preceding phone (its
//    frames take that phone's label); a q with no phone before it takes the
//    label of the following non-q phone.
// `scale` multiplies the .PHN sample positions (used when the audio is resampled).
std::vector<int32_t> frame_labels(const std::vector<PhnEntry>& phones, int64_t num_frames, const FeatureOptions& opts,
                                  double scale = 1.0);

// One utterance found in a TIMIT tree. Names are lower case; paths as found.
struct CorpusUtterance {
  SplitName part = SplitName::train;  // train | test (the top folder)
  std::string dialect;  // "dr1"
  std::string speaker;  // "fcjf0"
  std::string name;     // "si1027"
  std::string wav_path, phn_path;  // phn_path empty when no .PHN was found, wav_path when no .WAV
  std::string id() const { return std::string(common::to_string(part)) + "/" + dialect + "/" + speaker + "/" + name; }
  bool is_sa() const { return name.rfind("sa", 0) == 0; }
};

// Lists every utterance of ROOT/{TRAIN,TEST}/DR*/SPEAKER/ (any letter case) that
// has a .WAV or a .PHN, sorted by id; a .WAV without .PHN has an empty phn_path,
// a .PHN without .WAV an empty wav_path (prepare reports both as errors).
// Problems (duplicate utterances, stray folders) are appended as warnings.
// Throws if ROOT has neither a TRAIN nor a TEST folder.
std::vector<CorpusUtterance> scan_timit(const std::string& root, std::vector<Problem>* problems);

// The prepared splits an utterance belongs to: SA sentences none; TRAIN
// {"train"}; TEST {"test"} plus "dev" (50 speakers) and/or "core-test"
// (24 speakers) from the embedded lists.
std::vector<std::string> splits_of(const CorpusUtterance& u);

// Own corpora: the `n` dev speakers taken from `train_speakers` (a set: the
// result does not depend on its order), sorted. Deterministic per seed and
// across platforms: the sorted list is shuffled by Fisher-Yates with
// std::mt19937_64(seed) (j = engine() % (i + 1), i from the last index down)
// and the first n are kept. Throws std::invalid_argument unless
// 1 <= n < train_speakers.size() (train must keep a speaker).
std::vector<std::string> choose_dev_speakers(std::vector<std::string> train_speakers, int n, uint64_t seed);

std::string to_lower(std::string s);

}  // namespace timitseg::data
