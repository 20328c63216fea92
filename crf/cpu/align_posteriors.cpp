// The cpu backend's constrained forward-backward (docs/crf.md "Confidence"):
// the forced-alignment recurrence with log-sum-exp, forward (S, F) and
// backward (H, G), float64, O(L np K) per utterance, one phone at a time.
//
// A phone's S column needs only the F columns of the phones before it (and
// its own S K frames earlier), its F column only its own S column; backwards,
// G needs the H columns of the phones after it, H its own G column (and its
// own H K frames later). So the columns are computed phone by phone, and the
// K-term sums of F and H in the linear domain over blocks of K frames, as the
// unconstrained pass sums over labels (crf/cpu/cpu.cpp):
//     F[t,n] = cum[t,c] + R + dmax + log( sum_d exp(P[t-d] - R) exp(D[d-1,c] - dmax) )
// with P[v] = S[v,n] - cum[v,c] + o[v,c], R the largest P the block reads and
// dmax the largest D[., c]: one exp per P and per frame instead of K, every
// factor at most 1. A sum below kTiny (terms underflowed: scores more than
// ~575 apart within a block) is recomputed with the exact two-pass logsumexp.
// H is summed alike over Q[t] = cum[t,c] + G[t,n] and the continuing piece's
// cum[t,c] + H[t,n] + A[c,c] + D[K-1,c] - dmax.
#include "crf/cpu/align_posteriors.h"

#include <algorithm>
#include <cmath>

#include "crf/cpu/recurrences.h"
#include "crf/detail.h"
#include "crf/score.h"

namespace timitseg::crf::cpu {
namespace {

using detail::kNegInf;

// log(exp(a) + exp(b)); exact when either is -inf.
double lse2(double a, double b) {
  const double m = a > b ? a : b, l = a > b ? b : a;
  if (l == kNegInf) return m;
  return m + std::log1p(std::exp(l - m));
}

}  // namespace

ConstrainedPosteriors::ConstrainedPosteriors(const AlignUtterance& u, double* tables, double* tmp)
    : u_(u), tmp_(tmp), lz_(kNegInf) {
  const size_t np = static_cast<size_t>(u.np);
  links_.resize(np);
  succ_.assign(np, 0);
  for (size_t n = 0; n < np; ++n) {
    const int32_t l = links_[n] = u.links ? u.links[n] : chain_link(static_cast<int64_t>(n), u.np, u.opt);
    for (int j = 0; j < kMaxLinkBack && j < static_cast<int>(n); ++j)
      if (l >> j & 1) succ_[n - 1 - static_cast<size_t>(j)] |= 1 << j;  // phone n follows phone n - 1 - j
  }
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
double ConstrainedPosteriors::cum(int64_t t, int64_t c) const { return static_cast<double>(u_.cum[t * u_.C + c]); }
double ConstrainedPosteriors::ons(int64_t v, int64_t c) const {
  return u_.onset ? static_cast<double>(u_.onset[v * u_.C + c]) : 0.0;
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
  const int32_t l = link(n);
  if (t == 0) return (l & kLinkStart) ? st(y[n]) : kNegInf;
  double acc = kNegInf;  // each phone that may precede n, ending at t (the set bits, nearest first)
  for (uint32_t bits = static_cast<uint32_t>(l & kLinkBackMask); bits != 0; bits &= bits - 1) {
    const int64_t m = n - 1 - __builtin_ctz(bits);
    if (m >= 0) acc = lse2(acc, get(F_, t, m) + A(y[m], y[n]));
  }
  return acc;
}

double ConstrainedPosteriors::duration_factors(int64_t c, double* dexp) const {
  const float* D = u_.p->duration_bias;
  const int64_t K = u_.K, C = u_.C;
  double m = kNegInf;
  for (int64_t d = 0; d < K; ++d) m = std::max(m, static_cast<double>(D[d * C + c]));
  if (m == kNegInf) return m;  // every duration forbidden: no piece of c
  for (int64_t d = 0; d < K; ++d) dexp[d] = std::exp(static_cast<double>(D[d * C + c]) - m);
  return m;
}

int64_t ConstrainedPosteriors::end_terms(int64_t n, int64_t t, double* terms) const {
  const int64_t dmax = std::min(u_.K, t), c = u_.y[n];
  for (int64_t d = 1; d <= dmax; ++d) terms[d - 1] = get(S_, t - d, n) + seg(t - d, d, c);
  return dmax;
}

int64_t ConstrainedPosteriors::start_terms(int64_t n, int64_t v, double* terms) const {
  const int64_t L = u_.L, K = u_.K, dmax = std::min(K, L - v), c = u_.y[n];
  for (int64_t d = 1; d <= dmax; ++d) terms[d - 1] = seg(v, d, c) + get(G_, v + d, n);
  if (v + K >= L) return dmax;
  terms[dmax] = seg(v, K, c) + A(c, c) + get(H_, v + K, n);
  return dmax + 1;
}

// Phone n's S and F columns (the F columns of the phones before it done).
void ConstrainedPosteriors::forward_phone(int64_t n) {
  const int64_t L = u_.L, K = u_.K, c = u_.y[n];
  double* S = S_ + n * (L + 1);
  double* F = F_ + n * (L + 1);
  const double acc = A(c, c);
  for (int64_t t = 0; t < L; ++t)
    if (in_band(t, n)) S[t] = lse2(entry(t, n), t >= K ? S[t - K] + seg(t - K, K, c) + acc : kNegInf);
  if (in_band(L, n)) S[L] = kNegInf;
  if (in_band(0, n)) F[0] = kNegInf;
  double* dexp = tmp_;         // [K]
  double* e = tmp_ + K;        // [2K]: the block's P, then exp(P - R)
  double* terms = tmp_ + 4 * K;  // [K + 1]: the exact path
  const double dm = duration_factors(c, dexp);
  for (int64_t t0 = 1; t0 <= L; t0 += K) {
    const int64_t t1 = std::min(t0 + K, L + 1), v0 = std::max<int64_t>(0, t0 - K), v1 = t1 - 1;
    double R = kNegInf;
    for (int64_t v = v0; v < v1; ++v) R = std::max(R, e[v - v0] = S[v] - cum(v, c) + ons(v, c));
    const bool none = R == kNegInf || dm == kNegInf;
    if (!none)
      for (int64_t v = v0; v < v1; ++v) e[v - v0] = std::exp(e[v - v0] - R);
    for (int64_t t = t0; t < t1; ++t) {
      if (!in_band(t, n)) continue;
      if (none) {
        F[t] = kNegInf;
        continue;
      }
      const int64_t dmax = std::min(K, t);
      const double* p = e + (t - 1 - v0);  // p[-(d-1)] = exp(P[t-d] - R)
      double s = 0.0;
      for (int64_t d = 0; d < dmax; ++d) s += p[-d] * dexp[d];
      F[t] = s >= kTiny ? cum(t, c) + R + dm + std::log(s) : detail::logsumexp(terms, end_terms(n, t, terms));
    }
  }
}

double ConstrainedPosteriors::start_factors(int64_t n, int64_t v0, int64_t v1, double dm, double* eq,
                                            double* eu) const {
  const int64_t L = u_.L, K = u_.K, c = u_.y[n];
  const double cont = A(c, c) + static_cast<double>(u_.p->duration_bias[(K - 1) * u_.C + c]) - dm;
  double R = kNegInf;
  const int64_t q1 = std::min(L, v1 - 1 + K), u1 = std::min(L - 1, v1 - 1 + K);
  for (int64_t t = v0 + 1; t <= q1; ++t) R = std::max(R, eq[t - v0 - 1] = cum(t, c) + get(G_, t, n));
  for (int64_t t = v0 + K; t <= u1; ++t) R = std::max(R, eu[t - v0 - K] = cum(t, c) + get(H_, t, n) + cont);
  if (R == kNegInf) return R;
  for (int64_t t = v0 + 1; t <= q1; ++t) eq[t - v0 - 1] = std::exp(eq[t - v0 - 1] - R);
  for (int64_t t = v0 + K; t <= u1; ++t) eu[t - v0 - K] = std::exp(eu[t - v0 - K] - R);
  return R;
}

double ConstrainedPosteriors::start_sum(int64_t v, int64_t v0, const double* dexp, const double* eq,
                                        const double* eu) const {
  const int64_t L = u_.L, K = u_.K, dmax = std::min(K, L - v);
  const double* q = eq + (v - v0);  // q[d-1] = exp(Q[v+d] - R)
  double s = 0.0;
  for (int64_t d = 0; d < dmax; ++d) s += q[d] * dexp[d];
  if (v + K < L) s += eu[v - v0];
  return s;
}

// Phone n's G and H columns (the H columns of the phones after it done).
void ConstrainedPosteriors::backward_phone(int64_t n) {
  const int64_t L = u_.L, K = u_.K, c = u_.y[n];
  const int32_t* y = u_.y;
  double* G = G_ + n * (L + 1);
  double* H = H_ + n * (L + 1);
  if (in_band(0, n)) G[0] = kNegInf;
  for (int64_t t = 1; t <= L; ++t) {
    if (!in_band(t, n)) continue;
    if (t == L) {
      G[t] = (link(n) & kLinkEnd) ? en(c) : kNegInf;
      continue;
    }
    double acc = kNegInf;  // each phone that may follow n, starting at t (the set bits, nearest first)
    for (uint32_t bits = static_cast<uint32_t>(succ_[static_cast<size_t>(n)]); bits != 0; bits &= bits - 1) {
      const int64_t m = n + 1 + __builtin_ctz(bits);
      acc = lse2(acc, A(c, y[m]) + get(H_, t, m));
    }
    G[t] = acc;
  }
  if (in_band(L, n)) H[L] = kNegInf;
  double* dexp = tmp_;           // [K]
  double* eq = tmp_ + K;         // [2K]
  double* eu = tmp_ + 3 * K;     // [K]
  double* terms = tmp_ + 4 * K;  // [K + 1]
  const double dm = duration_factors(c, dexp);
  for (int64_t v1 = L, v0; v1 > 0; v1 = v0) {  // blocks of K starts, the last first (H[v+K] known)
    v0 = std::max<int64_t>(0, v1 - K);
    const double R = dm == kNegInf ? kNegInf : start_factors(n, v0, v1, dm, eq, eu);
    for (int64_t v = v0; v < v1; ++v) {
      if (!in_band(v, n)) continue;
      if (R == kNegInf) {
        H[v] = kNegInf;
        continue;
      }
      const double s = start_sum(v, v0, dexp, eq, eu);
      H[v] = s >= kTiny ? ons(v, c) - cum(v, c) + R + dm + std::log(s)
                        : detail::logsumexp(terms, start_terms(n, v, terms));
    }
  }
}

double ConstrainedPosteriors::run() {
  const int64_t L = u_.L, np = u_.np;
  const int32_t* y = u_.y;
  lz_ = kNegInf;
  if (!graph_feasible(static_cast<int32_t>(L), links_.data(), static_cast<int32_t>(np)))
    return lz_;  // infeasible: every phone on a path needs a frame
  if (lo_) std::fill(S_, S_ + 4 * (L + 1) * np, kNegInf);  // the cells outside the band
  // Forward: S[t][n] (a piece of phone n starts at t), F[t][n] (phones 0..n done at t).
  for (int64_t n = 0; n < np; ++n) forward_phone(n);
  for (int64_t n = np - 1; n >= 0; --n)  // each phone that may end the utterance, the last first
    if (link(n) & kLinkEnd) lz_ = lse2(lz_, get(F_, L, n) + en(y[n]));
  if (!(lz_ > kNegInf)) return lz_ = kNegInf;
  // Backward: G[t][n] (phone n ends at t, everything after), H[t][n] (a piece of phone n starts at t, everything on).
  for (int64_t n = np - 1; n >= 0; --n) backward_phone(n);
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
