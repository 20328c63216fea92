// TIMIT's folder layout read as any other corpus (prepare --corpus DIR
// --format timit with a phone set other than TIMIT's: an espeak-ng corpus
// written by `synth --format timit`): the utterances scan_timit finds (SA
// excluded), their .PHN rows (samples of the audio file) as label intervals in
// seconds, checked against the phone set in prepare (data/prepare_corpus.cpp).
#include <sndfile.h>

#include <charconv>
#include <sstream>

#include "data/corpus_formats.h"
#include "data/timit_lists.h"

namespace timitseg::data {

namespace {
bool whole_int64(const std::string& s, int64_t* out) {  // the whole field, an optional '-'
  const char* end = s.data() + s.size();
  const auto r = std::from_chars(s.data(), end, *out);
  return r.ec == std::errc() && r.ptr == end;
}
}  // namespace

std::vector<CorpusEntry> scan_timit_layout(const std::string& root, std::vector<Problem>* problems,
                                           int64_t* sa_excluded) {
  std::vector<CorpusEntry> out;
  bool any_dev = false;
  for (const CorpusUtterance& u : scan_timit(root, problems)) {
    if (u.is_sa()) {
      ++*sa_excluded;
      continue;
    }
    CorpusEntry e;
    e.id = u.id();
    e.speaker = u.speaker;
    // as synth's other layouts: TRAIN, TEST speakers of the standard dev list, the other TEST speakers
    const SplitName split = u.part == SplitName::train   ? SplitName::train
                            : dev_speakers().count(u.speaker) ? SplitName::dev
                                                              : SplitName::test;
    e.split = split;
    any_dev = any_dev || split == SplitName::dev;
    e.audio_path = u.wav_path;
    e.label_path = u.phn_path;
    e.label_kind = LabelFileKind::phn;
    if (u.wav_path.empty()) e.problems.push_back({u.phn_path, 0, "no matching .WAV file", true});
    if (u.phn_path.empty()) e.problems.push_back({u.wav_path, 0, "no matching .PHN file", true});
    out.push_back(std::move(e));
  }
  // no TEST speaker on the dev list (an own corpus): split by speaker (prepare's rule for corpora without splits)
  if (!any_dev)
    for (auto& e : out) e.split.reset();
  return out;
}

int audio_file_rate(const std::string& path) {
  SF_INFO info{};
  SNDFILE* f = sf_open(path.c_str(), SFM_READ, &info);
  if (!f) return 0;
  sf_close(f);
  return info.samplerate;
}

std::vector<LabelInterval> parse_sample_labels(const std::string& path, const std::string& text, int rate,
                                               std::vector<Problem>* problems) {
  std::vector<LabelInterval> out;
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::istringstream f(line);
    std::vector<std::string> fields;
    for (std::string w; f >> w;) fields.push_back(w);
    if (fields.empty()) continue;
    int64_t a = 0, b = 0;
    if (fields.size() != 3 || !whole_int64(fields[0], &a) || !whole_int64(fields[1], &b)) {
      problems->push_back({path, n, "expected 'start end label' (two integers, samples, and a label), got '" + line +
                                        "'", true});
      continue;
    }
    out.push_back({static_cast<double>(a) / rate, static_cast<double>(b) / rate, fields[2], n});
  }
  return out;
}

}  // namespace timitseg::data
