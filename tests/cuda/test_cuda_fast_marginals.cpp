// The parameter marginals in the scaled linear domain (crf/cuda/marginal_fast.cu,
// the default where its shared memory fits) against the one-exp-per-term
// kernel (TIMITSEG_CUDA_MARGINALS=exact) on the same recurrence tables: the
// transition and duration gradients agree to float32 rounding, with and
// without onset scores, over several tiles per chunk (long T), K > T, -inf
// parameters (entries of scale 0), parameters whose EA / ED fall under
// 2^-900 (always-exact entries) and scores at the 1e4 scale (the per-term
// fallback); reruns are bitwise identical. The other outputs (log Z, grad
// cum_scores) do not depend on the marginal kernel and must be bitwise equal.
// Agreement with the float64 oracle is CudaAgreement.* (which run it). Every
// test skips without a GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "crf/backend.h"
#include "crf/backend_kind.h"
#include "tests/cuda/cuda_harness.h"
#include "tests/cuda/oracle.h"
#include "tests/support/crf_problems.h"

namespace timitseg::crf::testing {
namespace {

std::unique_ptr<Backend> exact_marginals_backend() {
  setenv("TIMITSEG_CUDA_MARGINALS", "exact", 1);
  auto be = make_cuda_backend();
  unsetenv("TIMITSEG_CUDA_MARGINALS");
  return be;
}

// Both kernels sum float64 terms of the same tables in the same order; the
// terms differ by the rounding of a product of exps against one exp, so the
// float32 outputs agree to a few float32 ulps (rel_err: max abs difference
// over the largest magnitude).
void expect_linear_equals_exact(const Problem& p, Backend& linear, Backend& exact) {
  const double scale = 1.0 / static_cast<double>(p.dims.B);
  const GpuResult f = run_gpu(linear, p, scale, true, false);
  const GpuResult e = run_gpu(exact, p, scale, true, false);
  EXPECT_LT(rel_err(f.g_A, e.g_A), 1e-6) << "grad transition";
  EXPECT_LT(rel_err(f.g_D, e.g_D), 1e-6) << "grad duration_bias";
  EXPECT_TRUE(all_finite(f.g_A) && all_finite(f.g_D));
  EXPECT_EQ(0, std::memcmp(f.logz.data(), e.logz.data(), f.logz.size() * sizeof(double))) << "log Z";
  EXPECT_EQ(0, std::memcmp(f.g_cum.data(), e.g_cum.data(), f.g_cum.size() * sizeof(float))) << "grad cum";
  EXPECT_EQ(0, std::memcmp(f.g_s.data(), e.g_s.data(), f.g_s.size() * sizeof(float))) << "grad start";
}

struct Config {
  int64_t B, T, K, C;
  bool onset;
};

// One tile per chunk (chunks of at most 16 positions while B T <= 8192),
// several tiles (B = 1, T = 20000: chunks of 40; B = 2, T = 12000: 47), K > T,
// K = 1, C = 1, and onset scores.
TEST(CudaFastMarginals, EqualTheExactKernel) {
  SKIP_WITHOUT_GPU();
  auto linear = make_cuda_backend();
  auto exact = exact_marginals_backend();
  uint64_t seed = 6100;
  for (const Config& c : std::vector<Config>{{1, 1, 1, 1, false},
                                             {3, 5, 8, 3, true},
                                             {5, 20, 3, 1, false},
                                             {32, 200, 30, 39, false},
                                             {32, 200, 30, 39, true},
                                             {2, 100, 70, 30, true},
                                             {1, 3000, 60, 39, false},
                                             {4, 2000, 60, 39, true},
                                             {1, 20000, 20, 9, true},       // chunks of 40: 3 tiles
                                             {2, 12000, 60, 39, false}}) {  // chunks of 47
    SCOPED_TRACE(::testing::Message() << "B=" << c.B << " T=" << c.T << " K=" << c.K << " C=" << c.C
                                      << " onset=" << c.onset);
    Problem p = make_problem(c.B, c.T, c.K, c.C, ++seed);
    if (c.onset) add_onset(p, static_cast<uint32_t>(seed), 2.0);
    expect_linear_equals_exact(p, *linear, *exact);
  }
}

// Scores and parameters at the 1e4 and 1e3 scales (Q / q out of range: the
// per-term fallback; EA / ED under 2^-900: always-exact entries), -inf
// transitions off the diagonal and -inf durations (entries of scale 0), and
// one column of A 1000 nats under the rest.
TEST(CudaFastMarginals, ExtremeAndMinusInfInputsEqualTheExactKernel) {
  SKIP_WITHOUT_GPU();
  auto linear = make_cuda_backend();
  auto exact = exact_marginals_backend();
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int variant = 0; variant < 5; ++variant) {
    SCOPED_TRACE(::testing::Message() << "variant " << variant);
    Options o;
    if (variant == 0) o.score_sd = 1e4;
    if (variant == 1) o.score_sd = 1e3, o.param_sd = 1e3;
    const int64_t B = 4, T = 400, K = 20, C = 9;
    Problem p = make_problem(B, T, K, C, 8800 + variant, o);
    if (variant == 2) {
      for (int64_t i = 0; i < C; ++i)
        for (int64_t j = 0; j < C; ++j)
          if (i != j) p.A[i * C + j] = ninf;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < p.lengths[b]; ++t) p.labels[b * T + t] = static_cast<int32_t>(b % C);
    }
    if (variant == 3) {
      for (int64_t k = 1; k < K; k += 2) p.D[k * C + 2] = ninf;  // label 2: odd durations only
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < p.lengths[b]; ++t) p.labels[b * T + t] = 0;
    }
    if (variant == 4) {
      for (int64_t i = 1; i < C; ++i) p.A[i * C + 3] -= 1000.0f;  // EA[i][3] = e^-1000: exact entries
      for (int64_t k = 0; k < K; k += 3) p.D[k * C + 5] -= 1000.0f;
    }
    expect_linear_equals_exact(p, *linear, *exact);
  }
}

// Reruns of the linear marginals are bitwise identical (with the fallback).
TEST(CudaFastMarginals, BitwiseReruns) {
  SKIP_WITHOUT_GPU();
  auto linear = make_cuda_backend();
  Options o;
  o.score_sd = 1e3;
  for (const Problem& p : {make_problem(8, 500, 30, 39, 199), make_problem(4, 300, 16, 11, 198, o)}) {
    const GpuResult a = run_gpu(*linear, p, 0.125, true, false);
    const GpuResult b = run_gpu(*linear, p, 0.125, true, false);
    EXPECT_EQ(0, std::memcmp(a.g_A.data(), b.g_A.data(), a.g_A.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(a.g_D.data(), b.g_D.data(), a.g_D.size() * sizeof(float)));
  }
}

TEST(CudaFastMarginals, UnknownKnobValueIsOneLine) {
  SKIP_WITHOUT_GPU();
  setenv("TIMITSEG_CUDA_MARGINALS", "fastest", 1);
  try {
    (void)make_cuda_backend();
    ADD_FAILURE() << "no error for TIMITSEG_CUDA_MARGINALS=fastest";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ("TIMITSEG_CUDA_MARGINALS must be 'linear' or 'exact', got 'fastest'", e.what());
  }
  unsetenv("TIMITSEG_CUDA_MARGINALS");
}

// The four environment knobs share one parser (crf/cuda/backend.cu
// env_knob): an unknown value is one line naming the knob, the values it
// takes and the value given; an empty value is the default.
TEST(CudaFastKnobs, EveryUnknownValueIsOneLine) {
  SKIP_WITHOUT_GPU();
  const struct {
    const char* name;
    const char* bad;
    const char* message;
  } knobs[] = {
      {"TIMITSEG_CUDA_LANES", "6", "TIMITSEG_CUDA_LANES must be 4, 8, 16 or 32, got '6'"},
      {"TIMITSEG_CUDA_RECURRENCE", "Exact", "TIMITSEG_CUDA_RECURRENCE must be 'fast' or 'exact', got 'Exact'"},
      {"TIMITSEG_CUDA_MARGINALS", "fastest", "TIMITSEG_CUDA_MARGINALS must be 'linear' or 'exact', got 'fastest'"},
      {"TIMITSEG_CUDA_RING", "exact", "TIMITSEG_CUDA_RING must be 'shared' or 'global', got 'exact'"},
  };
  for (const auto& k : knobs) {
    setenv(k.name, k.bad, 1);
    try {
      (void)make_cuda_backend();
      ADD_FAILURE() << "no error for " << k.name << "=" << k.bad;
    } catch (const std::invalid_argument& e) {
      EXPECT_STREQ(k.message, e.what());
    }
    setenv(k.name, "", 1);
    EXPECT_NO_THROW((void)make_cuda_backend()) << k.name << " empty";
    unsetenv(k.name);
  }
}

}  // namespace
}  // namespace timitseg::crf::testing
