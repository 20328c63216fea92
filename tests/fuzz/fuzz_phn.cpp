// libFuzzer target: the .PHN parser (data::parse_phn) and the frame labels made
// from what it accepts (data::frame_labels). Input: the text of a .PHN file.
// It is parsed without an audio length, then with one near the last phone's end
// (some inputs end before it, some past it), as prepare does.
// Invariants: problems name the file and a line inside it; accepted entries are
// sorted, non-overlapping, inside the audio, of known phones; frame labels of an
// error-free file are 61-set indices other than q.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "data/corpus.h"
#include "data/features.h"
#include "data/phones.h"
#include "tests/fuzz/fuzz_util.h"

using namespace timitseg;

namespace {

void check_parse(const std::string& text, int64_t num_samples, std::vector<data::PhnEntry>* entries, bool* errors) {
  const std::string path = "FUZZ/SI1.PHN";
  std::vector<data::Problem> problems;
  *entries = data::parse_phn(path, text, num_samples, &problems);
  const int lines = static_cast<int>(std::count(text.begin(), text.end(), '\n')) + 1;
  *errors = false;
  for (const auto& p : problems) {
    fuzz::check(p.file == path, "problem names another file: " + p.str());
    fuzz::check(p.line >= 0 && p.line <= lines, "problem line outside the file: " + p.str());
    fuzz::check(!p.message.empty(), "problem without a message");
    *errors |= p.error;
  }
  const data::PhoneSet& ps = data::PhoneSet::timit();
  for (size_t i = 0; i < entries->size(); ++i) {
    const auto& e = (*entries)[i];
    fuzz::check(e.start >= 0 && e.start < e.end, "accepted entry with start >= end at line " + std::to_string(e.line));
    fuzz::check(num_samples < 0 || e.end <= num_samples, "accepted entry past the audio");
    fuzz::check(ps.index61(e.phone) >= 0, "accepted unknown phone '" + e.phone + "'");
    if (i > 0) fuzz::check(e.start >= (*entries)[i - 1].end, "accepted overlapping entries");
  }
  if (!*errors) fuzz::check(!entries->empty(), "no entries and no error");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<data::PhnEntry> entries;
  bool errors = false;
  check_parse(text, -1, &entries, &errors);
  if (entries.empty()) return 0;

  // Again with an audio length near the last phone's end: -400 .. +400 samples.
  const int64_t last_end = entries.back().end;
  const int64_t delta = static_cast<int64_t>(size % 801) - 400;
  if (last_end > INT64_MAX - 400) return 0;
  const int64_t num_samples = std::max<int64_t>(0, last_end + delta);
  check_parse(text, num_samples, &entries, &errors);
  if (errors || entries.empty()) return 0;

  // Frame labels of a valid file (bounded: at most 100000 frames).
  const data::FeatureOptions opts;
  const int64_t frames = data::num_frames_for(num_samples, opts);
  if (frames <= 0 || frames > 100000) return 0;
  const std::vector<int32_t> labels = data::frame_labels(entries, frames, opts);
  fuzz::check(static_cast<int64_t>(labels.size()) == frames, "frame_labels returned the wrong number of frames");
  const data::PhoneSet& ps = data::PhoneSet::timit();
  const int32_t q = ps.index61("q");
  for (int32_t l : labels)
    fuzz::check(l >= 0 && l < static_cast<int32_t>(ps.names61().size()) && l != q,
                "frame label " + std::to_string(l) + " is not a 61-set index other than q");
  return 0;
}
