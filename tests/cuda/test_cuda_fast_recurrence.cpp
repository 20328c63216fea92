// The scaled linear-domain recurrence (crf/cuda/recurrence_fast.cu, the
// default for log-sum-exp where its shared memory fits) against the
// log-domain kernel (TIMITSEG_CUDA_RECURRENCE=exact) on the same inputs: log Z,
// boundary posteriors and every gradient agree to float64 rounding, on
// ordinary, long (rescaling), extreme (the exact fallback) and -inf inputs;
// log_partition runs in the small table-free workspace and gives the bits of
// backward's log Z. Agreement with the float64 oracle is CudaAgreement.*
// (which now run the fast kernel). Every test skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "crf/backend.h"
#include "crf/backend_kind.h"
#include "tests/cuda/cuda_harness.h"
#include "tests/cuda/oracle.h"

namespace timitseg::crf::testing {
namespace {

std::unique_ptr<Backend> exact_backend() {
  setenv("TIMITSEG_CUDA_RECURRENCE", "exact", 1);
  auto be = make_cuda_backend();
  unsetenv("TIMITSEG_CUDA_RECURRENCE");
  return be;
}

// max_i |a_i - b_i| / max(max_i |b_i|, 1). Both kernels keep float64 state,
// so they agree at the level of rounding: log Z to 1e-12; the boundary
// posteriors exp(alpha + gamma - log Z) to the rounding of exponents whose
// magnitude grows with T (measured on an H100 with an earlier revision of
// the kernel: 2e-12 at T = 200, 4e-10 at T = 3000, 4e-9 with scores at the
// 1e4 scale), far inside the 1e-5 target.
double max_rel(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0, r = 1;
  for (size_t i = 0; i < b.size(); ++i) {
    if (a[i] == b[i]) continue;  // equal infinities too
    d = std::max(d, std::fabs(a[i] - b[i]));
    r = std::max(r, std::fabs(b[i]));
  }
  return std::isfinite(d) ? d / r : std::numeric_limits<double>::infinity();
}

void expect_fast_equals_exact(const Problem& p, Backend& fast, Backend& exact, double tol_bpost = 1e-8) {
  const double scale = 1.0 / static_cast<double>(p.dims.B);
  const GpuResult f = run_gpu(fast, p, scale, true, true);
  const GpuResult e = run_gpu(exact, p, scale, true, true);
  EXPECT_LT(max_rel(f.logz, e.logz), 1e-12) << "log Z";
  EXPECT_EQ(0, std::memcmp(f.logz.data(), f.logz_fwd_only.data(), f.logz.size() * sizeof(double)))
      << "log_partition and backward give different bits";
  EXPECT_LT(max_rel(f.bpost, e.bpost), tol_bpost) << "boundary posteriors";
  // float32 gradients: within a few float32 ulps.
  EXPECT_LT(rel_err(f.g_cum, e.g_cum), 1e-6) << "grad cum_scores";
  EXPECT_LT(rel_err(f.g_A, e.g_A), 1e-6) << "grad transition";
  EXPECT_LT(rel_err(f.g_D, e.g_D), 1e-6) << "grad duration_bias";
  EXPECT_LT(rel_err(f.g_s, e.g_s), 1e-6) << "grad start";
  EXPECT_LT(rel_err(f.g_e, e.g_e), 1e-6) << "grad end";
  EXPECT_TRUE(all_finite(f.logz) && all_finite(f.g_cum) && all_finite(f.bpost));
}

struct Config {
  int64_t B, T, K, C;
};

// Training-like and edge sizes (K = 1, K > T, C = 1, G = 8, 16 and 32 lanes,
// lengths varying inside the batch), and T = 3000, K = 60 (many ring resets).
TEST(CudaFastRecurrence, EqualsTheExactKernel) {
  SKIP_WITHOUT_GPU();
  auto fast = make_cuda_backend();
  auto exact = exact_backend();
  uint64_t seed = 5100;
  for (const Config& c : std::vector<Config>{{1, 1, 1, 1},
                                             {3, 5, 8, 3},
                                             {5, 20, 3, 1},
                                             {16, 200, 30, 39},
                                             {32, 90, 1, 39},
                                             {2, 100, 70, 30},   // G = 16
                                             {2, 50, 300, 12},   // G = 32
                                             {2, 300, 80, 20},
                                             {2, 3000, 60, 39}}) {
    SCOPED_TRACE(::testing::Message() << "B=" << c.B << " T=" << c.T << " K=" << c.K << " C=" << c.C);
    expect_fast_equals_exact(make_problem(c.B, c.T, c.K, c.C, ++seed), *fast, *exact);
  }
}

// The unrolled variants of lse_fast_kernel at G = 8 (J1 = 4 for K <= 32, 8
// for K <= 64; J2 = 5 for C <= 40, 8 for C <= 64; at most 512 threads) at
// their edges, K > T (terms before the first position), and the generic
// G = 8 kernel (C = 64: 544 threads; K = 80 with TIMITSEG_CUDA_LANES=8).
TEST(CudaFastRecurrence, EveryUnrolledVariantEqualsTheExactKernel) {
  SKIP_WITHOUT_GPU();
  auto fast = make_cuda_backend();
  auto exact = exact_backend();
  uint64_t seed = 5300;
  for (const Config& c : std::vector<Config>{{3, 150, 32, 40},    // J1 4, J2 5
                                             {3, 150, 20, 60},    // J1 4, J2 8
                                             {3, 150, 64, 40},    // J1 8, J2 5
                                             {3, 150, 33, 41},    // J1 8, J2 8
                                             {4, 20, 60, 39},     // K > T
                                             {3, 150, 50, 64}}) { // generic (threads)
    SCOPED_TRACE(::testing::Message() << "B=" << c.B << " T=" << c.T << " K=" << c.K << " C=" << c.C);
    expect_fast_equals_exact(make_problem(c.B, c.T, c.K, c.C, ++seed), *fast, *exact);
  }
  setenv("TIMITSEG_CUDA_LANES", "8", 1);
  auto fast8 = make_cuda_backend();
  unsetenv("TIMITSEG_CUDA_LANES");
  SCOPED_TRACE("K=80 C=20 G=8 (generic)");
  expect_fast_equals_exact(make_problem(3, 300, 80, 20, ++seed), *fast8, *exact);
}

// Scores and parameters at the 1e4 scale (most entries take the exact
// fallback), -inf transitions except the diagonal, -inf durations for some
// labels, -inf start for all labels but one: the same values as the exact kernel.
TEST(CudaFastRecurrence, ExtremeAndMinusInfInputsEqualTheExactKernel) {
  SKIP_WITHOUT_GPU();
  auto fast = make_cuda_backend();
  auto exact = exact_backend();
  const float ninf = -std::numeric_limits<float>::infinity();
  // K, C: the unrolled kernel with J1 = 4, J2 = 5, then J1 = 8, J2 = 8.
  for (int variant = 0; variant < 10; ++variant) {
    SCOPED_TRACE(::testing::Message() << "variant " << variant);
    Options o;
    if (variant % 5 == 0) o.score_sd = 1e4;
    if (variant % 5 == 1) o.score_sd = 1e3, o.param_sd = 1e3;
    if (variant % 5 == 4) o.score_sd = 60.0;  // ring resets driven by the margin
    const int64_t B = 4, T = 400, K = variant < 5 ? 20 : 40, C = variant < 5 ? 9 : 45;
    Problem p = make_problem(B, T, K, C, 7700 + variant, o);
    if (variant % 5 == 2) {
      for (int64_t i = 0; i < C; ++i)
        for (int64_t j = 0; j < C; ++j)
          if (i != j) p.A[i * C + j] = ninf;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < p.lengths[b]; ++t) p.labels[b * T + t] = static_cast<int32_t>(b % C);
    }
    if (variant % 5 == 3) {
      for (int64_t k = 1; k < K; k += 2) p.D[k * C + 2] = ninf;  // label 2: odd durations only
      for (int64_t c = 1; c < C; ++c) p.s[c] = ninf;               // only label 0 may start
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < p.lengths[b]; ++t) p.labels[b * T + t] = 0;
    }
    expect_fast_equals_exact(p, *fast, *exact, variant % 5 <= 1 ? 1e-6 : 1e-8);
  }
}

// The forward alone at T = 100000 runs in a workspace without [T] tables
// (poisoned, exactly log_partition_workspace_bytes long) and gives the bits
// of backward's log Z in the full workspace, and the exact kernel's log Z to
// rounding.
TEST(CudaFastRecurrence, TableFreeForwardAtT100000) {
  SKIP_WITHOUT_GPU();
  auto fast = make_cuda_backend();
  auto exact = exact_backend();
  const Problem p = make_problem(2, 100000, 60, 39, 4321);
  const Dims& d = p.dims;
  const size_t small = fast->log_partition_workspace_bytes(d), full = fast->workspace_bytes(d);
  std::printf("B=2 T=100000 K=60 C=39: log_partition workspace %zu bytes, backward workspace %.1f MiB\n", small,
              full / 1048576.0);
  EXPECT_LT(small, size_t{1} << 20);
  EXPECT_EQ(exact->log_partition_workspace_bytes(d), exact->workspace_bytes(d));
  DevProblem dp(p);
  const Params q = dp.params();
  Buffer ws_small(Memory::device, small), lz(Memory::device, 2 * sizeof(double));
  poison(ws_small);
  poison(lz);
  fast->log_partition(d, q, lz.as<double>(), ws_small.data());
  const std::vector<double> fwd = from_device<double>(lz, 2);

  Buffer ws_full(Memory::device, full), gcum(Memory::device, 2 * (d.T + 1) * d.C * sizeof(float));
  Grads g;
  g.cum_scores = gcum.as<float>();
  poison(lz);
  fast->backward(d, q, nullptr, 0.5, lz.as<double>(), nullptr, g, ws_full.data());
  const std::vector<double> bwd = from_device<double>(lz, 2);
  EXPECT_EQ(0, std::memcmp(fwd.data(), bwd.data(), 2 * sizeof(double)));

  poison(lz);
  // The exact kernel keeps the full tables (the fast one's backward is checkpointed at this T: a smaller workspace).
  Buffer ws_exact(Memory::device, exact->workspace_bytes(d));
  exact->log_partition(d, q, lz.as<double>(), ws_exact.data());
  const std::vector<double> ex = from_device<double>(lz, 2);
  EXPECT_LT(max_rel(fwd, ex), 1e-12);
  EXPECT_TRUE(all_finite(fwd));
}

// Reruns on the fast kernel are bitwise identical (also where the exact
// fallback and ring resets are taken).
TEST(CudaFastRecurrence, BitwiseReruns) {
  SKIP_WITHOUT_GPU();
  auto fast = make_cuda_backend();
  Options o;
  o.score_sd = 200.0;
  for (const Problem& p : {make_problem(8, 500, 30, 39, 99), make_problem(4, 300, 16, 11, 98, o)}) {
    const GpuResult a = run_gpu(*fast, p, 0.125, true, true);
    const GpuResult b = run_gpu(*fast, p, 0.125, true, true);
    EXPECT_EQ(0, std::memcmp(a.logz.data(), b.logz.data(), a.logz.size() * sizeof(double)));
    EXPECT_EQ(0, std::memcmp(a.g_cum.data(), b.g_cum.data(), a.g_cum.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(a.g_A.data(), b.g_A.data(), a.g_A.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(a.g_D.data(), b.g_D.data(), a.g_D.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(a.bpost.data(), b.bpost.data(), a.bpost.size() * sizeof(double)));
  }
}

}  // namespace
}  // namespace timitseg::crf::testing
