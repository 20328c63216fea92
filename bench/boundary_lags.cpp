// boundary_lags: where a corpus's phone boundaries sit against the audio's spectral
// transitions, per pair of phone classes. For each boundary between two phones of at
// least 30 ms, the transition's middle is the first 5 ms frame (20 ms Hann window, 40
// log-mel bands to 8 kHz, floored 60 dB below the utterance's loudest band) after the
// earlier phone's middle whose spectrum is nearer (Euclidean) the later phone's middle
// spectrum (the mean of the frames centred in its middle 20 %) than the earlier one's,
// less half a frame shift: the rule data::move_sonorant_boundaries applies between
// sonorants (docs/synth.md). Prints, per class pair with at least --min-count boundaries,
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
#include <string>
#include <vector>

#include "data/espeak_tts.h"
#include "data/features.h"

namespace fs = std::filesystem;
using namespace timitseg::data;

namespace {

struct Phone {
  int64_t start, end;
  std::string label;
};

char class_of(const std::string& label) {
  if (label == "sil" || label == "h#" || label == "pau") return 'S';
  if (!is_sonorant_label(label)) return 'O';
  static const std::vector<std::string> nasal = {"m", "n", "ɲ", "ŋ", "ɱ", "ɳ", "ɴ"},
                                        liquid = {"l", "ɫ", "ʎ", "ɭ", "ʟ", "r", "ɾ", "ɹ", "ɻ", "ʀ", "ɺ", "ɽ"},
                                        glide = {"j", "w", "ɥ", "ʋ", "ɰ"};
  auto starts = [&](const std::vector<std::string>& set) {
    for (const auto& s : set)
      if (label.compare(0, s.size(), s) == 0) return true;
    return false;
  };
  if (starts(nasal)) return 'N';
  if (starts(liquid)) return 'L';
  if (starts(glide)) return 'G';
  return 'V';
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
    const Audio audio = read_audio(wav.string());
    std::vector<Phone> ph;
    std::ifstream in(e.path());
    Phone p;
    while (in >> p.start >> p.end >> p.label) ph.push_back(p);
    FeatureOptions o = FeatureOptions::defaults_for(FeatureType::fbank);
    o.sample_rate = audio.sample_rate;
    o.frame_length_ms = 20.0;
    o.frame_shift_ms = 5.0;
    o.num_mel_bins = 40;
    o.window_type = WindowType::hanning;
    o.preemph_coeff = 0.0;
    o.high_freq = std::min(8000.0, audio.sample_rate / 2.0);
    int32_t T = 0;
    std::vector<float> S = compute_features(audio, o, &T);  // [T][40]
    if (T < 2) continue;
    ++files;
    const float floor = *std::max_element(S.begin(), S.end()) - static_cast<float>(std::log(1e6));
    for (float& v : S) v = std::max(v, floor);
    const int B = o.num_mel_bins;
    const int64_t L = o.frame_length_samples(), H = o.frame_shift_samples(), min_len = audio.sample_rate * 30 / 1000;
    auto frame_at = [&](double s) { return static_cast<int>(std::clamp<double>(std::lround((s - L / 2.0) / H), 0.0, T - 1.0)); };
    auto middle = [&](const Phone& q) {
      std::vector<double> r(B, 0.0);
      const double d = double(q.end - q.start);
      int a = frame_at(q.start + 0.4 * d), b = frame_at(q.start + 0.6 * d), n = 0;
      for (int t = a; t <= b; ++t, ++n)
        for (int k = 0; k < B; ++k) r[k] += S[size_t(t) * B + k];
      for (double& v : r) v /= std::max(n, 1);
      return r;
    };
    auto dist = [&](int t, const std::vector<double>& r) {
      double d = 0;
      for (int k = 0; k < B; ++k) d += (S[size_t(t) * B + k] - r[k]) * (S[size_t(t) * B + k] - r[k]);
      return d;
    };
    for (size_t i = 1; i < ph.size(); ++i) {
      const Phone &a = ph[i - 1], &b = ph[i];
      if (a.end - a.start < min_len || b.end - b.start < min_len) continue;
      const auto ra = middle(a), rb = middle(b);
      const int from = frame_at(0.5 * (a.start + a.end)), to = frame_at(0.5 * (b.start + b.end));
      for (int t = from + 1; t <= to; ++t)
        if (dist(t, rb) < dist(t, ra)) {
          const double at = double(int64_t(t) * H + L / 2 - H / 2);
          lags[std::string{class_of(a.label), class_of(b.label)}].push_back((at - b.start) * 1000.0 / audio.sample_rate);
          break;
        }
    }
  }
  std::printf("%d utterances of %s\npair  boundaries  median_ms  q25_ms  q75_ms\n", files, corpus.c_str());
  for (const auto& [pair, v] : lags)
    if (static_cast<int>(v.size()) >= min_count)
      std::printf("%-4s  %10zu  %9.1f  %6.1f  %6.1f\n", pair.c_str(), v.size(), percentile(v, 0.5), percentile(v, 0.25),
                  percentile(v, 0.75));
  return files > 0 ? 0 : 1;
}
