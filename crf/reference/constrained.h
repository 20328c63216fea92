// The reference backend's constrained forward-backward tables of one
// utterance (docs/crf.md "Confidence"), by the definitions: a forward sum over
// every duration r of every phone (Fw[t][n]: phones 1..n aligned to [0, t),
// phone n kept and ending at t) and the matching backward sum (Bw[t][n]:
// everything after a kept phone n that ends at t), each phone's pieces scored
// one by one as in align_f64. O(L^2 N) per utterance. Shared by the
// posteriors (align_posteriors.cpp) and the transcript NLL (transcript.cpp).
// Private to crf/reference/.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "crf/detail.h"
#include "crf/phone_graph.h"
#include "crf/reference/reference.h"
#include "crf/score.h"

namespace timitseg::crf::reference::constrained {

using detail::kNegInf;

inline double lse(double a, double b) {
  const double v[2] = {a, b};
  return detail::logsumexp(v, 2);
}

// One utterance and its transcript; phones are 1-based (n = 1..np) as in the spec.
struct View {
  int64_t L, K, C, np;
  const double *cum, *A, *D, *s, *e, *on;
  const int32_t* y;    // [np]
  const int32_t* opt;  // [np] or nullptr
  const int32_t* lk = nullptr;  // [np] the phone graph (crf/phone_graph.h) or nullptr: the chain of opt
  bool optional(int64_t n) const { return opt != nullptr && opt[n - 1] == 1; }
  int32_t link(int64_t n) const { return lk ? lk[n - 1] : chain_link(n - 1, np, opt); }
  bool precedes(int64_t m, int64_t n) const {  // phone m may come right before phone n (1-based)
    return m < n && n - 1 - m < kMaxLinkBack && (link(n) >> (n - 1 - m) & 1);
  }
  bool first(int64_t n) const { return (link(n) & kLinkStart) != 0; }
  bool last(int64_t n) const { return (link(n) & kLinkEnd) != 0; }
  int64_t lab(int64_t n) const { return y[n - 1]; }
  double start(int64_t c) const { return s ? s[c] : 0.0; }
  double end(int64_t c) const { return e ? e[c] : 0.0; }
  double trans(int64_t from, int64_t to) const { return A[from * C + to]; }
  double seg(int64_t u, int64_t d, int64_t c) const { return segment_score(cum, D, on, C, u, d, c); }
  // Phone label c over [v, v+r): pieces of K then the remainder, A[c][c] between pieces.
  double phone(int64_t v, int64_t r, int64_t c) const {
    double sc = 0.0;
    for (int64_t pos = v; pos < v + r; pos += K) {
      if (pos > v) sc += trans(c, c);
      sc += seg(pos, std::min(K, v + r - pos), c);
    }
    return sc;
  }
};

struct Tables {
  const View& x;
  int64_t W;
  std::vector<double> Fw, Bw;  // [L+1][np+1]
  double lz = kNegInf;
  double fw(int64_t t, int64_t n) const { return Fw[t * W + n]; }
  double bw(int64_t t, int64_t n) const { return Bw[t * W + n]; }
  // Everything before phone n when it starts at v (each phone that may precede
  // it, ending at v), transition into it included.
  double before(int64_t v, int64_t n) const {
    const int64_t c = x.lab(n);
    if (v == 0) return x.first(n) ? x.start(c) : kNegInf;
    double acc = kNegInf;
    for (int64_t m = std::max<int64_t>(1, n - kMaxLinkBack); m < n; ++m)
      if (x.precedes(m, n)) acc = lse(acc, fw(v, m) + x.trans(x.lab(m), c));
    return acc;
  }
  // Phone m starting at t and everything after it.
  double from_start(int64_t t, int64_t m) const {
    double acc = kNegInf;
    for (int64_t r = 1; t + r <= x.L; ++r) acc = lse(acc, x.phone(t, r, x.lab(m)) + bw(t + r, m));
    return acc;
  }
  double span(int64_t n, int64_t s, int64_t e) const {  // P_c(phone n occupies [s, e)); 0 outside
    if (s < 0 || e > x.L || s >= e) return 0.0;
    return std::exp(before(s, n) + x.phone(s, e - s, x.lab(n)) + bw(e, n) - lz);
  }
  double skipped(int64_t n) const {  // P_c(phone n is skipped)
    if (!x.optional(n)) return 0.0;
    if (n == 1) return std::exp(x.start(x.lab(2)) + from_start(0, 2) - lz);
    if (n == x.np) return std::exp(fw(x.L, n - 1) + x.end(x.lab(n - 1)) - lz);
    double sum = 0.0;
    for (int64_t t = 1; t < x.L; ++t)
      sum += std::exp(fw(t, n - 1) + x.trans(x.lab(n - 1), x.lab(n + 1)) + from_start(t, n + 1) - lz);
    return sum;
  }

  explicit Tables(const View& v) : x(v), W(v.np + 1), Fw((v.L + 1) * W, kNegInf), Bw((v.L + 1) * W, kNegInf) {
    const int64_t L = x.L, np = x.np;
    for (int64_t n = 1; n <= np; ++n)
      for (int64_t t = 1; t <= L; ++t) {
        double acc = kNegInf;
        for (int64_t r = 1; r <= t; ++r) acc = lse(acc, before(t - r, n) + x.phone(t - r, r, x.lab(n)));
        Fw[t * W + n] = acc;
      }
    for (int64_t n = np; n >= 1; --n) {
      Bw[L * W + n] = x.last(n) ? x.end(x.lab(n)) : kNegInf;
      for (int64_t t = L - 1; t >= 1; --t) {
        double acc = kNegInf;
        for (int64_t m = n + 1; m <= std::min(np, n + kMaxLinkBack); ++m)
          if (x.precedes(n, m)) acc = lse(acc, x.trans(x.lab(n), x.lab(m)) + from_start(t, m));
        Bw[t * W + n] = acc;
      }
    }
    for (int64_t n = 1; n <= np; ++n)
      if (x.last(n)) lz = lse(lz, fw(L, n) + x.end(x.lab(n)));
  }
};

}  // namespace timitseg::crf::reference::constrained
