// The cpu backend's constrained forward-backward (docs/crf.md "Confidence"):
// the forced-alignment recurrence with log-sum-exp, forward (S, F) and
// backward (H, G), float64, O(L np K) per utterance.
#include "crf/cpu/align_posteriors.h"

#include <algorithm>
#include <cmath>

#include "crf/detail.h"
#include "crf/score.h"

namespace timitseg::crf::cpu {
namespace {

using detail::kNegInf;

double lse2(double a, double b) {
  const double v[2] = {a, b};
  return detail::logsumexp(v, 2);
}

}  // namespace

ConstrainedPosteriors::ConstrainedPosteriors(const AlignUtterance& u, double* tables, double* tmp)
    : u_(u), tmp_(tmp), lz_(kNegInf) {
  const int64_t cells = (u.L + 1) * u.np;
  S_ = tables;
  F_ = S_ + cells;
  H_ = F_ + cells;
  G_ = H_ + cells;
}

double ConstrainedPosteriors::A(int64_t from, int64_t to) const {
  return static_cast<double>(u_.p->transition[from * u_.C + to]);
}
double ConstrainedPosteriors::st(int64_t c) const { return u_.p->start ? static_cast<double>(u_.p->start[c]) : 0.0; }
double ConstrainedPosteriors::en(int64_t c) const { return u_.p->end ? static_cast<double>(u_.p->end[c]) : 0.0; }
double ConstrainedPosteriors::seg(int64_t v, int64_t d, int64_t c) const {
  return segment_score(u_.cum, u_.p->duration_bias, u_.onset, u_.C, v, d, c);
}
double ConstrainedPosteriors::phone(int64_t v, int64_t r, int64_t c) const {
  double sc = 0.0;
  for (int64_t pos = v; pos < v + r; pos += u_.K) {
    if (pos > v) sc += A(c, c);
    sc += seg(pos, std::min(u_.K, v + r - pos), c);
  }
  return sc;
}

double ConstrainedPosteriors::entry(int64_t t, int64_t n) const {
  const int32_t* y = u_.y;
  if (t == 0) return n == 0 ? st(y[0]) : (n == 1 && opt(0) ? st(y[1]) : kNegInf);
  const double kept = n >= 1 ? get(F_, t, n - 1) + A(y[n - 1], y[n]) : kNegInf;
  const double skip = n >= 2 && opt(n - 1) ? get(F_, t, n - 2) + A(y[n - 2], y[n]) : kNegInf;
  return lse2(kept, skip);
}

double ConstrainedPosteriors::run() {
  const int64_t L = u_.L, np = u_.np, K = u_.K;
  const int32_t* y = u_.y;
  int64_t needed = 0;
  for (int64_t n = 0; n < np; ++n) needed += !opt(n);
  lz_ = kNegInf;
  if (needed > L) return lz_;  // infeasible: every phone kept needs a frame
  if (lo_) std::fill(S_, S_ + 4 * (L + 1) * np, kNegInf);  // the cells outside the band
  // Forward: S[t][n] (a piece of phone n starts at t), F[t][n] (phones 0..n done at t).
  for (int64_t n = lo(0); n < hi(0); ++n) at(S_, 0, n) = entry(0, n), at(F_, 0, n) = kNegInf;
  for (int64_t t = 1; t <= L; ++t) {
    for (int64_t n = lo(t); n < hi(t); ++n) {
      const int64_t dmax = std::min(K, t);
      for (int64_t d = 1; d <= dmax; ++d) tmp_[d - 1] = get(S_, t - d, n) + seg(t - d, d, y[n]);
      at(F_, t, n) = detail::logsumexp(tmp_, dmax);
    }
    if (t == L) break;
    for (int64_t n = lo(t); n < hi(t); ++n) {
      const double cont = t >= K ? get(S_, t - K, n) + seg(t - K, K, y[n]) + A(y[n], y[n]) : kNegInf;
      at(S_, t, n) = lse2(entry(t, n), cont);
    }
  }
  for (int64_t n = lo(L); n < hi(L); ++n) at(S_, L, n) = kNegInf;
  lz_ = get(F_, L, np - 1) + en(y[np - 1]);
  if (np >= 2 && opt(np - 1)) lz_ = lse2(lz_, get(F_, L, np - 2) + en(y[np - 2]));
  if (!(lz_ > kNegInf)) return lz_ = kNegInf;
  // Backward: G[t][n] (phone n ends at t, everything after), H[t][n] (a piece of phone n starts at t, everything on).
  for (int64_t n = lo(L); n < hi(L); ++n) {
    at(G_, L, n) = (n == np - 1 || (n == np - 2 && opt(np - 1))) ? en(y[n]) : kNegInf;
    at(H_, L, n) = kNegInf;
  }
  for (int64_t t = L - 1; t >= 0; --t) {
    for (int64_t n = lo(t); n < hi(t); ++n) {
      const int64_t dmax = std::min(K, L - t);
      for (int64_t d = 1; d <= dmax; ++d) tmp_[d - 1] = seg(t, d, y[n]) + get(G_, t + d, n);
      const double fin = detail::logsumexp(tmp_, dmax);
      const double cont = t + K < L ? seg(t, K, y[n]) + A(y[n], y[n]) + get(H_, t + K, n) : kNegInf;
      at(H_, t, n) = lse2(fin, cont);
    }
    for (int64_t n = lo(t); n < hi(t); ++n) {
      if (t == 0) {
        at(G_, 0, n) = kNegInf;
        continue;
      }
      const double next = n + 1 < np ? A(y[n], y[n + 1]) + get(H_, t, n + 1) : kNegInf;
      const double skip = n + 2 < np && opt(n + 1) ? A(y[n], y[n + 2]) + get(H_, t, n + 2) : kNegInf;
      at(G_, t, n) = lse2(next, skip);
    }
  }
  return lz_;
}

double ConstrainedPosteriors::span(int64_t n, int64_t s, int64_t e) const {
  if (s < 0 || e > u_.L || s >= e || !(lz_ > kNegInf)) return 0.0;
  return std::exp(entry(s, n) + phone(s, e - s, u_.y[n]) + get(G_, e, n) - lz_);
}
double ConstrainedPosteriors::starts(int64_t n, int64_t s) const {
  if (s < 0 || s >= u_.L || !(lz_ > kNegInf)) return 0.0;
  return std::exp(entry(s, n) + get(H_, s, n) - lz_);
}
double ConstrainedPosteriors::ends(int64_t n, int64_t t) const {
  if (t < 1 || t > u_.L || !(lz_ > kNegInf)) return 0.0;
  return std::exp(get(F_, t, n) + get(G_, t, n) - lz_);
}
double ConstrainedPosteriors::skipped(int64_t n) const {
  if (!opt(n) || !(lz_ > kNegInf)) return 0.0;
  const int64_t np = u_.np, L = u_.L;
  const int32_t* y = u_.y;
  if (n == 0) return std::exp(st(y[1]) + get(H_, 0, 1) - lz_);
  if (n == np - 1) return std::exp(get(F_, L, np - 2) + en(y[np - 2]) - lz_);
  double sum = 0.0;
  for (int64_t t = 1; t < L; ++t) sum += std::exp(get(F_, t, n - 1) + A(y[n - 1], y[n + 1]) + get(H_, t, n + 1) - lz_);
  return sum;
}

void ConstrainedPosteriors::query(int64_t n, int64_t s, int64_t r, double* out) const {
  out[0] = out[1] = out[2] = 0.0;
  if (r == 0) {
    out[0] = out[1] = out[2] = skipped(n);
    return;
  }
  const int64_t e = s + r;
  for (int64_t ds = -1; ds <= 1; ++ds)
    for (int64_t de = -1; de <= 1; ++de) out[0] += span(n, s + ds, e + de);
  for (int64_t d = -1; d <= 1; ++d) out[1] += starts(n, s + d), out[2] += ends(n, e + d);
}

}  // namespace timitseg::crf::cpu
