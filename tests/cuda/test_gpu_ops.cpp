// GPU step kernels (model/cuda/ops.h; the penalty: crf/device_layers.h) against
// the host code they replace: crf::l2_penalty, model::global_norm / clip_global_norm / AdamW::update, a
// host count of non-finite values, and the dropout hash evaluated on the host.
// Every test skips (saying why) without a CUDA device.
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
#include "model/cuda/dropout_hash.h"
#include "model/cuda/ops.h"
#include "model/optim.h"
#include "model/params.h"

namespace timitseg::model {
namespace {

template <class T>
Buffer to_device(const std::vector<T>& v) {
  Buffer b(Memory::device, std::max<size_t>(1, v.size()) * sizeof(T));
  b.upload(v);
  return b;
}
template <class T>
std::vector<T> to_host(const Buffer& b, size_t n) {
  std::vector<T> v(n);
  b.download(v.data(), n * sizeof(T));
  return v;
}
template <class T>
T scalar_from(const Buffer& b) {
  T v{};
  b.download(&v, sizeof(T));
  return v;
}

// Floats with magnitudes over several decades (so sums are not trivially exact).
std::vector<float> random_floats(size_t n, uint64_t seed, float scale = 1.f) {
  std::mt19937_64 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) {
    const double mag = std::pow(10.0, 3.0 * uniform01(rng) - 2.0);
    x = static_cast<float>((2.0 * uniform01(rng) - 1.0) * mag * scale);
  }
  return v;
}

// |a - b| within `ulps` float steps of b (for float results of double arithmetic).
::testing::AssertionResult close_float(float a, float b, double rel) {
  if (a == b) return ::testing::AssertionSuccess();
  const double d = std::fabs(double(a) - double(b));
  if (d <= rel * std::max(std::fabs(double(b)), 1e-30)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << a << " vs " << b << " (diff " << d << ")";
}

TEST(GpuOps, L2PenaltyMatchesHostWithForbiddenEntries) {
  if (timitseg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device was found";
  const int C = 7, K = 5;
  const double reg = 0.0125;
  std::vector<float> A = random_floats(size_t(C) * C, 1), D = random_floats(size_t(K) * C, 2);
  const float ninf = -std::numeric_limits<float>::infinity();
  A[3] = ninf;  // forbidden transitions / durations: constants
  A[C * C - 1] = ninf;
  D[7] = ninf;
  std::vector<float> gA = random_floats(A.size(), 3), gD = random_floats(D.size(), 4);
  std::vector<float> hA = gA, hD = gD;
  const double host = crf::l2_penalty<float>(reg, C, K, A.data(), D.data(), hA.data(), hD.data());

  Buffer dA = to_device(A), dD = to_device(D), dgA = to_device(gA), dgD = to_device(gD);
  Buffer pen(Memory::device, sizeof(double));
  crf::device::l2_penalty(reg, C, K, dA.as<float>(), dD.as<float>(), dgA.as<float>(), dgD.as<float>(), pen.as<double>(),
                  nullptr);
  const double dev = scalar_from<double>(pen);
  EXPECT_NEAR(dev, host, 1e-12 * std::fabs(host)) << "penalty";
  const std::vector<float> rA = to_host<float>(dgA, A.size()), rD = to_host<float>(dgD, D.size());
  for (size_t i = 0; i < A.size(); ++i) EXPECT_TRUE(close_float(rA[i], hA[i], 2e-7)) << "grad_transition[" << i << "]";
  for (size_t i = 0; i < D.size(); ++i) EXPECT_TRUE(close_float(rD[i], hD[i], 2e-7)) << "grad_duration_bias[" << i << "]";
  EXPECT_EQ(rA[3], gA[3]) << "a -inf entry's gradient must be left as is";
  EXPECT_EQ(rD[7], gD[7]) << "a -inf entry's gradient must be left as is";

  // value only (null grads)
  crf::device::l2_penalty(reg, C, K, dA.as<float>(), dD.as<float>(), nullptr, nullptr, pen.as<double>(), nullptr);
  EXPECT_NEAR(scalar_from<double>(pen), host, 1e-12 * std::fabs(host)) << "penalty without gradients";
}

TEST(GpuOps, GlobalNormMatchesHostAndIsDeterministic) {
  if (timitseg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device was found";
  for (size_t n : {size_t(1), size_t(1000), size_t(1000003), size_t(5000000)}) {
    const std::vector<float> g = random_floats(n, 10 + n);
    const double host = global_norm(g);
    Buffer dg = to_device(g), norm(Memory::device, sizeof(double));
    Buffer scratch(Memory::device, gpu::global_norm_scratch_bytes(n));
    gpu::global_norm(dg.as<float>(), n, norm.as<double>(), scratch.data(), nullptr);
    const double dev = scalar_from<double>(norm);
    EXPECT_NEAR(dev, host, 1e-12 * host) << "n = " << n;
    gpu::global_norm(dg.as<float>(), n, norm.as<double>(), scratch.data(), nullptr);
    const double again = scalar_from<double>(norm);
    EXPECT_EQ(std::memcmp(&dev, &again, sizeof(double)), 0) << "two runs differ for n = " << n;
  }
}

TEST(GpuOps, ClipByNormMatchesHost) {
  if (timitseg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device was found";
  const size_t n = 300007;
  const std::vector<float> g0 = random_floats(n, 21);
  const double norm0 = global_norm(g0);
  struct Case {
    double max_norm;
    bool plant_nan;
  };
  for (const Case c : {Case{norm0 / 3, false}, Case{norm0 * 2, false}, Case{0.0, false}, Case{1.0, true}}) {
    std::vector<float> g = g0;
    if (c.plant_nan) g[1234] = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> host = g;
    clip_global_norm(host, c.max_norm);
    Buffer dg = to_device(g), norm(Memory::device, sizeof(double));
    Buffer scratch(Memory::device, gpu::global_norm_scratch_bytes(n));
    gpu::global_norm(dg.as<float>(), n, norm.as<double>(), scratch.data(), nullptr);
    gpu::clip_by_norm(dg.as<float>(), n, norm.as<double>(), c.max_norm, nullptr);
    const std::vector<float> dev = to_host<float>(dg, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i) {
      if (std::isnan(host[i]) && std::isnan(dev[i])) continue;
      if (!close_float(dev[i], host[i], 2.5e-7) && bad++ < 5)
        ADD_FAILURE() << "max_norm " << c.max_norm << " nan " << c.plant_nan << " grad[" << i << "]: " << dev[i]
                      << " vs host " << host[i];
    }
    EXPECT_EQ(bad, 0u) << "max_norm " << c.max_norm;
  }
}

TEST(GpuOps, AdamWMatchesHostOverThreeSteps) {
  if (timitseg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device was found";
  const size_t n = 100003;
  AdamW opt;
  opt.beta1 = 0.9;
  opt.beta2 = 0.98;
  opt.eps = 1e-8;
  opt.weight_decay = 1e-2;
  opt.reset(n);
  std::vector<float> host_p = random_floats(n, 31, 0.1f);
  Buffer p = to_device(host_p), m(Memory::device, n * sizeof(float)), v(Memory::device, n * sizeof(float));
  m.zero(n * sizeof(float));
  v.zero(n * sizeof(float));
  const double lrs[3] = {1e-3, 5e-4, 2e-3};
  for (int step = 1; step <= 3; ++step) {
    const std::vector<float> g = random_floats(n, 40 + step);
    opt.update(host_p, g, lrs[step - 1]);
    Buffer dg = to_device(g);
    gpu::adamw_update(p.as<float>(), m.as<float>(), v.as<float>(), dg.as<float>(), n, lrs[step - 1], opt.beta1,
                      opt.beta2, opt.eps, opt.weight_decay, step, nullptr);
    const std::vector<float> rp = to_host<float>(p, n), rm = to_host<float>(m, n), rv = to_host<float>(v, n);
    double worst_p = 0, worst_m = 0, worst_v = 0;
    for (size_t i = 0; i < n; ++i) {
      worst_p = std::max(worst_p, std::fabs(double(rp[i]) - host_p[i]) / std::max(1.0, std::fabs(double(host_p[i]))));
      worst_m = std::max(worst_m, std::fabs(double(rm[i]) - opt.m[i]) / std::max(1.0, std::fabs(double(opt.m[i]))));
      worst_v = std::max(worst_v, std::fabs(double(rv[i]) - opt.v[i]) / std::max(1.0, std::fabs(double(opt.v[i]))));
    }
    EXPECT_LE(worst_p, 1e-6) << "params after step " << step;
    EXPECT_LE(worst_m, 1e-6) << "exp_avg after step " << step;
    EXPECT_LE(worst_v, 1e-6) << "exp_avg_sq after step " << step;
  }
}

TEST(GpuOps, CountNonfiniteFindsPlantedValues) {
  if (timitseg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device was found";
  const size_t n = 1000003;
  std::vector<float> x = random_floats(n, 51);
  Buffer count(Memory::device, sizeof(unsigned long long));
  {
    Buffer dx = to_device(x);
    gpu::count_nonfinite(dx.as<float>(), n, count.as<unsigned long long>(), nullptr);
    EXPECT_EQ(scalar_from<unsigned long long>(count), 0u) << "all finite";
  }
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const size_t at[] = {0, 17, 4096, 500000, 777777, n - 1, 12345, 99};
  const float what[] = {nan, inf, -inf, nan, -inf, nan, inf, -nan};
  for (size_t i = 0; i < 8; ++i) x[at[i]] = what[i];
  x[3] = std::numeric_limits<float>::max();  // finite extremes are not counted
  x[4] = std::numeric_limits<float>::denorm_min();
  Buffer dx = to_device(x);
  gpu::count_nonfinite(dx.as<float>(), n, count.as<unsigned long long>(), nullptr);
  EXPECT_EQ(scalar_from<unsigned long long>(count), 8u);
  gpu::count_nonfinite(dx.as<float>(), n, count.as<unsigned long long>(), nullptr);  // resets, does not accumulate
  EXPECT_EQ(scalar_from<unsigned long long>(count), 8u);
  gpu::count_nonfinite(dx.as<float>(), 17, count.as<unsigned long long>(), nullptr);  // prefix: only x[0]
  EXPECT_EQ(scalar_from<unsigned long long>(count), 1u);
}

TEST(GpuOps, DropoutMaskFractionDeterminismAndHostFormula) {
  if (timitseg::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device was found";
  const size_t n = 2000000;
  const double p = 0.3;
  const float keep = static_cast<float>(1.0 / (1.0 - p));
  Buffer a(Memory::device, n * sizeof(float)), b(Memory::device, n * sizeof(float));
  gpu::dropout_scale(1234, 7, 2, p, n, a.as<float>(), nullptr);
  const std::vector<float> s1 = to_host<float>(a, n);
  size_t dropped = 0, mismatch = 0;
  for (size_t i = 0; i < n; ++i) {
    dropped += s1[i] == 0.f;
    const float want = gpu::dropout_uniform(1234, 7, 2, i) < p ? 0.f : keep;
    if (s1[i] != want && mismatch++ < 5) ADD_FAILURE() << "scale[" << i << "] = " << s1[i] << ", host formula " << want;
    if (s1[i] != 0.f && s1[i] != keep && mismatch++ < 5) ADD_FAILURE() << "scale[" << i << "] = " << s1[i];
  }
  EXPECT_EQ(mismatch, 0u);
  const double frac = double(dropped) / n, sigma = std::sqrt(p * (1 - p) / n);
  EXPECT_NEAR(frac, p, 3 * sigma) << "dropped fraction";

  gpu::dropout_scale(1234, 7, 2, p, n, b.as<float>(), nullptr);
  EXPECT_EQ(std::memcmp(s1.data(), to_host<float>(b, n).data(), n * sizeof(float)), 0) << "same key, different mask";

  for (int which = 0; which < 3; ++which) {  // another step / site / seed: another mask
    gpu::dropout_scale(which == 2 ? 1235 : 1234, which == 0 ? 8 : 7, which == 1 ? 3 : 2, p, n, b.as<float>(), nullptr);
    const std::vector<float> s2 = to_host<float>(b, n);
    size_t differ = 0;
    for (size_t i = 0; i < n; ++i) differ += s1[i] != s2[i];
    // independent masks differ in a fraction 2 p (1 - p) = 0.42 of the entries
    EXPECT_NEAR(double(differ) / n, 2 * p * (1 - p), 0.01) << (which == 0 ? "step" : which == 1 ? "site" : "seed");
  }
  gpu::dropout_scale(1, 1, 1, 0.0, n, b.as<float>(), nullptr);
  for (float s : to_host<float>(b, n)) ASSERT_EQ(s, 1.f) << "p = 0 keeps everything";
}

}  // namespace
}  // namespace timitseg::model
