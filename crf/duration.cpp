// crf.duration_model = lognormal: the derived duration table and its gradient (crf/duration.h).
#include "crf/duration.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "crf/backend.h"
#include "crf/segments.h"

namespace timitseg::crf {

template <class F>
void lognormal_duration_table(int K, int C, const F* ln, F* table) {
  const F* mu = ln;
  const F* log_sigma = ln + C;
  const F* offset = ln + 2 * C;
  for (int c = 0; c < C; ++c) {
    const double ls = std::clamp(static_cast<double>(log_sigma[c]), kMinLogSigma, kMaxLogSigma);
    const double inv_var = std::exp(-2.0 * ls);
    for (int k = 0; k < K; ++k) {
      const double log_d = std::log(static_cast<double>(k + 1));
      const double z = log_d - static_cast<double>(mu[c]);
      table[static_cast<size_t>(k) * C + c] =
          static_cast<F>(static_cast<double>(offset[c]) - log_d - ls - 0.5 * z * z * inv_var);
    }
  }
}
template void lognormal_duration_table<float>(int, int, const float*, float*);
template void lognormal_duration_table<double>(int, int, const double*, double*);

template <class F>
void lognormal_duration_backward(int K, int C, const F* ln, F* grad_table, F* grad_ln) {
  const F* mu = ln;
  const F* log_sigma = ln + C;
  for (int c = 0; c < C; ++c) {
    const double raw = static_cast<double>(log_sigma[c]);
    const bool inside = raw > kMinLogSigma && raw < kMaxLogSigma;  // the clamp's gradient: 0 outside
    const double ls = std::clamp(raw, kMinLogSigma, kMaxLogSigma);
    const double inv_var = std::exp(-2.0 * ls);
    double g_mu = 0, g_ls = 0, g_off = 0;
    for (int k = 0; k < K; ++k) {
      F& gt = grad_table[static_cast<size_t>(k) * C + c];
      const double g = static_cast<double>(gt);
      const double z = std::log(static_cast<double>(k + 1)) - static_cast<double>(mu[c]);
      g_mu += g * z * inv_var;             // d table / d mu = (log d - mu) / sigma^2
      g_ls += g * (z * z * inv_var - 1.0); // d table / d ls = (log d - mu)^2 / sigma^2 - 1
      g_off += g;                          // d table / d offset = 1
      gt = 0;
    }
    grad_ln[c] = static_cast<F>(g_mu);
    grad_ln[C + c] = inside ? static_cast<F>(g_ls) : F(0);
    grad_ln[2 * C + c] = static_cast<F>(g_off);
  }
}
template void lognormal_duration_backward<float>(int, int, const float*, float*, float*);
template void lognormal_duration_backward<double>(int, int, const double*, double*, double*);

void check_class_labels(const char* what, const std::vector<std::vector<int32_t>>& class_labels, int C) {
  for (size_t u = 0; u < class_labels.size(); ++u) {
    const std::vector<int32_t>& y = class_labels[u];
    for (size_t t = 0; t < y.size(); ++t)
      if (y[t] < 0 || y[t] >= C)
        throw std::invalid_argument(std::string(what) + ": utterance " + std::to_string(u) + ", frame " +
                                    std::to_string(t) + ": label " + std::to_string(y[t]) + " outside [0, " +
                                    std::to_string(C) + ")");
  }
}

std::vector<float> fit_lognormal_durations(const std::vector<std::vector<int32_t>>& class_labels, int K, int C) {
  if (K < 1 || C < 1)
    throw std::invalid_argument("fit_lognormal_durations: K and C must be >= 1, got K " + std::to_string(K) +
                                ", C " + std::to_string(C));
  check_class_labels("fit_lognormal_durations", class_labels, C);
  std::vector<double> n(C, 0), s1(C, 0), s2(C, 0);
  double N = 0, S1 = 0, S2 = 0;
  for (size_t u = 0; u < class_labels.size(); ++u) {
    const std::vector<int32_t>& y = class_labels[u];
    for (const Segment& g : gold_segments(y.data(), static_cast<int32_t>(y.size()), K)) {
      const double x = std::log(static_cast<double>(g.duration));
      n[g.label] += 1;
      s1[g.label] += x;
      s2[g.label] += x * x;
      N += 1;
      S1 += x;
      S2 += x * x;
    }
  }
  const double min_sigma = std::exp(kMinLogSigma), max_sigma = std::exp(kMaxLogSigma);
  auto fit = [&](double cnt, double a, double b, double& mu, double& sigma) {
    mu = a / cnt;
    const double var = std::max(0.0, b / cnt - mu * mu);
    sigma = std::sqrt(var);
  };
  double pooled_mu = 0, pooled_sigma = 1;  // no segments at all: log d ~ N(0, 1)
  if (N >= 1) fit(N, S1, S2, pooled_mu, pooled_sigma);  // zero spread: sigma floored at 0.05 below
  std::vector<float> ln(static_cast<size_t>(3) * C, 0.f);
  for (int c = 0; c < C; ++c) {
    double mu = pooled_mu, sigma = pooled_sigma;
    if (n[c] >= 2) {
      double m = 0, s = 0;
      fit(n[c], s1[c], s2[c], m, s);
      if (s > 0) mu = m, sigma = s;
    }
    ln[c] = static_cast<float>(mu);
    ln[C + c] = static_cast<float>(std::log(std::clamp(sigma, min_sigma, max_sigma)));
    ln[2 * C + c] = 0.f;
  }
  return ln;
}

}  // namespace timitseg::crf
