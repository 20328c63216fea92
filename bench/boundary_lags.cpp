// boundary_lags: where a corpus's phone boundaries sit against the audio's spectral
// transitions, per pair of phone classes. For each boundary between two phones of at
// least 30 ms, the middle of the spectral transition between them (data::transition_middles:
// the rule data::move_sonorant_boundaries applies between sonorants; docs/synth.md).
// Prints, per class pair with at least --min-count boundaries,
// how many, and the median and quartiles of (transition middle - labelled boundary) in
// ms: negative means the label comes after the transition. Classes by the label's first
// IPA symbol: V vowel, N nasal, L liquid, G glide, S silence (sil, h#, pau), O the rest
// (ARPAbet labels of a flite or TIMIT corpus are classed by the same letters, roughly).
// Reads a TIMIT-layout corpus (*.PHN / *.phn with the audio beside: .WAV, .wav).
//
//   boundary_lags --corpus CORPUS [--min-count 8]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "data/espeak_tts.h"
#include "data/features.h"
#include "data/transitions.h"

namespace fs = std::filesystem;
using namespace timitseg::data;

namespace {

struct Phone {
  int64_t start, end;
  std::string label;
};

char class_of(const std::string& label) {
  if (label == "sil" || label == "h#" || label == "pau") return 'S';
  const char c = sonorant_class(label);
  return c != 0 ? c : 'O';
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * (v.size() - 1);
  const size_t a = static_cast<size_t>(pos), b = std::min(a + 1, v.size() - 1);
  return v[a] + (pos - a) * (v[b] - v[a]);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Phone boundaries against the audio's spectral transitions, per pair of phone classes"};
  std::string corpus;
  int min_count = 8;
  app.add_option("--corpus", corpus, "TIMIT-layout corpus: *.PHN (or .phn) with the audio beside")
      ->required()
      ->check(CLI::ExistingDirectory);
  app.add_option("--min-count", min_count, "Print class pairs with at least this many boundaries")->check(CLI::Range(1, 1000000));
  CLI11_PARSE(app, argc, argv);

  std::map<std::string, std::vector<double>> lags;  // "VN" -> ms
  int files = 0;
  for (const auto& e : fs::recursive_directory_iterator(corpus)) {
    const std::string ext = e.path().extension().string();
    if (ext != ".PHN" && ext != ".phn") continue;
    fs::path wav = e.path();
    wav.replace_extension(ext == ".PHN" ? ".WAV" : ".wav");
    if (!fs::exists(wav)) {
      std::fprintf(stderr, "%s: no audio beside it (%s)\n", e.path().c_str(), wav.filename().c_str());
      return 1;
    }
    Audio audio;
    try {
      audio = read_audio(wav.string());
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "%s\n", ex.what());  // names the file and the problem
      return 1;
    }
    std::vector<Phone> ph;
    std::ifstream in(e.path());
    std::string line;
    for (int row = 1; std::getline(in, line); ++row) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      std::istringstream fields(line);
      Phone p;
      if (!(fields >> p.start >> p.end >> p.label) || p.start < 0 || p.end <= p.start ||
          (!ph.empty() && p.start != ph.back().end)) {
        std::fprintf(stderr, "%s:%d: not 'START END LABEL' following the row before: %s\n", e.path().c_str(), row,
                     line.c_str());
        return 1;
      }
      ph.push_back(p);
    }
    if (ph.empty() || ph.front().start != 0) {
      std::fprintf(stderr, "%s: %s\n", e.path().c_str(), ph.empty() ? "no phones" : "the first phone does not start at 0");
      return 1;
    }
    std::vector<int64_t> starts;
    for (const Phone& q : ph) starts.push_back(q.start);
    const std::vector<int64_t> middle = transition_middles(audio, starts);
    ++files;
    for (size_t i = 1; i < ph.size(); ++i)
      if (middle[i] >= 0)
        lags[std::string{class_of(ph[i - 1].label), class_of(ph[i].label)}].push_back(
            double(middle[i] - ph[i].start) * 1000.0 / audio.sample_rate);
  }
  if (files == 0) {
    std::fprintf(stderr, "%s: no .PHN or .phn file with its audio beside it\n", corpus.c_str());
    return 1;
  }
  std::printf("%d utterances of %s\npair  boundaries  median_ms  q25_ms  q75_ms\n", files, corpus.c_str());
  for (const auto& [pair, v] : lags)
    if (static_cast<int>(v.size()) >= min_count)
      std::printf("%-4s  %10zu  %9.1f  %6.1f  %6.1f\n", pair.c_str(), v.size(), percentile(v, 0.5), percentile(v, 0.25),
                  percentile(v, 0.75));
  return 0;
}
