#include "crf/cumsum.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace timitseg::crf {
namespace {
void check_lengths(int64_t B, int64_t T, int64_t C, const int32_t* lengths, const char* who) {
  if (B < 1 || T < 1 || C < 1)
    throw std::invalid_argument(std::string(who) + ": dims must be >= 1, got B=" + std::to_string(B) +
                                " T=" + std::to_string(T) + " C=" + std::to_string(C));
  for (int64_t b = 0; b < B; ++b)
    if (lengths[b] < 1 || lengths[b] > T)
      throw std::invalid_argument(std::string(who) + ": lengths[" + std::to_string(b) + "] = " +
                                  std::to_string(lengths[b]) + " is outside [1, T=" + std::to_string(T) + "]");
}
}  // namespace

template <class F>
void centered_cumsum_forward(int64_t B, int64_t T, int64_t C, const F* x, const int32_t* lengths, F* cum) {
  check_lengths(B, T, C, lengths, "centered_cumsum_forward");
  std::vector<double> mean(C), run(C);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t L = lengths[b];
    const F* xb = x + b * T * C;
    F* cb = cum + b * (T + 1) * C;
    std::fill(mean.begin(), mean.end(), 0.0);
    for (int64_t t = 0; t < L; ++t)
      for (int64_t c = 0; c < C; ++c) mean[c] += static_cast<double>(xb[t * C + c]);
    for (int64_t c = 0; c < C; ++c) mean[c] /= static_cast<double>(L);
    std::fill(run.begin(), run.end(), 0.0);
    for (int64_t c = 0; c < C; ++c) cb[c] = F(0);
    for (int64_t t = 0; t < L; ++t)
      for (int64_t c = 0; c < C; ++c) {
        run[c] += static_cast<double>(xb[t * C + c]) - mean[c];
        cb[(t + 1) * C + c] = static_cast<F>(run[c]);
      }
    for (int64_t i = (L + 1) * C; i < (T + 1) * C; ++i) cb[i] = F(0);
  }
}

void running_centered_cumsum_forward(int64_t T, int64_t C, const float* x, int64_t L, int64_t half, float* cum) {
  if (L < 1 || L > T || half < 0)
    throw std::invalid_argument("running_centered_cumsum_forward: need 1 <= L <= T and half >= 0, got L=" +
                                std::to_string(L) + " T=" + std::to_string(T) + " half=" + std::to_string(half));
  std::vector<double> sum(C, 0.0), run(C, 0.0);
  int64_t a = 0, b = std::min(L, half + 1);  // the window [a, b) of frame 0
  for (int64_t t = a; t < b; ++t)
    for (int64_t c = 0; c < C; ++c) sum[c] += static_cast<double>(x[t * C + c]);
  for (int64_t c = 0; c < C; ++c) cum[c] = 0.0f;
  for (int64_t t = 0; t < L; ++t) {
    const int64_t na = std::max<int64_t>(0, t - half), nb = std::min(L, t + half + 1);  // frame t's window
    for (; b < nb; ++b)
      for (int64_t c = 0; c < C; ++c) sum[c] += static_cast<double>(x[b * C + c]);
    for (; a < na; ++a)
      for (int64_t c = 0; c < C; ++c) sum[c] -= static_cast<double>(x[a * C + c]);
    const double n = static_cast<double>(b - a);
    for (int64_t c = 0; c < C; ++c) {
      run[c] += static_cast<double>(x[t * C + c]) - sum[c] / n;
      cum[(t + 1) * C + c] = static_cast<float>(run[c]);
    }
  }
  for (int64_t i = (L + 1) * C; i < (T + 1) * C; ++i) cum[i] = 0.0f;
}

template <class F>
void centered_cumsum_backward(int64_t B, int64_t T, int64_t C, const F* grad_cum, const int32_t* lengths,
                              F* grad_x) {
  check_lengths(B, T, C, lengths, "centered_cumsum_backward");
  std::vector<double> g, mean(C), run(C);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t L = lengths[b];
    const F* gb = grad_cum + b * (T + 1) * C;
    F* xb = grad_x + b * T * C;
    g.assign(L * C, 0.0);
    std::fill(run.begin(), run.end(), 0.0);
    for (int64_t t = L - 1; t >= 0; --t)
      for (int64_t c = 0; c < C; ++c) {
        run[c] += static_cast<double>(gb[(t + 1) * C + c]);
        g[t * C + c] = run[c];
      }
    std::fill(mean.begin(), mean.end(), 0.0);
    for (int64_t t = 0; t < L; ++t)
      for (int64_t c = 0; c < C; ++c) mean[c] += g[t * C + c];
    for (int64_t c = 0; c < C; ++c) mean[c] /= static_cast<double>(L);
    for (int64_t t = 0; t < L; ++t)
      for (int64_t c = 0; c < C; ++c) xb[t * C + c] = static_cast<F>(g[t * C + c] - mean[c]);
    for (int64_t i = L * C; i < T * C; ++i) xb[i] = F(0);
  }
}

template <class F>
double l2_penalty(double reg, int64_t C, int64_t K, const F* transition, const F* duration_bias, F* grad_transition,
                  F* grad_duration_bias) {
  // -inf entries are forbidden transitions/durations (constants, see
  // validate_host): excluded from the penalty, their gradient is left as is.
  auto add = [reg](int64_t n, const F* v, F* grad) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const double x = static_cast<double>(v[i]);
      if (x == -std::numeric_limits<double>::infinity()) continue;
      sum += x * x;
      if (grad) grad[i] = static_cast<F>(static_cast<double>(grad[i]) + 2.0 * reg * x);
    }
    return sum;
  };
  const double sum = add(C * C, transition, grad_transition) + add(K * C, duration_bias, grad_duration_bias);
  return reg * sum;
}

template void centered_cumsum_forward<float>(int64_t, int64_t, int64_t, const float*, const int32_t*, float*);
template void centered_cumsum_forward<double>(int64_t, int64_t, int64_t, const double*, const int32_t*, double*);
template void centered_cumsum_backward<float>(int64_t, int64_t, int64_t, const float*, const int32_t*, float*);
template void centered_cumsum_backward<double>(int64_t, int64_t, int64_t, const double*, const int32_t*, double*);
template double l2_penalty<float>(double, int64_t, int64_t, const float*, const float*, float*, float*);
template double l2_penalty<double>(double, int64_t, int64_t, const double*, const double*, double*, double*);

}  // namespace timitseg::crf
