#include "model/gaussian_head.h"

#include <cmath>
#include <stdexcept>

namespace timitseg::model {

GaussianStats::GaussianStats(int classes, int dim) : C(classes), D(dim) {
  if (C < 1 || D < 1)
    throw std::invalid_argument("GaussianStats: classes and dim must be >= 1, got " + std::to_string(C) + ", " +
                                std::to_string(D));
  n.assign(static_cast<size_t>(C), 0.0);
  s1.assign(static_cast<size_t>(C) * D, 0.0);
  s2.assign(static_cast<size_t>(C) * D, 0.0);
}

void GaussianStats::add(const float* x, const int32_t* y, int64_t L, const std::string& what) {
  for (int64_t t = 0; t < L; ++t) {
    const int32_t c = y[t];
    if (c < 0 || c >= C)
      throw std::invalid_argument(what + ": frame " + std::to_string(t) + " has class " + std::to_string(c) +
                                  ", outside [0, " + std::to_string(C) + ")");
    n[static_cast<size_t>(c)] += 1.0;
    double* a = &s1[static_cast<size_t>(c) * D];
    double* q = &s2[static_cast<size_t>(c) * D];
    const float* f = x + t * D;
    for (int d = 0; d < D; ++d) {
      const double v = f[d];
      a[d] += v;
      q[d] += v * v;
    }
  }
  frames += L;
}

void GaussianStats::merge(const GaussianStats& o) {
  if (o.C != C || o.D != D) throw std::invalid_argument("GaussianStats::merge: shapes differ");
  for (size_t i = 0; i < n.size(); ++i) n[i] += o.n[i];
  for (size_t i = 0; i < s1.size(); ++i) s1[i] += o.s1[i], s2[i] += o.s2[i];
  frames += o.frames;
}

GaussianHead gaussian_head(const GaussianStats& st, double w, double var_floor, double prior_frames) {
  if (!(w > 0.0) || !std::isfinite(w)) throw std::invalid_argument("gaussian_head: the weight must be > 0");
  if (!(var_floor > 0.0 && var_floor <= 1.0)) throw std::invalid_argument("gaussian_head: var_floor must be in (0, 1]");
  if (!(prior_frames >= 0.0) || !std::isfinite(prior_frames))
    throw std::invalid_argument("gaussian_head: prior_frames must be finite and >= 0");
  const int C = st.C, D = st.D;
  double total = 0;
  for (double c : st.n) total += c;
  if (total <= 0) throw std::invalid_argument("gaussian_head: no frames to estimate the Gaussians from");
  // the pooled Gaussian (every frame): the floor's scale, and the Gaussian of a class without frames
  std::vector<double> pm(static_cast<size_t>(D), 0.0), pv(static_cast<size_t>(D), 0.0);
  for (int d = 0; d < D; ++d) {
    double a = 0, q = 0;
    for (int c = 0; c < C; ++c) a += st.s1[static_cast<size_t>(c) * D + d], q += st.s2[static_cast<size_t>(c) * D + d];
    pm[d] = a / total;
    pv[d] = std::max(q / total - pm[d] * pm[d], 0.0);
    if (!(pv[d] > 0.0)) pv[d] = 1.0;  // a constant dimension: any variance scores every class alike
  }
  GaussianHead h;
  h.weight.assign(static_cast<size_t>(C) * 2 * D, 0.f);
  h.bias.assign(static_cast<size_t>(C), 0.f);
  for (int c = 0; c < C; ++c) {
    const double nc = st.n[static_cast<size_t>(c)];
    if (nc <= 0) ++h.empty_classes;
    double b = 0;
    for (int d = 0; d < D; ++d) {
      // MAP with the pooled Gaussian as the prior, worth prior_frames frames: the class's sums plus
      // prior_frames frames of the pooled mean and second moment (n = 0: the pooled Gaussian itself)
      double mu = pm[d], v = pv[d];
      if (nc > 0) {
        const double n = nc + prior_frames;
        mu = (st.s1[static_cast<size_t>(c) * D + d] + prior_frames * pm[d]) / n;
        v = (st.s2[static_cast<size_t>(c) * D + d] + prior_frames * (pv[d] + pm[d] * pm[d])) / n - mu * mu;
      }
      v = std::max(v, var_floor * pv[d]);
      h.weight[static_cast<size_t>(c) * 2 * D + d] = static_cast<float>(-0.5 * w / v);
      h.weight[static_cast<size_t>(c) * 2 * D + D + d] = static_cast<float>(w * mu / v);
      b += -0.5 * mu * mu / v - 0.5 * std::log(v);
    }
    h.bias[static_cast<size_t>(c)] = static_cast<float>(w * b);
  }
  return h;
}

template <class S>
void add_gaussian_scores(const S* weight, const S* bias, int C, int D, const S* x, S* scores) {
  for (int c = 0; c < C; ++c) {
    const S* row = weight + static_cast<size_t>(c) * 2 * D;
    S acc = bias[c];
    for (int d = 0; d < D; ++d) acc += row[d] * x[d] * x[d] + row[D + d] * x[d];
    scores[c] += acc;
  }
}

template void add_gaussian_scores<float>(const float*, const float*, int, int, const float*, float*);
template void add_gaussian_scores<double>(const double*, const double*, int, int, const double*, double*);

}  // namespace timitseg::model
