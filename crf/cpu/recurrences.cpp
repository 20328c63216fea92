// The per-utterance recurrences of the cpu backend (crf/cpu/recurrences.h).
#include "crf/cpu/recurrences.h"

#include <algorithm>
#include <cmath>

namespace timitseg::crf::cpu {

using detail::kNegInf;

// sigma[u,:] from alpha[u,:] (u >= 1).
void transition_in(Utt& x, int64_t u) {
  const int64_t C = x.C;
  const double* a = x.alpha + u * C;
  double* sg = x.sigma + u * C;
  double m = kNegInf;
  for (int64_t c = 0; c < C; ++c) m = std::max(m, a[c]);
  if (m == kNegInf) {
    std::fill(sg, sg + C, kNegInf);
    return;
  }
  double* ea = x.v1;
  double* acc = x.v2;
  for (int64_t c = 0; c < C; ++c) ea[c] = std::exp(a[c] - m);  // -inf entries give 0
  std::fill(acc, acc + C, 0.0);
  for (int64_t cp = 0; cp < C; ++cp) {
    const double w = ea[cp];
    const double* row = x.exp_col + cp * C;
    for (int64_t c = 0; c < C; ++c) acc[c] += w * row[c];
  }
  for (int64_t c = 0; c < C; ++c) {
    if (x.amax_col[c] == kNegInf) {  // every transition into c is forbidden
      sg[c] = kNegInf;
    } else if (acc[c] >= kTiny) {
      sg[c] = m + x.amax_col[c] + std::log(acc[c]);
    } else {
      for (int64_t cp = 0; cp < C; ++cp) x.tmp[cp] = a[cp] + x.Ad(cp, c);
      sg[c] = detail::logsumexp(x.tmp, C);
    }
  }
}

// gamma[t,:] from rho[t,:] (t >= 1).
void transition_out(Utt& x, int64_t t) {
  const int64_t C = x.C;
  const double* r = x.rho + t * C;
  double* gm = x.gamma + t * C;
  double m = kNegInf;
  for (int64_t c = 0; c < C; ++c) m = std::max(m, r[c]);
  if (m == kNegInf) {
    std::fill(gm, gm + C, kNegInf);
    return;
  }
  double* er = x.v1;
  for (int64_t c = 0; c < C; ++c) er[c] = std::exp(r[c] - m);
  for (int64_t c = 0; c < C; ++c) {
    if (x.amax_row[c] == kNegInf) {  // every transition out of c is forbidden
      gm[c] = kNegInf;
      continue;
    }
    const double* row = x.exp_row + c * C;
    double acc = 0.0;
    for (int64_t cn = 0; cn < C; ++cn) acc += row[cn] * er[cn];
    if (acc >= kTiny) {
      gm[c] = m + x.amax_row[c] + std::log(acc);
    } else {
      for (int64_t cn = 0; cn < C; ++cn) x.tmp[cn] = x.Ad(c, cn) + r[cn];
      gm[c] = detail::logsumexp(x.tmp, C);
    }
  }
}

// Forward: sigma, alpha; returns log Z.
double forward(Utt& x) {
  const int64_t L = x.L, K = x.K, C = x.C;
  for (int64_t c = 0; c < C; ++c) x.sigma[c] = x.start(c), x.alpha[c] = kNegInf;
  for (int64_t t = 1; t <= L; ++t) {
    const int64_t dmax = std::min(K, t);
    for (int64_t c = 0; c < C; ++c) {
      const double ct = x.cm(t, c);
      for (int64_t d = 1; d <= dmax; ++d)
        x.tmp[d - 1] = x.with_onset(ct - x.cm(t - d, c) + x.Dd(d, c) + x.sigma[(t - d) * C + c], t - d, c);
      x.alpha[t * C + c] = detail::logsumexp(x.tmp, dmax);
    }
    if (t < L) transition_in(x, t);
  }
  for (int64_t c = 0; c < C; ++c) x.tmp[c] = x.alpha[L * C + c] + x.end(c);
  return detail::logsumexp(x.tmp, C);
}

// Backward: rho (u = 0..L-1, including o[u,c]), gamma (t = 1..L). When gD != nullptr (forward
// done, lz = log Z), also adds d logZ / d D[d-1,c] = sum_u mu(u,d,c) using
//     mu(u,d,c) = P(a segment with c starts at u) * w_d,
//     w_d = exp(term_d - m) / sum_d' exp(term_d' - m)
// with term_d the summands of rho[u,c] (so no extra exp per (u,d,c); every
// factor is in [0, 1]).
void backward_pass(Utt& x, double lz, double* gD) {
  const int64_t L = x.L, K = x.K, C = x.C;
  for (int64_t c = 0; c < C; ++c) x.gamma[L * C + c] = x.end(c);
  for (int64_t u = L - 1; u >= 0; --u) {
    const int64_t dmax = std::min(K, L - u);
    for (int64_t c = 0; c < C; ++c) {
      const double cu = x.cm(u, c);
      double* v = x.tmp;
      double m = kNegInf;
      for (int64_t d = 1; d <= dmax; ++d) {
        v[d - 1] = x.cm(u + d, c) - cu + x.Dd(d, c) + x.gamma[(u + d) * C + c];
        m = v[d - 1] > m ? v[d - 1] : m;
      }
      if (m == kNegInf) {
        x.rho[u * C + c] = kNegInf;
        continue;
      }
      double S = 0.0;
      for (int64_t d = 0; d < dmax; ++d) S += (v[d] = std::exp(v[d] - m));
      // rho[u,c] includes the onset score o[u,c] (common to every duration d,
      // so the weights w_d below do not see it).
      const double r = x.with_onset(m + std::log(S), u, c);
      x.rho[u * C + c] = r;
      if (gD) {
        const double f = std::exp(x.sigma[u * C + c] + r - lz) / S;
        for (int64_t d = 1; d <= dmax; ++d) gD[(d - 1) * C + c] += f * v[d - 1];
      }
    }
    if (u >= 1) transition_out(x, u);
  }
}

// d logZ / d A[c',c] = sum_{u>=1} exp(alpha[u,c'] + A[c',c] + rho[u,c] - logZ)
//   = sum_u P(start at u with c) * exp(alpha[u,c'] - m) exp(A[c',c] - amax[c]) / S[u,c],
// S[u,c] = exp(sigma[u,c] - m - amax[c]) the linear-domain sum of transition_in.
// Added to gA [C][C] for utterance x (forward and backward_pass done, lz = log Z).
void transition_gradient(Utt& x, double lz, double* gA) {
  const int64_t L = x.L, C = x.C;
  for (int64_t u = 1; u < L; ++u) {
    const double* a = x.alpha + u * C;
    double m = kNegInf;
    for (int64_t c = 0; c < C; ++c) m = std::max(m, a[c]);
    if (m == kNegInf) continue;  // no segment can end at u: no transition at u
    double* ea = x.v1;
    double* w = x.v2;
    for (int64_t c = 0; c < C; ++c) ea[c] = std::exp(a[c] - m);
    for (int64_t c = 0; c < C; ++c) {
      if (x.amax_col[c] == kNegInf || x.sigma[u * C + c] == kNegInf) {  // no transition into c at u
        w[c] = 0.0;
        continue;
      }
      const double S = std::exp(x.sigma[u * C + c] - m - x.amax_col[c]);
      const double pst = std::exp(x.sigma[u * C + c] + x.rho[u * C + c] - lz);
      if (S >= kTiny) {
        w[c] = pst / S;
      } else {  // exact per-term path for this column
        w[c] = 0.0;
        for (int64_t cp = 0; cp < C; ++cp)
          gA[cp * C + c] += std::exp(a[cp] + x.Ad(cp, c) + x.rho[u * C + c] - lz);
      }
    }
    for (int64_t cp = 0; cp < C; ++cp) {
      const double f = ea[cp];
      const double* row = x.exp_col + cp * C;
      double* out = gA + cp * C;
      for (int64_t c = 0; c < C; ++c) out[c] += f * row[c] * w[c];
    }
  }
}

}  // namespace timitseg::crf::cpu
