// Eigen's product blocking pinned by the CPU encoder (model/cpu/network.h,
// pin_product_blocking): a Network sets Eigen's cache sizes to the fixed
// 32 KiB / 1 MiB / 32 MiB whatever the CPU reported, and those sizes decide
// the bits of a float product whose inner dimension is longer than one block
// (the reason for the pin): the same product under the L1 size of another CPU
// rounds differently, both within the float error bound of a float64 oracle.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include <Eigen/Dense>

#include "model/cpu/network.h"

using namespace timitseg::model;

namespace {

using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

ModelDims tiny_dims() {
  ModelDims d;
  d.input_dim = 3;
  d.hidden_dim = 4;
  d.num_layers = 1;
  d.num_classes = 2;
  return d;
}

// Restores the pinned sizes after a test changed them.
constexpr std::ptrdiff_t kL1 = 32 * 1024, kL2 = 1024 * 1024, kL3 = 32 * 1024 * 1024;

struct PinnedAgain {
  ~PinnedAgain() { Eigen::setCpuCacheSizes(kL1, kL2, kL3); }
};

}  // namespace

TEST(ProductBlocking, ANetworkPinsEigensCacheSizes) {
  const Network<float> net(tiny_dims());
  EXPECT_EQ(Eigen::l1CacheSize(), kL1);
  EXPECT_EQ(Eigen::l2CacheSize(), kL2);
  EXPECT_EQ(Eigen::l3CacheSize(), kL3);
  // what a product's blocking reads (GeneralBlockPanelKernel.h)
  std::ptrdiff_t l1 = 0, l2 = 0, l3 = 0;
  Eigen::internal::manage_caching_sizes(Eigen::GetAction, &l1, &l2, &l3);
  EXPECT_EQ(l1, kL1);
  EXPECT_EQ(l2, kL2);
  EXPECT_EQ(l3, kL3);
}

TEST(ProductBlocking, TheL1SizeDecidesTheBitsOfALongProduct) {
  const Network<float> net(tiny_dims());  // pinned
  PinnedAgain restore;
  // [48][K] x [K][64], K = 900: one block of the inner dimension under a 48 KiB
  // L1 (up to 1016 floats with SSE's 8x4 register block), two under 32 KiB
  // (456 + 444).
  const int M = 48, K = 900, N = 64;
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  MatF A(M, K), B(K, N);
  for (int i = 0; i < A.size(); ++i) A.data()[i] = u(rng);
  for (int i = 0; i < B.size(); ++i) B.data()[i] = u(rng);
  MatF pinned(M, N), pinned_again(M, N), other(M, N);
  pinned.noalias() = A * B;
  pinned_again.noalias() = A * B;
  Eigen::setCpuCacheSizes(std::ptrdiff_t(48 * 1024), std::ptrdiff_t(2 * 1024 * 1024), std::ptrdiff_t(480) << 20);
  other.noalias() = A * B;
  const MatD exact = A.cast<double>() * B.cast<double>();
  const MatD bound = A.cast<double>().cwiseAbs() * B.cast<double>().cwiseAbs() * (K * std::ldexp(1.0, -24));
  EXPECT_EQ(std::memcmp(pinned.data(), pinned_again.data(), sizeof(float) * pinned.size()), 0);
  EXPECT_NE(std::memcmp(pinned.data(), other.data(), sizeof(float) * pinned.size()), 0)
      << "the 48 KiB L1 blocking should sum the inner dimension in another order";
  // both within the float summation's error bound K u sum |a||b| of the float64 product
  for (int i = 0; i < M * N; ++i) {
    EXPECT_LE(std::abs(pinned.data()[i] - exact.data()[i]), bound.data()[i]) << i;
    EXPECT_LE(std::abs(other.data()[i] - exact.data()[i]), bound.data()[i]) << i;
  }
}
