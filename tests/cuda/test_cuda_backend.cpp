// Tests of the cuda semi-CRF backend against the float64 oracle
// (tests/cuda/oracle.h, itself checked against the shared brute-force
// enumeration of tests/support/crf_bruteforce.h).
// Every GPU test skips with a message when the machine has no CUDA device.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>

#include "tests/cuda/cuda_harness.h"
#include "tests/cuda/oracle.h"
#include "tests/support/crf_bruteforce.h"

namespace timitseg::crf::testing {
namespace {

constexpr double kTol = 1e-5;

// ---------------------------------------------------------------------------
// The oracle against brute force (CPU only, runs everywhere).
TEST(Oracle, MatchesBruteForceEnumeration) {
  int checked = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    std::mt19937_64 rng(seed);
    const int64_t T = 1 + rng() % 6, K = 1 + rng() % 4, C = 1 + rng() % 3, B = 2;
    Options o;
    o.max_run = 3;
    Problem p = make_problem(B, T, K, C, seed, o);
    const double scale = 0.5;
    const Result r = oracle(p, scale, true, 1);
    const Expected bf = brute_force(p, scale, true);  // tests/support/crf_bruteforce.h
    for (int64_t b = 0; b < B; ++b) {
      const int64_t L = p.lengths[b];
      const double lz = bf.log_z[b], best = bf.vscore[b];
      EXPECT_NEAR(r.logz[b], lz, 1e-10 * std::max(1.0, std::abs(lz)));
      EXPECT_NEAR(r.vscore[b], best, 1e-10 * std::max(1.0, std::abs(best)));
      EXPECT_NEAR(score_of(p, b, r.vsegs[b]), best, 1e-10 * std::max(1.0, std::abs(best)));
      for (int64_t t = 1; t <= L; ++t) EXPECT_NEAR(r.bpost[b * (T + 1) + t], bf.bpost[b * (T + 1) + t], 1e-10);
      for (const Seg& g : gold_segments(p, b)) {
        EXPECT_GE(g.dur, 1);
        EXPECT_LE(g.dur, K);
      }
    }
    EXPECT_LT(rel_err(r.g_cum, bf.g_cum, 1e-4), 1e-10);
    EXPECT_LT(rel_err(r.g_A, bf.g_A, 1e-4), 1e-10);
    EXPECT_LT(rel_err(r.g_D, bf.g_D, 1e-4), 1e-10);
    EXPECT_LT(rel_err(r.g_s, bf.g_s, 1e-4), 1e-10);
    EXPECT_LT(rel_err(r.g_e, bf.g_e, 1e-4), 1e-10);
    ++checked;
  }
  EXPECT_EQ(checked, 40);
}

// ---------------------------------------------------------------------------
TEST(CudaDevice, NoDeviceIsOneClearLine) {
  if (timitseg::cuda::device_count() == 0) {
    try {
      make_cuda_backend();
      FAIL() << "make_cuda_backend succeeded without a device";
    } catch (const std::runtime_error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("no CUDA device was found"), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
    GTEST_SKIP() << "no CUDA device was found: checked the error message only";
  }
  auto be = make_cuda_backend();
  EXPECT_EQ(be->name(), "cuda");
  EXPECT_TRUE(be->on_device());
  std::printf("device: %s\n", timitseg::cuda::device_name().c_str());
}

// Valid segmentation of [0, L) with durations in [1,K] and labels in [0,C).
void expect_valid_segmentation(const std::vector<Seg>& segs, int64_t L, int64_t K, int64_t C, int64_t b) {
  int64_t t = 0;
  for (const Seg& s : segs) {
    ASSERT_EQ(s.start, t) << "utterance " << b;
    ASSERT_GE(s.dur, 1);
    ASSERT_LE(s.dur, K);
    ASSERT_GE(s.label, 0);
    ASSERT_LT(s.label, C);
    t += s.dur;
  }
  ASSERT_EQ(t, L) << "utterance " << b;
}

void expect_agreement(const Problem& p, const GpuResult& g, const Result& o, bool with_labels, bool all_entry_points,
                      double tol = kTol) {
  const int64_t B = p.dims.B, T = p.dims.T, K = p.dims.K, C = p.dims.C;
  EXPECT_LT(rel_err(g.logz, o.logz), tol);
  for (int64_t b = 0; b < B; ++b)
    EXPECT_NEAR(g.logz[b], o.logz[b], tol * std::max(1.0, std::abs(o.logz[b]))) << "log Z of utterance " << b;
  if (with_labels) {
    for (int64_t b = 0; b < B; ++b)
      EXPECT_NEAR(g.gold[b], o.gold[b], 1e-9 * std::max(1.0, std::abs(o.gold[b]))) << "gold of utterance " << b;
  }
  EXPECT_LT(rel_err(g.g_cum, o.g_cum), tol) << "grad cum_scores";
  EXPECT_LT(rel_err(g.g_A, o.g_A), tol) << "grad transition";
  EXPECT_LT(rel_err(g.g_D, o.g_D), tol) << "grad duration_bias";
  EXPECT_LT(rel_err(g.g_s, o.g_s), tol) << "grad start";
  EXPECT_LT(rel_err(g.g_e, o.g_e), tol) << "grad end";
  // Padding rows of the gradient are exactly zero.
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = p.lengths[b] + 1; t <= T; ++t)
      for (int64_t c = 0; c < C; ++c) ASSERT_EQ(g.g_cum[p.row(b, t) + c], 0.0f) << b << "," << t << "," << c;
  if (!all_entry_points) return;
  // log_partition alone and gold_score alone give the same bits as backward.
  EXPECT_EQ(0, std::memcmp(g.logz.data(), g.logz_fwd_only.data(), B * sizeof(double)));
  if (with_labels) EXPECT_EQ(0, std::memcmp(g.gold.data(), g.gold_only.data(), B * sizeof(double)));
  for (int64_t b = 0; b < B; ++b) {
    const double ref = o.vscore[b];
    const double tie_tol = 1e-10 * std::max(1.0, std::abs(ref));
    EXPECT_NEAR(g.vscore[b], ref, tie_tol) << "Viterbi score of utterance " << b;
    expect_valid_segmentation(g.vsegs[b], p.lengths[b], K, C, b);
    if (!(g.vsegs[b] == o.vsegs[b])) {
      // Only a genuine tie may differ: the GPU's path must score the optimum.
      EXPECT_NEAR(score_of(p, b, g.vsegs[b]), ref, tie_tol) << "Viterbi segments of utterance " << b;
    }
  }
  EXPECT_LT(rel_err(g.bpost, o.bpost), tol) << "boundary posteriors";
  for (int64_t b = 0; b < B; ++b) {
    EXPECT_NEAR(g.bpost[b * (T + 1) + p.lengths[b]], 1.0, 1e-9);
    EXPECT_EQ(g.bpost[b * (T + 1)], 0.0);
  }
}

struct Config {
  int64_t B, T, K, C;
};

void check_configs(const std::vector<Config>& cfgs, uint64_t seed0) {
  SKIP_WITHOUT_GPU();
  auto be = make_cuda_backend();
  uint64_t seed = seed0;
  for (const Config& c : cfgs) {
    SCOPED_TRACE(::testing::Message() << "B=" << c.B << " T=" << c.T << " K=" << c.K << " C=" << c.C);
    const Problem p = make_problem(c.B, c.T, c.K, c.C, ++seed);
    const double scale = 1.0 / static_cast<double>(c.B);
    for (bool with_labels : {true, false}) {
      const GpuResult g = run_gpu(*be, p, scale, with_labels, with_labels);
      const Result o = oracle(p, scale, with_labels);
      expect_agreement(p, g, o, with_labels, with_labels);
    }
  }
}

// Small sizes (also the compute-sanitizer set): T = 1, K > T, C = 1, K = 64.
TEST(CudaAgreement, Small) {
  check_configs({{1, 1, 1, 1}, {2, 1, 5, 3}, {3, 5, 8, 3}, {4, 37, 6, 5}, {5, 20, 3, 1}, {3, 50, 64, 7}, {2, 30, 4, 33}},
                100);
}

// Training-like and edge sizes: C = 39, 127, 128 (not / a multiple of 32),
// K = 1, 30, 64, B = 256, lengths varying inside each batch.
TEST(CudaAgreement, Medium) {
  check_configs({{16, 200, 30, 39},
                 {8, 64, 64, 127},
                 {4, 150, 12, 128},
                 {256, 24, 5, 13},
                 {32, 400, 1, 39},
                 {2, 3000, 30, 39},
                 {3, 90, 40, 100},
                 {2, 600, 500, 40}},  // (K+1) C too large for the shared-memory ring: global-memory path
                200);
}

// The global-memory path of the recurrence forced on sizes whose ring would fit.
TEST(CudaAgreement, GlobalMemoryRing) {
  SKIP_WITHOUT_GPU();
  setenv("TIMITSEG_CUDA_RING", "global", 1);
  auto be = make_cuda_backend();
  unsetenv("TIMITSEG_CUDA_RING");
  uint64_t seed = 300;
  for (const Config& c : std::vector<Config>{{1, 1, 1, 1}, {3, 5, 8, 3}, {6, 120, 30, 39}, {3, 50, 64, 70}}) {
    SCOPED_TRACE(::testing::Message() << "B=" << c.B << " T=" << c.T << " K=" << c.K << " C=" << c.C);
    const Problem p = make_problem(c.B, c.T, c.K, c.C, ++seed);
    const double scale = 1.0 / static_cast<double>(c.B);
    const GpuResult g = run_gpu(*be, p, scale, true, true);
    expect_agreement(p, g, oracle(p, scale, true), true, true);
  }
}

// Long utterances: B = 8, T = 100000 (backward memory is O(B T C)).
TEST(CudaAgreement, LongT100000) {
  SKIP_WITHOUT_GPU();
  auto be = make_cuda_backend();
  const Problem p = make_problem(8, 100000, 30, 39, 777);
  const auto t0 = std::chrono::steady_clock::now();
  const GpuResult g = run_gpu(*be, p, 1.0 / 8, true, true);
  const auto t1 = std::chrono::steady_clock::now();
  const Result o = oracle(p, 1.0 / 8, true);
  const auto t2 = std::chrono::steady_clock::now();
  std::printf("T=100000 B=8: workspace %.1f MiB, gpu (all entry points) %.2f s, oracle %.2f s\n",
              be->workspace_bytes(p.dims) / 1048576.0, std::chrono::duration<double>(t1 - t0).count(),
              std::chrono::duration<double>(t2 - t1).count());
  expect_agreement(p, g, o, true, true);
  EXPECT_TRUE(all_finite(g.g_cum));
}

// ---------------------------------------------------------------------------
TEST(CudaDeterminism, BitwiseIdenticalRuns) {
  SKIP_WITHOUT_GPU();
  auto be = make_cuda_backend();
  for (const Config& c : std::vector<Config>{{32, 300, 30, 39}, {4, 5000, 16, 61}}) {
    const Problem p = make_problem(c.B, c.T, c.K, c.C, 4242 + c.T);
    const GpuResult a = run_gpu(*be, p, 1.0 / c.B, true);
    const GpuResult b = run_gpu(*be, p, 1.0 / c.B, true);
    auto same = [](const auto& x, const auto& y) {
      return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(x[0])) == 0;
    };
    EXPECT_TRUE(same(a.logz, b.logz));
    EXPECT_TRUE(same(a.gold, b.gold));
    EXPECT_TRUE(same(a.g_cum, b.g_cum));
    EXPECT_TRUE(same(a.g_A, b.g_A));
    EXPECT_TRUE(same(a.g_D, b.g_D));
    EXPECT_TRUE(same(a.g_s, b.g_s));
    EXPECT_TRUE(same(a.g_e, b.g_e));
    EXPECT_TRUE(same(a.vscore, b.vscore));
    EXPECT_TRUE(same(a.bpost, b.bpost));
    for (int64_t i = 0; i < c.B; ++i) EXPECT_TRUE(a.vsegs[i] == b.vsegs[i]);
  }
}

// ---------------------------------------------------------------------------
// >= 1000 seeds at training-like magnitudes: no non-finite value, NLL >= 0,
// and every 50th seed against the oracle.
TEST(CudaNeverNaN, ThousandSeeds) {
  SKIP_WITHOUT_GPU();
  auto be = make_cuda_backend();
  int compared = 0;
  for (uint64_t seed = 0; seed < 1000; ++seed) {
    std::mt19937_64 rng(seed * 7919 + 1);
    const int64_t B = 1 + rng() % 6, T = 1 + rng() % 80, K = 1 + rng() % 24, C = 1 + rng() % 40;
    Options o;
    o.score_sd = 3.0;
    o.param_sd = 1.0;
    const Problem p = make_problem(B, T, K, C, seed, o);
    const GpuResult g = run_gpu(*be, p, 1.0 / B, true, false);
    ASSERT_TRUE(all_finite(g.logz) && all_finite(g.gold) && all_finite(g.g_cum) && all_finite(g.g_A) &&
                all_finite(g.g_D) && all_finite(g.g_s) && all_finite(g.g_e))
        << "non-finite output at seed " << seed;
    for (int64_t b = 0; b < B; ++b) ASSERT_GE(g.logz[b] - g.gold[b], -1e-9 * std::abs(g.logz[b])) << "seed " << seed;
    if (seed % 50 == 0) {
      expect_agreement(p, g, oracle(p, 1.0 / B, true, 1), true, false);
      ++compared;
    }
  }
  EXPECT_EQ(compared, 20);
}

// Extreme inputs: scores and parameters at +-1e4 scale, transitions of -inf
// except the diagonal or except a single entry.
TEST(CudaNeverNaN, Extremes) {
  SKIP_WITHOUT_GPU();
  auto be = make_cuda_backend();
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int variant = 0; variant < 5; ++variant) {
    SCOPED_TRACE(::testing::Message() << "variant " << variant);
    Options o;
    int64_t B = 6, T = 120, K = 12, C = 9;
    if (variant == 0) o.score_sd = 1e4;
    if (variant == 1) o.score_sd = 1e4, o.param_sd = 1e4;
    if (variant == 4) T = 10, K = 10;  // single segments must be possible
    Problem p = make_problem(B, T, K, C, 9000 + variant, o);
    if (variant == 0 || variant == 1) {
      // exactly +-1e4 frame scores (before centring) in half of the utterances
      std::mt19937_64 rng(variant);
      for (int64_t b = 0; b < B; b += 2) {
        const int64_t L = p.lengths[b];
        std::vector<double> x(L * C);
        for (auto& v : x) v = (rng() & 1) ? 1e4 : -1e4;
        for (int64_t c = 0; c < C; ++c) {
          double mean = 0, run = 0;
          for (int64_t t = 0; t < L; ++t) mean += x[t * C + c];
          mean /= L;
          for (int64_t t = 0; t < L; ++t) run += x[t * C + c] - mean, p.cum[p.row(b, t + 1) + c] = static_cast<float>(run);
        }
      }
    }
    if (variant == 2 || variant == 3) {  // -inf except the diagonal; labels one run
      for (int64_t i = 0; i < C; ++i)
        for (int64_t j = 0; j < C; ++j)
          if (i != j) p.A[i * C + j] = ninf;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < p.lengths[b]; ++t) p.labels[b * T + t] = static_cast<int32_t>(b % C);
      if (variant == 3) {
        for (auto& v : p.cum) v = std::isnan(v) ? v : v * 1000.0f;
        for (int64_t c = 1; c < C; ++c) p.s[c] = ninf;  // only label 0 may start
        for (int64_t b = 0; b < B; ++b)
          for (int64_t t = 0; t < p.lengths[b]; ++t) p.labels[b * T + t] = 0;
      }
    }
    if (variant == 4) {  // -inf everywhere except A[1][0]; every utterance one run of label 0
      for (auto& v : p.A) v = ninf;
      p.A[1 * C + 0] = 0.5f;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < p.lengths[b]; ++t) p.labels[b * T + t] = 0;
    }
    const GpuResult g = run_gpu(*be, p, 1.0 / B, true);
    EXPECT_TRUE(all_finite(g.logz) && all_finite(g.gold) && all_finite(g.g_cum) && all_finite(g.g_A) &&
                all_finite(g.g_D) && all_finite(g.g_s) && all_finite(g.g_e) && all_finite(g.vscore) &&
                all_finite(g.bpost));
    expect_agreement(p, g, oracle(p, 1.0 / B, true), true, true);
  }
}

// ---------------------------------------------------------------------------
// Invalid input: one clear message naming the tensor and the index; the
// outputs are left untouched.
TEST(CudaErrors, InvalidInputNamedAndNothingWritten) {
  SKIP_WITHOUT_GPU();
  auto be = make_cuda_backend();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    const char* what;
    std::function<void(Problem&)> edit;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"NaN score", [&](Problem& p) { p.cum[p.row(1, 3) + 2] = nan; }, "cum_scores[1][3][2] = nan"},
      {"-inf score", [&](Problem& p) { p.cum[p.row(0, 5) + 0] = -inf; }, "cum_scores[0][5][0] = -inf"},
      {"+inf transition", [&](Problem& p) { p.A[2 * 4 + 1] = inf; }, "transition[2][1] = inf"},
      {"NaN duration", [&](Problem& p) { p.D[3 * 4 + 2] = nan; }, "duration_bias[3][2] = nan"},
      {"NaN start", [&](Problem& p) { p.s[3] = nan; }, "start[3] = nan"},
      {"+inf end", [&](Problem& p) { p.e[0] = inf; }, "end[0] = inf"},
      {"zero length", [&](Problem& p) { p.lengths[2] = 0; }, "lengths[2] = 0 is outside [1, T=10]"},
      {"long length", [&](Problem& p) { p.lengths[1] = 11; }, "lengths[1] = 11 is outside [1, T=10]"},
      {"bad label", [&](Problem& p) { p.labels[0 * 10 + 4] = 4; }, "labels[0][4] = 4 is outside [0, C=4)"},
      {"no finite path", [&](Problem& p) { for (auto& v : p.s) v = -inf; }, "log Z = -inf"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Options o;
    o.vary_lengths = false;
    Problem p = make_problem(3, 10, 5, 4, 31337, o);
    c.edit(p);
    DevProblem dp(p);
    const Params q = dp.params();
    Buffer ws(Memory::device, be->workspace_bytes(p.dims)), logz(Memory::device, 3 * 8),
        gcum(Memory::device, p.cum.size() * 4), gA(Memory::device, 16 * 4);
    poison(logz, 0x5a);
    poison(gcum, 0x5a);
    poison(gA, 0x5a);
    Grads g;
    g.cum_scores = gcum.as<float>();
    g.transition = gA.as<float>();
    try {
      be->backward(p.dims, q, dp.labels.as<int32_t>(), 1.0, logz.as<double>(), nullptr, g, ws.data());
      ADD_FAILURE() << "no error for " << c.what;
    } catch (const std::exception& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
    if (c.expect != "log Z = -inf") {  // validation fails before any output is written
      for (const Buffer* b : {&logz, &gcum, &gA}) {
        const auto bytes = from_device<unsigned char>(*b, b->capacity());
        for (unsigned char x : bytes) ASSERT_EQ(x, 0x5a);
      }
    }
  }
}

}  // namespace
}  // namespace timitseg::crf::testing
