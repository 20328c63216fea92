#include "data/augment.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "data/features.h"

namespace timitseg::data {
namespace {

// A uniform double in [0, 1) from the engine's top 53 bits.
double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// A uniform integer in [0, n] (n >= 0): the engine's value modulo n + 1.
int64_t uniform_upto(std::mt19937_64& rng, int64_t n) {
  return static_cast<int64_t>(rng() % static_cast<uint64_t>(n + 1));
}

void scale_to_unit_power(std::vector<float>& x) {
  const double p = mean_power(x);
  if (!(p > 0)) return;
  const double g = 1.0 / std::sqrt(p);
  for (float& v : x) v = static_cast<float>(v * g);
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

std::vector<float> speed_perturb(const std::vector<float>& x, double factor) {
  if (!(factor >= 0.5 && factor <= 2.0))
    throw std::invalid_argument("speed perturbation: factor " + std::to_string(factor) + " is outside [0.5, 2]");
  const int from = static_cast<int>(std::lround(1000.0 * factor));
  return resample(x, from, 1000);
}

int64_t speed_position(int64_t p, double factor) { return std::llround(static_cast<double>(p) / factor); }

double mean_power(const std::vector<float>& x) {
  if (x.empty()) return 0.0;
  double s = 0;
  for (float v : x) s += static_cast<double>(v) * v;
  return s / static_cast<double>(x.size());
}

std::vector<float> white_noise(size_t n, std::mt19937_64& rng) {
  std::vector<float> out(n);
  for (size_t i = 0; i < n; i += 2) {
    const double u1 = 1.0 - uniform01(rng);  // (0, 1]
    const double u2 = uniform01(rng);
    const double r = std::sqrt(-2.0 * std::log(u1)), a = 2.0 * M_PI * u2;
    out[i] = static_cast<float>(r * std::cos(a));
    if (i + 1 < n) out[i + 1] = static_cast<float>(r * std::sin(a));
  }
  return out;
}

std::vector<float> pink_noise(size_t n, std::mt19937_64& rng) {
  const std::vector<float> w = white_noise(n, rng);
  std::vector<float> out(n);
  double b0 = 0, b1 = 0, b2 = 0, b3 = 0, b4 = 0, b5 = 0, b6 = 0;
  for (size_t i = 0; i < n; ++i) {
    const double x = w[i];
    b0 = 0.99886 * b0 + x * 0.0555179;
    b1 = 0.99332 * b1 + x * 0.0750759;
    b2 = 0.96900 * b2 + x * 0.1538520;
    b3 = 0.86650 * b3 + x * 0.3104856;
    b4 = 0.55000 * b4 + x * 0.5329522;
    b5 = -0.7616 * b5 - x * 0.0168980;
    out[i] = static_cast<float>(b0 + b1 + b2 + b3 + b4 + b5 + b6 + x * 0.5362);
    b6 = x * 0.115926;
  }
  scale_to_unit_power(out);
  return out;
}

std::vector<float> babble_noise(size_t n, const std::vector<std::vector<float>>& talkers, std::mt19937_64& rng) {
  if (talkers.empty()) throw std::invalid_argument("babble noise: no talkers");
  std::vector<double> sum(n, 0.0);
  for (const std::vector<float>& t : talkers) {
    const double p = mean_power(t);
    if (!(p > 0)) throw std::invalid_argument("babble noise: a talker's waveform is silent");
    const double g = 1.0 / std::sqrt(p);
    const size_t len = t.size();
    size_t at = static_cast<size_t>(uniform_upto(rng, static_cast<int64_t>(len) - 1));
    for (size_t i = 0; i < n; ++i) {
      sum[i] += g * t[at];
      if (++at == len) at = 0;
    }
  }
  std::vector<float> out(sum.begin(), sum.end());
  scale_to_unit_power(out);
  return out;
}

std::vector<float> mix_at_snr(const std::vector<float>& speech, const std::vector<float>& noise, double snr_db) {
  if (noise.size() < speech.size())
    throw std::invalid_argument("mix_at_snr: " + std::to_string(noise.size()) + " noise samples for " +
                                std::to_string(speech.size()) + " speech samples");
  const std::vector<float> head(noise.begin(), noise.begin() + static_cast<std::ptrdiff_t>(speech.size()));
  const double ps = mean_power(speech), pn = mean_power(head);
  if (!(pn > 0)) throw std::invalid_argument("mix_at_snr: the noise is silent");
  const double g = std::sqrt(ps / (pn * std::pow(10.0, snr_db / 10.0)));
  std::vector<float> out(speech.size());
  for (size_t i = 0; i < speech.size(); ++i) out[i] = static_cast<float>(speech[i] + g * head[i]);
  return out;
}

double measured_snr_db(const std::vector<float>& speech, const std::vector<float>& noisy) {
  if (speech.size() != noisy.size()) throw std::invalid_argument("measured_snr_db: lengths differ");
  double ps = 0, pn = 0;
  for (size_t i = 0; i < speech.size(); ++i) {
    const double d = static_cast<double>(noisy[i]) - speech[i];
    ps += static_cast<double>(speech[i]) * speech[i];
    pn += d * d;
  }
  return 10.0 * std::log10(ps / pn);
}

void spec_mask(float* feats, int64_t T, int64_t D, const SpecMaskOptions& o, uint64_t seed) {
  if (!o.enabled() || T <= 0 || D <= 0) return;
  std::mt19937_64 rng(seed);
  for (int m = 0; m < o.freq_masks && o.freq_width > 0; ++m) {
    const int64_t w = std::min<int64_t>(uniform_upto(rng, o.freq_width), D);
    const int64_t f0 = uniform_upto(rng, D - w);
    for (int64_t t = 0; t < T; ++t) std::fill(feats + t * D + f0, feats + t * D + f0 + w, 0.0f);
  }
  for (int m = 0; m < o.time_masks && o.time_width > 0; ++m) {
    const int64_t w = std::min<int64_t>(uniform_upto(rng, o.time_width), T);
    const int64_t t0 = uniform_upto(rng, T - w);
    std::fill(feats + t0 * D, feats + (t0 + w) * D, 0.0f);
  }
}

uint64_t spec_mask_seed(uint64_t run_seed, int64_t epoch, int64_t utterance) {
  return splitmix64(splitmix64(splitmix64(run_seed) ^ static_cast<uint64_t>(epoch)) ^ static_cast<uint64_t>(utterance));
}

void utterance_cmvn(float* feats, int64_t T, int64_t D, double var_floor) {
  if (T <= 0) return;
  for (int64_t d = 0; d < D; ++d) {
    double s = 0, ss = 0;
    for (int64_t t = 0; t < T; ++t) s += feats[t * D + d];
    const double mean = s / static_cast<double>(T);
    for (int64_t t = 0; t < T; ++t) {
      const double c = feats[t * D + d] - mean;
      ss += c * c;
    }
    const double inv = 1.0 / std::sqrt(std::max(ss / static_cast<double>(T), var_floor));
    for (int64_t t = 0; t < T; ++t) feats[t * D + d] = static_cast<float>((feats[t * D + d] - mean) * inv);
  }
}

std::string speed_suffix(double factor) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "_augsp%03ld", std::lround(100.0 * factor));
  return buf;
}

Augmentation augmentation_of(const std::string& id) {
  auto ends_with = [&](const std::string& s) { return id.size() >= s.size() && id.compare(id.size() - s.size(), s.size(), s) == 0; };
  if (ends_with(kNoiseSuffix)) return Augmentation::noise;
  const size_t at = id.rfind("_augsp");
  if (at != std::string::npos && id.size() == at + 9 &&
      std::all_of(id.begin() + static_cast<std::ptrdiff_t>(at) + 6, id.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return Augmentation::speed;
  return Augmentation::none;
}

}  // namespace timitseg::data
