// The cpu backend's constrained marginals of the transcript loss (docs/crf.md
// "Training from transcripts"), read from the S, F, H, G tables of the
// constrained forward-backward (align_posteriors.cpp), O(L np K) per
// utterance. A piece's marginal exp(S[v,n] + term - log Z_c), term one of
// H[v,n]'s summands, is P(a piece of n starts at v) times that summand's
// share of H's linear-domain sum (the same factors, at most 1): one exp per
// (v, n) instead of one per piece; below kTiny, each piece by its own exp.
#include <algorithm>
#include <cmath>

#include "crf/cpu/align_posteriors.h"
#include "crf/cpu/recurrences.h"
#include "crf/detail.h"

namespace timitseg::crf::cpu {

void ConstrainedPosteriors::add_marginals(double w, double* gc, double* gA, double* gD, double* gs, double* ge,
                                          double* go) const {
  const int64_t L = u_.L, np = u_.np, K = u_.K, C = u_.C;
  const int32_t* y = u_.y;
  double* dexp = tmp_;           // [K]
  double* eq = tmp_ + K;         // [2K]
  double* eu = tmp_ + 3 * K;     // [K]
  double* terms = tmp_ + 4 * K;  // [K + 1]
  for (int64_t n = 0; n < np; ++n) {
    const int64_t c = y[n];
    const double dm = duration_factors(c, dexp);
    if (dm == detail::kNegInf) continue;  // no piece of c has a finite score
    for (int64_t v1 = L, v0; v1 > 0; v1 = v0) {  // the blocks of backward_phone
      v0 = std::max<int64_t>(0, v1 - K);
      const double R = start_factors(n, v0, v1, dm, eq, eu);
      if (R == detail::kNegInf) continue;
      for (int64_t v = v0; v < v1; ++v) {
        const double s = get(S_, v, n), h = get(H_, v, n);
        if (s == detail::kNegInf || h == detail::kNegInf) continue;
        const int64_t dmax = std::min(K, L - v);
        const bool cont = v + K < L;
        // pr(i) = w P(piece i of the start (v, n)): d = i + 1 < dmax final pieces, then the continuing one.
        const double sum = start_sum(v, v0, dexp, eq, eu);
        double f = 0.0;
        if (sum >= kTiny) {
          f = w * std::exp(s + h - lz_) / sum;
        } else {
          start_terms(n, v, terms);
          for (int64_t i = 0; i < dmax + cont; ++i) terms[i] = w * std::exp(s + terms[i] - lz_);
        }
        const double* q = eq + (v - v0);
        double total = 0.0;
        for (int64_t d = 1; d <= dmax; ++d) {
          const double pr = sum >= kTiny ? f * q[d - 1] * dexp[d - 1] : terms[d - 1];
          gc[(v + d) * C + c] += pr;
          gD[(d - 1) * C + c] += pr;
          total += pr;
        }
        if (cont) {  // [v, v+K) and another piece of the phone from v + K
          const double pr = sum >= kTiny ? f * eu[v - v0] : terms[dmax];
          gc[(v + K) * C + c] += pr;
          gD[(K - 1) * C + c] += pr;
          gA[c * C + c] += pr;
          total += pr;
        }
        gc[v * C + c] -= total;
        if (go) go[v * C + c] += total;
      }
    }
  }
  // Phone n ends at t and phone m (one that may follow it) starts there.
  for (int64_t n = 0; n < np; ++n)
    for (uint32_t bits = static_cast<uint32_t>(succ_[static_cast<size_t>(n)]); bits != 0; bits &= bits - 1) {
      const int64_t m = n + 1 + __builtin_ctz(bits);  // the set bits, nearest first
      const double a = A(y[n], y[m]) - lz_;
      const double* Fn = F_ + n * (L + 1);
      const double* Hm = H_ + m * (L + 1);
      double sum = 0.0;
      for (int64_t t = 1; t < L; ++t) sum += std::exp(Fn[t] + a + Hm[t]);
      gA[y[n] * C + y[m]] += w * sum;
    }
  for (int64_t n = 0; n < np; ++n) {
    if (link(n) & kLinkStart) gs[y[n]] += w * std::exp(st(y[n]) + get(H_, 0, n) - lz_);
    if (link(n) & kLinkEnd) ge[y[n]] += w * std::exp(get(F_, L, n) + en(y[n]) - lz_);
  }
}

}  // namespace timitseg::crf::cpu
