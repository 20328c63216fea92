// The gradient of the marginals in float64 (docs/crf.md "Gradient of the
// marginals"): for upstream gradients g of the boundary, frame and segment
// posteriors, the gradients of E[R(y)] = sum(g * marginals), R(y) = sum of r_s
// over the segments s of y, by a forward and a backward pass in the
// first-order expectation semiring: the probabilities in log space (the
// reference's alpha and beta), the R part linear as conditional expectations
// (aR, bR). O(T K C^2) per utterance, as the rest of the reference.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "crf/detail.h"
#include "crf/reference/lattice.h"
#include "crf/reference/reference.h"

namespace timitseg::crf::reference {
namespace {

using detail::kNegInf;

// exp(x - norm), 0 where either is -inf (a state or term of probability 0).
double ratio(double x, double norm) { return (x == kNegInf || norm == kNegInf) ? 0.0 : std::exp(x - norm); }

// The upstream gradients of one utterance, checked finite on its valid entries.
struct Upstream {
  int64_t L, K, C;
  std::vector<double> gb;   // [L+1] boundaries (0 when absent)
  std::vector<double> cgf;  // [L+1][C] the frames' cumulative sums: cgf[t][c] = sum_{t'<t} g_frames[t'][c]
  const double* gs;         // [T][K][C] segments of this utterance, or nullptr
  Upstream(const Dims& dims, const MarginalGradsF64& g, int64_t b, int64_t L)
      : L(L), K(dims.K), C(dims.C), gb(L + 1, 0.0), cgf((L + 1) * dims.C, 0.0),
        gs(g.segments ? g.segments + b * dims.T * dims.K * dims.C : nullptr) {
    const int64_t T = dims.T;
    auto finite = [b](double x, const char* name, const std::string& at) {
      if (!std::isfinite(x))
        throw std::invalid_argument("crf: reference backend: marginals_backward: " + std::string(name) + "[" +
                                    std::to_string(b) + "]" + at + " = " + std::to_string(x) + " is not finite");
    };
    for (int64_t t = 0; g.boundaries && t <= L; ++t)
      finite(gb[t] = g.boundaries[b * (T + 1) + t], "grad_boundaries", "[" + std::to_string(t) + "]");
    for (int64_t t = 0; g.frames && t < L; ++t)
      for (int64_t c = 0; c < C; ++c) {
        const double x = g.frames[(b * T + t) * C + c];
        finite(x, "grad_frames", "[" + std::to_string(t) + "][" + std::to_string(c) + "]");
        cgf[(t + 1) * C + c] = cgf[t * C + c] + x;
      }
    for (int64_t t = 0; gs && t < L; ++t)
      for (int64_t d = 1; d <= std::min(K, t + 1); ++d)
        for (int64_t c = 0; c < C; ++c)
          finite(gs[(t * K + d - 1) * C + c], "grad_segments",
                 "[" + std::to_string(t) + "][" + std::to_string(d - 1) + "][" + std::to_string(c) + "]");
  }
  // r of the segment [v, v+d) with label c: its boundary at v+d, its frames' label c, itself.
  double r(int64_t v, int64_t d, int64_t c) const {
    double x = gb[v + d] + (cgf[(v + d) * C + c] - cgf[v * C + c]);
    if (gs) x += gs[((v + d - 1) * K + d - 1) * C + c];
    return x;
  }
};

// aR[t][c] = E[R(prefix) | a segment of label c ends at t], t = 1..L (0 where alpha is -inf).
std::vector<double> forward_expectation(const Lattice& lat, const Upstream& g) {
  const Utt& u = lat.u;
  const int64_t L = u.L, K = u.K, C = u.C;
  std::vector<double> aR((L + 1) * C, 0.0);
  for (int64_t t = 1; t <= L; ++t)
    for (int64_t c = 0; c < C; ++c) {
      const double norm = lat.alpha[t * C + c];
      double acc = 0.0;
      for (int64_t d = 1; d <= std::min(K, t); ++d) {
        const int64_t v = t - d;
        const double r = g.r(v, d, c);
        if (v == 0) {
          acc += ratio(u.start(c) + u.seg(0, d, c), norm) * r;
        } else {
          for (int64_t cp = 0; cp < C; ++cp)
            acc += ratio(u.seg(v, d, c) + (lat.alpha[v * C + cp] + u.A[cp * C + c]), norm) * (aR[v * C + cp] + r);
        }
      }
      aR[t * C + c] = acc;
    }
  return aR;
}

// bR[t][c] = E[R(completion) | a segment of label c ends at t], t = 1..L (bR[L] = 0).
std::vector<double> backward_expectation(const Lattice& lat, const Upstream& g) {
  const Utt& u = lat.u;
  const int64_t L = u.L, K = u.K, C = u.C;
  std::vector<double> bR((L + 1) * C, 0.0);
  for (int64_t t = L - 1; t >= 1; --t)
    for (int64_t c = 0; c < C; ++c) {
      const double norm = lat.beta[t * C + c];
      double acc = 0.0;
      for (int64_t d = 1; d <= std::min(K, L - t); ++d)
        for (int64_t cn = 0; cn < C; ++cn)
          acc += ratio(u.A[c * C + cn] + u.seg(t, d, cn) + lat.beta[(t + d) * C + cn], norm) *
                 (g.r(t, d, cn) + bR[(t + d) * C + cn]);
      bR[t * C + c] = acc;
    }
  return bR;
}

}  // namespace

void marginals_backward_f64(const Dims& dims, const ParamsF64& p, const MarginalGradsF64& up,
                            const GradsF64& grads) {
  validate_f64(dims, p, nullptr);
  const int64_t B = dims.B, T = dims.T, K = dims.K, C = dims.C;
  std::vector<double> g_cum(B * (T + 1) * C, 0.0), g_A(C * C, 0.0), g_D(K * C, 0.0), g_s(C, 0.0), g_e(C, 0.0);
  std::vector<double> g_o(p.onset ? B * T * C : 0, 0.0);
  for (int64_t b = 0; b < B; ++b) {
    const Lattice lat(dims, p, b);
    const Utt& u = lat.u;
    const int64_t L = u.L;
    const Upstream g(dims, up, b, L);
    const std::vector<double> aR = forward_expectation(lat, g), bR = backward_expectation(lat, g);
    // E[R] over the whole distribution, from the last segment's label.
    double ER = 0.0;
    std::vector<double> p_end(C);
    for (int64_t c = 0; c < C; ++c) {
      p_end[c] = ratio(lat.alpha[L * C + c] + u.end(c), lat.lz);
      ER += p_end[c] * aR[L * C + c];
    }
    // preR[v][c] = E[R(prefix) | a segment of label c starts at v] (0 at v = 0).
    std::vector<double> preR(L * C, 0.0);
    for (int64_t v = 1; v < L; ++v)
      for (int64_t c = 0; c < C; ++c) {
        const double norm = log_prefix(u, lat.alpha, v, c);
        for (int64_t cp = 0; cp < C; ++cp)
          preR[v * C + c] += ratio(lat.alpha[v * C + cp] + u.A[cp * C + c], norm) * aR[v * C + cp];
      }
    double* gc = g_cum.data() + b * (T + 1) * C;
    double* go = p.onset ? g_o.data() + b * T * C : nullptr;
    // Cov(1[s in y], R) = mu_s (E[R | s in y] - E[R]) for every segment s: where log Z has mu_s.
    lat.for_each_segment([&](int64_t v, int64_t d, int64_t c, double mu) {
      if (mu == 0.0) return;
      const double h = mu * (preR[v * C + c] + g.r(v, d, c) + bR[(v + d) * C + c] - ER);
      gc[(v + d) * C + c] += h;
      gc[v * C + c] -= h;
      g_D[(d - 1) * C + c] += h;
      if (v == 0) g_s[c] += h;
      if (go) go[v * C + c] += h;
    });
    // Transitions: label cp ends at v, a segment (v, d, c) follows.
    for (int64_t v = 1; v < L; ++v)
      for (int64_t cp = 0; cp < C; ++cp)
        for (int64_t c = 0; c < C; ++c)
          for (int64_t d = 1; d <= std::min(K, L - v); ++d) {
            const double P = ratio(lat.alpha[v * C + cp] + u.A[cp * C + c] + u.seg(v, d, c) +
                                       lat.beta[(v + d) * C + c], lat.lz);
            if (P != 0.0) g_A[cp * C + c] += P * (aR[v * C + cp] + g.r(v, d, c) + bR[(v + d) * C + c] - ER);
          }
    for (int64_t c = 0; c < C; ++c) g_e[c] += p_end[c] * (aR[L * C + c] - ER);
  }
  write_grads(grads, p.onset != nullptr, g_cum, g_A, g_D, g_s, g_e, g_o);
}

}  // namespace timitseg::crf::reference
