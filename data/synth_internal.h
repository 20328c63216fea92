// Shared by the synthesizers (data/synth.cpp, data/synth_flite.cpp,
// data/synth_espeak.cpp): the portable random generator, the seed mixing and
// the loudness and noise floor of a speech utterance. Not a public interface.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "data/synth_utterance.h"

namespace timitseg::data::synth_detail {

// splitmix64: a portable, fully specified generator (std:: distributions are
// implementation-defined, so they are not used: same seed, same corpus everywhere).
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed) {}
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  double normal() {  // Box-Muller
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * 3.14159265358979323846 * u2);
  }
  int below(int n) { return static_cast<int>(next() % static_cast<uint64_t>(n)); }
  template <class T>
  const T& pick(const std::vector<std::pair<T, double>>& weighted) {
    double total = 0;
    for (const auto& w : weighted) total += w.second;
    double r = uniform() * total;
    for (const auto& w : weighted) {
      if (r < w.second) return w.first;
      r -= w.second;
    }
    return weighted.back().first;
  }
};

inline uint64_t mix(uint64_t a, uint64_t b) {
  Rng r(a * 0x9e3779b97f4a7c15ULL ^ (b + 0x632be59bd9b4e019ULL));
  return r.next();
}
inline uint64_t hash_str(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (unsigned char c : s) { h ^= c; h *= 1099511628211ULL; }
  return h;
}

// The samples of a speech utterance (flite, espeak) from its audio y [N] at
// 16 kHz and its phones: the speech RMS over the phones `silent` does not
// name; gain = min(base_gain(speech RMS) x exp(0.1 N(0,1)), 30000 / peak);
// noise at noise_db +- 7 dB of the speech, a per-utterance mix of white and
// one-pole low-pass noise (as the tone synth); rounded, clamped to int16.
inline std::vector<int16_t> level_and_noise(const std::vector<float>& y,
                                            const std::vector<SynthUtterance::Phone>& phones,
                                            const std::function<bool(const std::string&)>& silent,
                                            const std::function<double(double speech_rms)>& base_gain,
                                            double noise_db, Rng& rng) {
  double se = 0.0;
  int64_t sn = 0;
  for (const auto& p : phones)
    if (!silent(p.label))
      for (int64_t n = p.start; n < p.end; ++n) { se += static_cast<double>(y[n]) * y[n]; ++sn; }
  const double speech_rms = sn > 0 ? std::sqrt(se / static_cast<double>(sn)) : 1000.0;
  double peak = 1.0;
  for (float v : y) peak = std::max(peak, static_cast<double>(std::fabs(v)));
  const double gain = std::min(base_gain(speech_rms) * std::exp(0.1 * rng.normal()), 30000.0 / peak);
  const double noise_rms = gain * speech_rms * std::pow(10.0, (noise_db + 14.0 * (rng.uniform() - 0.5)) / 20.0);
  const double colour = rng.uniform(), pole = 0.8 + 0.18 * rng.uniform();
  const double cw = std::sqrt(1.0 - colour), cc = std::sqrt(colour), innov = std::sqrt(1.0 - pole * pole);
  double lp = 0.0;
  const int64_t N = static_cast<int64_t>(y.size());
  std::vector<int16_t> out(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    lp = pole * lp + innov * rng.normal();
    const double s = std::round(gain * y[n] + noise_rms * (cw * rng.normal() + cc * lp));
    out[n] = static_cast<int16_t>(std::clamp(s, -32768.0, 32767.0));
  }
  return out;
}

}  // namespace timitseg::data::synth_detail
