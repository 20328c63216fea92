// The centered cumsum on the GPU (crf/device_layers.h) against the host code
// it must equal bit for bit (crf::centered_cumsum_forward / _backward, one
// utterance at a time): B 32, T 200, C 39 (the TIMIT shape, one tile of the
// forward's block per utterance), T 5000 (many tiles; many chunks of loads per
// thread backward), C 256 (the widest tiled forward), C 257 and 1100 (the
// forward's one-thread-per-column kernel), C 1, T 1, rows of length 0 (all 0)
// and 1, outputs poisoned with NaN before each call (every entry written).
// Skips (saying why) without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/buffer.h"
#include "common/cuda.h"
#include "crf/cumsum.h"
#include "crf/device_layers.h"

namespace timitseg::crf {
namespace {

struct Case {
  int B, T, C;
};

// The bits of a float (NaN-safe equality).
uint32_t bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof(u));
  return u;
}

void check_case(const Case& k, uint64_t seed) {
  const int B = k.B, T = k.T, C = k.C;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 3.f);
  std::vector<int32_t> len(B);
  for (int b = 0; b < B; ++b) len[b] = static_cast<int32_t>(rng() % (T + 1));
  len[0] = T;
  if (B > 2) len[1] = 0;
  if (B > 3) len[2] = 1;
  const size_t nx = size_t(B) * T * C, ncum = size_t(B) * (T + 1) * C;
  std::vector<float> x(nx), dcum(ncum);
  for (float& v : x) v = normal(rng);
  for (float& v : dcum) v = normal(rng);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Buffer dx(Memory::device, nx * sizeof(float)), dlen(Memory::device, B * sizeof(int32_t));
  Buffer dc(Memory::device, ncum * sizeof(float)), dg(Memory::device, ncum * sizeof(float));
  Buffer dout(Memory::device, nx * sizeof(float));
  Buffer scratch(Memory::device, device::centered_cumsum_scratch_bytes(B, T, C));
  dx.upload(x);
  dlen.upload(len);
  dg.upload(dcum);
  dc.upload(std::vector<float>(ncum, nan));
  dout.upload(std::vector<float>(nx, nan));
  device::centered_cumsum_forward(B, T, C, dx.as<float>(), dlen.as<int32_t>(), dc.as<float>(), nullptr);
  device::centered_cumsum_backward(B, T, C, dg.as<float>(), dlen.as<int32_t>(), scratch.data(), dout.as<float>(),
                                nullptr);
  std::vector<float> cum(ncum), gx(nx);
  dc.download(cum.data(), ncum * sizeof(float));
  dout.download(gx.data(), nx * sizeof(float));
  for (int b = 0; b < B; ++b) {
    std::vector<float> want_cum(size_t(T + 1) * C, 0.f), want_gx(size_t(T) * C, 0.f);
    if (len[b] > 0) {
      crf::centered_cumsum_forward<float>(1, T, C, x.data() + size_t(b) * T * C, &len[b], want_cum.data());
      crf::centered_cumsum_backward<float>(1, T, C, dcum.data() + size_t(b) * (T + 1) * C, &len[b], want_gx.data());
    }
    for (size_t i = 0; i < want_cum.size(); ++i)
      ASSERT_EQ(bits(cum[size_t(b) * (T + 1) * C + i]), bits(want_cum[i]))
          << "cum: B=" << B << " T=" << T << " C=" << C << " b=" << b << " L=" << len[b] << " entry " << i;
    for (size_t i = 0; i < want_gx.size(); ++i)
      ASSERT_EQ(bits(gx[size_t(b) * T * C + i]), bits(want_gx[i]))
          << "grad_x: B=" << B << " T=" << T << " C=" << C << " b=" << b << " L=" << len[b] << " entry " << i;
  }
}

TEST(GpuCumsum, BitwiseTheHostCodeAtTimitLongAndWideShapes) {
  if (timitseg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device was found";
  const Case cases[] = {{32, 200, 39}, {5, 5000, 39}, {3, 7, 1}, {4, 300, 8}, {4, 3, 1100}, {1, 1, 39},
                       {3, 100, 256}, {3, 70, 257}};
  uint64_t seed = 11;
  for (const Case& k : cases) check_case(k, seed++);
}

}  // namespace
}  // namespace timitseg::crf
