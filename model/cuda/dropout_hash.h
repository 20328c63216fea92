// The GPU dropout mask: a counter-based hash, a pure function of
// (seed, step, site, index), the same on the host and the device (this header
// compiles in host code without CUDA; under nvcc the functions are also
// __device__). Used by model/cuda/ (the encoder and gpu::dropout_scale) and by
// the tests as the oracle.
//
//   splitmix64(x): z = x + 0x9E3779B97F4A7C15
//                  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
//                  z = (z ^ (z >> 27)) * 0x94D049BB133111EB
//                  return z ^ (z >> 31)                      (all mod 2^64)
//   k = splitmix64(seed); k = splitmix64(k ^ step); k = splitmix64(k ^ site);
//   k = splitmix64(k ^ index);  u = (k >> 11) * 2^-53  in [0, 1)
//   scale = u < p ? 0 : float(1 / (1 - p))                    (inverted dropout)
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TS_HOST_DEVICE __host__ __device__
#else
#define TS_HOST_DEVICE
#endif

namespace timitseg::model::gpu {

TS_HOST_DEVICE inline uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// splitmix64(splitmix64(seed) ^ step) ^ site, hashed: the per-(seed, step, site) key.
TS_HOST_DEVICE inline uint64_t dropout_key(uint64_t seed, uint64_t step, uint64_t site) {
  return splitmix64(splitmix64(splitmix64(seed) ^ step) ^ site);
}

// u in [0, 1) from the 53 high bits of splitmix64(key ^ index).
TS_HOST_DEVICE inline double dropout_uniform_keyed(uint64_t key, uint64_t index) {
  return static_cast<double>(splitmix64(key ^ index) >> 11) * 0x1.0p-53;
}

TS_HOST_DEVICE inline double dropout_uniform(uint64_t seed, uint64_t step, uint64_t site, uint64_t index) {
  return dropout_uniform_keyed(dropout_key(seed, step, site), index);
}

}  // namespace timitseg::model::gpu
