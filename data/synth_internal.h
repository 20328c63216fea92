// Shared by the tone and the flite synthesizers (data/synth.cpp, data/synth_flite.cpp):
// the portable random generator and the seed mixing. Not a public interface.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

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


}  // namespace timitseg::data::synth_detail
