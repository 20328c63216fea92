// Finite differences on the whole stack in float64:
//   x [B][T][C] -> centered cumsum -> semi-CRF mean NLL (reference, float64) + L2 penalty
// against the analytic gradients of centered_cumsum_backward, reference::backward_f64
// and l2_penalty. Plus direct checks of the cumsum layer and the penalty.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "crf/cumsum.h"
#include "crf/reference/reference.h"
#include "helpers.h"

namespace timitseg::crf::testing {
namespace {

struct Stack {
  Dims dims;
  std::vector<int32_t> lengths, labels;
  double reg;
  std::vector<double> x, A, D, s, e;

  // loss = (1/B) sum_b NLL_b + reg (||A||^2 + ||D||^2). Gradients when g* != nullptr.
  double loss(std::vector<double>* gx, std::vector<double>* gA, std::vector<double>* gD, std::vector<double>* gs,
              std::vector<double>* ge) const {
    const int64_t B = dims.B, T = dims.T, K = dims.K, C = dims.C;
    std::vector<double> cum(B * (T + 1) * C);
    centered_cumsum_forward<double>(B, T, C, x.data(), lengths.data(), cum.data());
    reference::ParamsF64 p{cum.data(), A.data(), D.data(), s.data(), e.data(), lengths.data()};
    std::vector<double> lz(B), gold(B), gc(B * (T + 1) * C), ga(C * C), gd(K * C), gss(C), gee(C);
    const double scale = 1.0 / static_cast<double>(B);
    reference::backward_f64(dims, p, labels.data(), scale, lz.data(), gold.data(),
                            reference::GradsF64{gc.data(), ga.data(), gd.data(), gss.data(), gee.data()});
    double l = 0.0;
    for (int64_t b = 0; b < B; ++b) l += scale * (lz[b] - gold[b]);
    l += l2_penalty<double>(reg, C, K, A.data(), D.data(), ga.data(), gd.data());
    if (gx) {
      gx->assign(B * T * C, 0.0);
      centered_cumsum_backward<double>(B, T, C, gc.data(), lengths.data(), gx->data());
      *gA = ga, *gD = gd, *gs = gss, *ge = gee;
    }
    return l;
  }
};

TEST(StackFiniteDifferences, CumsumCrfPenaltyFloat64) {
  Stack st;
  st.dims = Dims{3, 8, 3, 3};
  st.lengths = {8, 5, 1};
  st.reg = 0.05;
  const Problem pb = random_problem(st.dims, 21, st.lengths, true);
  st.labels = pb.labels;
  std::mt19937 rng(4);
  std::normal_distribution<double> n(0.0, 1.0);
  const int64_t B = 3, T = 8, K = 3, C = 3;
  for (int64_t i = 0; i < B * T * C; ++i) st.x.push_back(n(rng));
  for (int64_t i = 0; i < C * C; ++i) st.A.push_back(0.5 * n(rng));
  for (int64_t i = 0; i < K * C; ++i) st.D.push_back(0.5 * n(rng));
  for (int64_t i = 0; i < C; ++i) st.s.push_back(0.5 * n(rng)), st.e.push_back(0.5 * n(rng));
  std::vector<double> gx, gA, gD, gs, ge;
  st.loss(&gx, &gA, &gD, &gs, &ge);

  const double h = 1e-5;
  auto check = [&](std::vector<double>& param, const std::vector<double>& grad, const char* name) {
    for (size_t i = 0; i < param.size(); ++i) {
      const double keep = param[i];
      param[i] = keep + h;
      const double up = st.loss(nullptr, nullptr, nullptr, nullptr, nullptr);
      param[i] = keep - h;
      const double down = st.loss(nullptr, nullptr, nullptr, nullptr, nullptr);
      param[i] = keep;
      const double fd = (up - down) / (2 * h);
      EXPECT_NEAR(grad[i], fd, 1e-7 + 1e-6 * std::fabs(fd)) << name << "[" << i << "]";
    }
  };
  check(st.x, gx, "x");
  check(st.A, gA, "transition");
  check(st.D, gD, "duration_bias");
  check(st.s, gs, "start");
  check(st.e, ge, "end");
  // Padding frames of x: exactly zero gradient.
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = st.lengths[b] * C; i < T * C; ++i) EXPECT_EQ(gx[b * T * C + i], 0.0);
}

TEST(Cumsum, ForwardMatchesDefinitionAndIgnoresPadding) {
  const int64_t B = 2, T = 5, C = 2;
  std::vector<int32_t> lengths{5, 3};
  std::vector<double> x{1, 2, 3, 4, 5, 6, 7, 8, 9, 10,  // b=0
                        1, 0, 2, 0, 6, 3, 1e30, -1e30, 5, 5};
  std::vector<double> cum(B * (T + 1) * C, -7.0);
  centered_cumsum_forward<double>(B, T, C, x.data(), lengths.data(), cum.data());
  // b=1, c=0: frames 1,2,6 -> mean 3 -> centered -2,-1,3 -> cum 0,-2,-3,0; c=1: 0,0,3 -> mean 1 -> -1,-1,2 -> 0,-1,-2,0.
  const std::vector<double> want1{0, 0, -2, -1, -3, -2, 0, 0, 0, 0, 0, 0};
  for (size_t i = 0; i < want1.size(); ++i) EXPECT_DOUBLE_EQ(cum[12 + i], want1[i]) << i;
  // b=0: last row is 0 (zero-centered), first row 0.
  EXPECT_DOUBLE_EQ(cum[0], 0.0);
  EXPECT_NEAR(cum[5 * 2 + 0], 0.0, 1e-12);
  EXPECT_NEAR(cum[5 * 2 + 1], 0.0, 1e-12);
  EXPECT_DOUBLE_EQ(cum[1 * 2 + 0], 1.0 - 5.0);
}

// The running-mean centring of a long recording (crf::running_centered_cumsum_forward):
// hand-computed on a tiny case; against the definition evaluated directly in
// float64 (each frame's window mean summed afresh) on random scores, for
// several half-widths; a window covering the utterance is bitwise
// centered_cumsum_forward; padding rows are 0; bad arguments are one line.
TEST(Cumsum, RunningCentredMatchesTheDefinitionAndWideWindowsAreTheWholeMean) {
  {  // C = 1, x = 1 2 3 10, half = 1: windows {0,1} {0,1,2} {1,2,3} {2,3}, means 1.5 2 5 6.5
    const std::vector<float> x{1, 2, 3, 10};
    std::vector<float> cum(6 * 1, -7.f);  // T = 5 (one padding frame)
    const std::vector<float> x5{1, 2, 3, 10, 99};
    running_centered_cumsum_forward(5, 1, x5.data(), 4, 1, cum.data());
    // xc = -0.5 0 -2 3.5 -> cum 0 -0.5 -0.5 -2.5 1 | padding 0
    const std::vector<float> want{0.f, -0.5f, -0.5f, -2.5f, 1.f, 0.f};
    EXPECT_EQ(cum, want);
  }
  std::mt19937_64 rng(5);
  std::normal_distribution<float> n01(0.f, 1.f);
  const int64_t T = 400, C = 3, L = 371;
  std::vector<float> x(static_cast<size_t>(T * C));
  for (int64_t i = 0; i < T * C; ++i) x[i] = 5.f * n01(rng) + static_cast<float>(i % C);  // per-class offsets
  for (int64_t half : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{50}, int64_t{200}}) {
    std::vector<float> cum(static_cast<size_t>((T + 1) * C), -7.f);
    running_centered_cumsum_forward(T, C, x.data(), L, half, cum.data());
    double worst = 0;
    for (int64_t c = 0; c < C; ++c) {
      double run = 0;  // the definition, each window's mean summed afresh in float64
      EXPECT_EQ(cum[c], 0.f);
      for (int64_t t = 0; t < L; ++t) {
        const int64_t a = std::max<int64_t>(0, t - half), b = std::min<int64_t>(L, t + half + 1);
        double m = 0;
        for (int64_t u = a; u < b; ++u) m += x[u * C + c];
        run += x[t * C + c] - m / static_cast<double>(b - a);
        worst = std::max(worst, std::fabs(run - static_cast<double>(cum[(t + 1) * C + c])));
      }
      for (int64_t t = L + 1; t <= T; ++t) EXPECT_EQ(cum[t * C + c], 0.f) << "padding row " << t;
    }
    EXPECT_LT(worst, 1e-3) << "half " << half;  // float32 storage of values up to ~100
    if (half == 0) EXPECT_LT(worst, 1e-12);       // each frame its own mean: every increment is 0
  }
  std::vector<float> whole(static_cast<size_t>((T + 1) * C)), wide(whole.size());
  const int32_t len = static_cast<int32_t>(L);
  centered_cumsum_forward<float>(1, T, C, x.data(), &len, whole.data());
  for (int64_t half : {L - 1, L, int64_t{100000}}) {
    running_centered_cumsum_forward(T, C, x.data(), L, half, wide.data());
    EXPECT_EQ(wide, whole) << "half " << half;
  }
  EXPECT_THROW(running_centered_cumsum_forward(T, C, x.data(), L, -1, wide.data()), std::invalid_argument);
  EXPECT_THROW(running_centered_cumsum_forward(T, C, x.data(), T + 1, 3, wide.data()), std::invalid_argument);
  EXPECT_THROW(running_centered_cumsum_forward(T, C, x.data(), 0, 3, wide.data()), std::invalid_argument);
}

TEST(Cumsum, BackwardPaddingGradientIsExactlyZeroFloat32) {
  const int64_t B = 2, T = 6, C = 3;
  std::vector<int32_t> lengths{6, 2};
  std::vector<float> g(B * (T + 1) * C, 1.5f), gx(B * T * C, 99.0f);
  centered_cumsum_backward<float>(B, T, C, g.data(), lengths.data(), gx.data());
  for (int64_t i = 2 * C; i < T * C; ++i) EXPECT_EQ(gx[T * C + i], 0.0f);
  // Valid frames: g = reverse cumsum (2 * 1.5, 1 * 1.5) -> centered +-0.75.
  EXPECT_FLOAT_EQ(gx[T * C + 0], 0.75f);
  EXPECT_FLOAT_EQ(gx[T * C + C], -0.75f);
  std::vector<int32_t> bad{6, 7};
  EXPECT_THROW(centered_cumsum_backward<float>(B, T, C, g.data(), bad.data(), gx.data()), std::invalid_argument);
  EXPECT_THROW(centered_cumsum_forward<float>(B, T, C, gx.data(), bad.data(), g.data()), std::invalid_argument);
}

TEST(Penalty, ValueAndGradientAdded) {
  const std::vector<float> A{1, -2, 3, 0.5f}, D{2, 1};
  std::vector<float> gA{1, 1, 1, 1}, gD{0, 0};
  const double v = l2_penalty<float>(0.1, 2, 1, A.data(), D.data(), gA.data(), gD.data());
  EXPECT_NEAR(v, 0.1 * (1 + 4 + 9 + 0.25 + 4 + 1), 1e-12);
  EXPECT_FLOAT_EQ(gA[1], 1.0f + 0.2f * -2.0f);
  EXPECT_FLOAT_EQ(gD[0], 0.4f);
  EXPECT_NEAR(l2_penalty<float>(0.1, 2, 1, A.data(), D.data(), nullptr, nullptr), v, 1e-12);
}

}  // namespace
}  // namespace timitseg::crf::testing
