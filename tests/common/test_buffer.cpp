// common/buffer.h on the host (device buffers are tested in tests/cuda):
// reserve grows and never shrinks, upload/download round trip, zero, moves.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "common/buffer.h"

using namespace timitseg;

TEST(Buffer, HostReserveGrowsAndNeverShrinks) {
  Buffer b;
  EXPECT_EQ(b.memory(), Memory::host);
  EXPECT_EQ(b.capacity(), 0u);
  EXPECT_EQ(b.data(), nullptr);
  b.reserve(100);
  ASSERT_NE(b.data(), nullptr);
  EXPECT_GE(b.capacity(), 100u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);  // 64-byte aligned
  const void* p = b.data();
  const size_t cap = b.capacity();
  b.reserve(10);  // smaller: same allocation
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.capacity(), cap);
  b.reserve(0);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.capacity(), cap);
  b.reserve(cap + 1000);  // larger: grows
  EXPECT_GE(b.capacity(), cap + 1000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
}

TEST(Buffer, HostUploadDownloadRoundTrip) {
  std::vector<float> x(1000);
  std::iota(x.begin(), x.end(), -3.5f);
  Buffer b(Memory::host, 16);
  b.upload(x);  // reserves first
  EXPECT_GE(b.capacity(), x.size() * sizeof(float));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(b.as<float>()[i], x[i]) << i;
  std::vector<float> y(x.size(), 0.0f);
  b.download(y.data(), y.size() * sizeof(float));
  EXPECT_EQ(y, x);
  // a smaller upload reuses the allocation and overwrites only its bytes
  const void* p = b.data();
  const std::vector<float> small{7.0f, 8.0f};
  b.upload(small);
  EXPECT_EQ(b.data(), p);
  b.download(y.data(), y.size() * sizeof(float));
  EXPECT_EQ(y[0], 7.0f);
  EXPECT_EQ(y[1], 8.0f);
  EXPECT_EQ(y[2], x[2]);
  // more than the capacity cannot be downloaded
  std::vector<char> big(b.capacity() + 1);
  EXPECT_THROW(b.download(big.data(), big.size()), std::out_of_range);
}

TEST(Buffer, HostZero) {
  std::vector<int32_t> x(300, -1);
  Buffer b;
  b.upload(x);
  b.zero(100 * sizeof(int32_t));
  std::vector<int32_t> y(x.size());
  b.download(y.data(), y.size() * sizeof(int32_t));
  for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], i < 100 ? 0 : -1) << i;
  Buffer e;
  e.zero(64);  // reserves
  EXPECT_GE(e.capacity(), 64u);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(e.as<unsigned char>()[i], 0);
}

TEST(Buffer, MoveTransfersTheAllocation) {
  Buffer a(Memory::host, 256);
  const void* p = a.data();
  Buffer b(std::move(a));
  EXPECT_EQ(b.data(), p);
  EXPECT_GE(b.capacity(), 256u);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): the moved-from buffer is empty
  EXPECT_EQ(a.capacity(), 0u);
  Buffer c;
  c = std::move(b);
  EXPECT_EQ(c.data(), p);
  EXPECT_EQ(b.data(), nullptr);  // NOLINT(bugprone-use-after-move)
}
