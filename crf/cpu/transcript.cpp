// The cpu backend's constrained marginals of the transcript loss (docs/crf.md
// "Training from transcripts"), read from the S, F, H, G tables of the
// constrained forward-backward (align_posteriors.cpp), O(L np K) per utterance.
#include <algorithm>
#include <cmath>

#include "crf/cpu/align_posteriors.h"
#include "crf/detail.h"

namespace timitseg::crf::cpu {

void ConstrainedPosteriors::add_marginals(double w, double* gc, double* gA, double* gD, double* gs, double* ge,
                                          double* go) const {
  const int64_t L = u_.L, np = u_.np, K = u_.K, C = u_.C;
  const int32_t* y = u_.y;
  auto piece = [&](int64_t v, int64_t d, int64_t c, double pr) {
    gc[(v + d) * C + c] += pr;
    gc[v * C + c] -= pr;
    gD[(d - 1) * C + c] += pr;
    if (go) go[v * C + c] += pr;
  };
  for (int64_t n = 0; n < np; ++n) {
    const int64_t c = y[n];
    for (int64_t v = 0; v < L; ++v) {
      const double s = get(S_, v, n);
      if (s == detail::kNegInf) continue;
      // Final pieces [v, v+d): the phone ends at v + d.
      for (int64_t d = 1; d <= std::min(K, L - v); ++d)
        piece(v, d, c, w * std::exp(s + seg(v, d, c) + get(G_, v + d, n) - lz_));
      // A continuing piece [v, v+K): another piece of the phone starts at v + K.
      if (v + K < L) {
        const double pr = w * std::exp(s + seg(v, K, c) + A(c, c) + get(H_, v + K, n) - lz_);
        piece(v, K, c, pr);
        gA[c * C + c] += pr;
      }
    }
  }
  // Phone n ends at t and phone m (n+1, or n+2 over a skipped optional n+1) starts there.
  for (int64_t n = 0; n < np; ++n)
    for (int64_t m = n + 1; m <= std::min(np - 1, n + 2); ++m) {
      if (m == n + 2 && !opt(n + 1)) break;
      const double a = A(y[n], y[m]);
      double sum = 0.0;
      for (int64_t t = 1; t < L; ++t) sum += std::exp(get(F_, t, n) + a + get(H_, t, m) - lz_);
      gA[y[n] * C + y[m]] += w * sum;
    }
  gs[y[0]] += w * std::exp(st(y[0]) + get(H_, 0, 0) - lz_);
  if (np >= 2 && opt(0)) gs[y[1]] += w * std::exp(st(y[1]) + get(H_, 0, 1) - lz_);
  ge[y[np - 1]] += w * std::exp(get(F_, L, np - 1) + en(y[np - 1]) - lz_);
  if (np >= 2 && opt(np - 1)) ge[y[np - 2]] += w * std::exp(get(F_, L, np - 2) + en(y[np - 2]) - lz_);
}

}  // namespace timitseg::crf::cpu
