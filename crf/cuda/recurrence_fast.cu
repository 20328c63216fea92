// The scaled linear-domain log-sum-exp recurrence (docs/cuda.md "Fast
// recurrence"): the forward (alpha, sigma) and backward (rho, gamma)
// recurrences of docs/crf.md with fused multiply-adds for the terms and two
// exps per (position, label) on the sequential path, no log there. One block
// per utterance and direction; label c is owned by the group of G lanes
// c*G .. c*G+G-1, plus one warp that writes the tables (C*G + 32 <=
// kMaxRecThreads); all state float64.
//
// Forward (backward: mirror, in brackets). With the ring value
//   w[u,c] = sigma[u,c] - cum[u,c] + o[u,c]          [w[v,c] = gamma[v,c] + cum[v,c]]
// phase 1 is
//   alpha[t,c] = cum[t,c] + lse_d (D[d-1,c] + w[t-d,c])
//              = cum[t,c] + Dmax[c] + ref[c] + log S1,  S1 = sum_d ED[d-1,c] q[t-d,c]
//   [rho[u,c] = o[u,c] - cum[u,c] + lse_d (D[d-1,c] + w[u+d,c])]
// with ED[k,c] = exp(D[k,c] - Dmax[c]) <= 1 and the linear ring
// q[u,c] = exp(w[u,c] - ref[c]) for a per-label reference ref[c]. Phase 2 is
//   sigma[t,c] = R + Amax[c] + log S2,  S2 = sum_c' ET[c][c'] P[c'],
//   P[c'] = exp(alpha[t,c'] - R),  ET[c][c'] = exp(A[c',c] - Amax[c]) <= 1   [A[c,c']]
// where R, the reference of row t, is the (upper bound of the) row max of the
// previous row, known before phase 1: no reduction over labels sits between
// the phases. A value is kept as an offset and a mantissa, x = off + log m
// with S = m 2^e, m in [0.5, 1), off = ... + e log 2, so the sequential path
// needs no log: the log is taken only for the tables (backward: by one extra
// warp, off the groups' path), the exact fallback and log Z. The two exps of
// a step are independent of its sums (P = S1 exp(base - R), q = S2 exp(wbase
// - ref)), so they overlap the loads and shuffles.
//
// Exactness. ref[c] is reset to the window max of the offsets (every q < 1)
// every kRescalePeriod positions and whenever a new offset exceeds it by more
// than kRescaleMargin; between resets q < exp(256). A product that underflows
// in S1 is then below 2^-1022 * 2^370; in S2 every finite ET is >= 2^-900
// (checked per label, else phase 2 of that label is always exact) and a P
// that underflows is below 2^-1022; so a sum accepted in [kSumLo, kSumHi] =
// [2^-500, 2^1000] has lost nothing above 2^-150 of itself, and its log is
// the log-sum-exp to float64 rounding. Any other sum (every term tiny, -inf
// entries, P overflowing when a row grows by more than 700 nats, scores of
// +-1e4) is recomputed for that (position, label) by the exact two-pass
// log-sum-exp on the exact log values. The choice depends on the data
// alone, so reruns are bitwise identical; log_partition and backward run the
// same code (only the table stores differ), so their log Z agree bitwise.
#include <algorithm>
#include <stdexcept>

#include "crf/cuda/checkpoint.cuh"
#include "crf/cuda/recurrence.cuh"
#include "crf/cuda/reduce.cuh"

namespace timitseg::crf::cuda_impl {
namespace {

constexpr int kRescalePeriod = 16;
constexpr double kRescaleMargin = 256.0;
constexpr double kSumLo = 0x1p-500;
constexpr double kSumHi = 0x1p1000;
constexpr double kEtMin = 0x1p-900;
constexpr double kLn2 = 0.69314718055994530942;
// Threads of the unrolled variants (J2 = 5: C <= 40; J2 = 8), so that ED and
// ET fit in registers (at most 12 warps: 168 registers a thread; 16: 128).
constexpr int small_threads(int J2) { return J2 == 5 ? 384 : 512; }
// Table warps: up to 3, one value of the two rows (2 C) a thread when C <= 48.
constexpr int kMaxTableWarps = 3;

// The label groups, and the warps writing the tables when `tables` (at least
// one; as many as fit under `max_threads`, at most kMaxTableWarps and 2 C / 32).
int lse_fast_threads(int C, int G, bool tables, int max_threads) {
  const int nmain = std::max(32, (C * G + 31) / 32 * 32);
  if (!tables) return nmain;
  const int room = (max_threads - nmain) / 32, need = (2 * C + 31) / 32;
  return nmain + 32 * std::max(1, std::min({room, need, kMaxTableWarps}));
}

template <int G>
__device__ __forceinline__ double group_sum(double v, unsigned mask) {
#pragma unroll
  for (int off = G / 2; off >= 1; off >>= 1) v += __shfl_xor_sync(mask, v, off, G);
  return v;
}
// max(a, b) for operands that are never NaN (offsets, log values: finite or
// -inf): one compare and two selects, where fmax also handles NaN (about
// twice the instructions on the sequential path).
__device__ __forceinline__ double max_nn(double a, double b) { return b > a ? b : a; }

template <int G>
__device__ __forceinline__ double group_max(double v, unsigned mask) {
#pragma unroll
  for (int off = G / 2; off >= 1; off >>= 1) v = max_nn(v, __shfl_xor_sync(mask, v, off, G));
  return v;
}

// A normal positive x as m 2^e with m in [0.5, 1) (bit operations, no log).
__device__ __forceinline__ double split_exp(double x, int& e) {
  const int hi = __double2hiint(x);
  e = ((hi >> 20) & 0x7ff) - 1022;
  return __hiloint2double((hi & 0x800fffff) | 0x3fe00000, __double2loint(x));
}

// Ring slot of the row `d` positions away from `slot` (towards the start
// for the forward, towards the end for the backward), 0 <= d <= K.
__device__ __forceinline__ int ring_slot(int slot, int d, bool rev, int K) {
  int src = rev ? slot + d : slot - d;
  src += src < 0 ? K : 0;
  src -= src >= K ? K : 0;
  return src;
}

// Transition from c2 to c in the direction of the recurrence (forward A[c2][c],
// backward A[c][c2]).
__device__ __forceinline__ float trans(const float* A, int C, bool rev, int c, int c2) {
  return rev ? A[c * C + c2] : A[c2 * C + c];
}

// Shared memory, all float64: the rings q ([2K][C] when mirrored, else
// [K][C]), woff, wm and ED [K][C]; ET [C][C]; xoff, xm, P, yoff, ym [2][CP]
// (by the parity of the step; CP >= C, the entries past C padding: xoff -inf,
// xm 1, P 0); cur [3][C] (cum_scores of the rows of steps s, s+1, s+2 modulo
// 3). With the per-step buffers one __syncthreads per position suffices
// (lse_fast_kernel). The mirrored ring keeps row r also in row r + K (q2), so
// the unrolled phase 1 reads the K rows before / after a slot without a wrap.
struct FastSmem {
  double *q, *q2, *woff, *wm, *ED, *ET, *xoff, *xm, *P, *yoff, *ym, *cur;
  int CP;
};

// q[i] of the ring (i = row * C + c, row < K), and its mirror.
__device__ __forceinline__ void put_q(const FastSmem& m, int i, double v) {
  m.q[i] = v;
  if (m.q2) m.q2[i] = v;
}

// The buffers of one step: parity `par` (= s & 1) for xoff, xm, P, yoff, ym;
// `cb` (= s % 3) for cur.
__device__ __forceinline__ FastSmem step_view(const FastSmem& m, int C, int par, int cb) {
  FastSmem v = m;
  const int o = par * m.CP;
  v.xoff += o, v.xm += o, v.P += o, v.yoff += o, v.ym += o;
  v.cur += cb * C;
  return v;
}

__device__ FastSmem carve(unsigned char* raw, int K, int C, bool mirror, int CP) {
  FastSmem m;
  double* p = reinterpret_cast<double*>(raw);
  const int KC = K * C;
  m.CP = CP;
  m.q = p, p += KC;
  m.q2 = mirror ? p : nullptr;
  if (mirror) p += KC;
  m.woff = p, p += KC;
  m.wm = p, p += KC;
  m.ED = p, p += KC;
  m.ET = p, p += C * C;
  m.xoff = p, p += 2 * CP;
  m.xm = p, p += 2 * CP;
  m.P = p, p += 2 * CP;
  m.yoff = p, p += 2 * CP;
  m.ym = p, p += 2 * CP;
  m.cur = p;  // 3 * C
  return m;
}

// Exact two-pass log-sum-exp over the group (fallbacks; rare, kept out of line).
template <int G>
__device__ __noinline__ double exact_phase1(const FastSmem m, const float* D, int K, int C, int c, int slot, bool rev,
                                            int dmax, int lane, unsigned gmask) {
  double mx = kNegInf;
  for (int k = lane; k < dmax; k += G) {
    const int row = ring_slot(slot, k + 1, rev, K) * C + c;
    mx = fmax(mx, static_cast<double>(D[k * C + c]) + (m.woff[row] + log(m.wm[row])));
  }
  mx = group_max<G>(mx, gmask);
  if (mx == kNegInf) return kNegInf;
  double s = 0.0;
  for (int k = lane; k < dmax; k += G) {
    const int row = ring_slot(slot, k + 1, rev, K) * C + c;
    const double t = static_cast<double>(D[k * C + c]) + (m.woff[row] + log(m.wm[row]));
    if (t != kNegInf) s += exp(t - mx);
  }
  return mx + log(group_sum<G>(s, gmask));
}

template <int G>
__device__ __noinline__ double exact_phase2(const FastSmem m, const float* A, int C, int c, bool rev, int lane,
                                            unsigned gmask) {
  double mx = kNegInf;
  for (int c2 = lane; c2 < C; c2 += G)
    mx = fmax(mx, (m.xoff[c2] + log(m.xm[c2])) + static_cast<double>(trans(A, C, rev, c, c2)));
  mx = group_max<G>(mx, gmask);
  if (mx == kNegInf) return kNegInf;
  double s = 0.0;
  for (int c2 = lane; c2 < C; c2 += G) {
    const double t = (m.xoff[c2] + log(m.xm[c2])) + static_cast<double>(trans(A, C, rev, c, c2));
    if (t != kNegInf) s += exp(t - mx);
  }
  return mx + log(group_sum<G>(s, gmask));
}

// Stores w = wo + log(wmv) of row `slot` into the rings: q relative to ref
// (qv when the caller has it, NaN otherwise), or, on a reset step (every
// kRescalePeriod steps, or wo above ref + kRescaleMargin), ref := the max
// offset over the rows the next steps read and their q recomputed. Called by
// the whole group (same values in every lane).
template <int G>
__device__ __forceinline__ void ring_store(const FastSmem& m, int K, int C, bool rev, int s, int slot, int c, double wo,
                                           double wmv, double qv, double& ref, int lane, unsigned gmask) {
  const int at = slot * C + c;
  const bool reset = (s % kRescalePeriod == 0) || !(wo <= ref + kRescaleMargin);
  if (!reset) {
    if (lane == 0) {
      m.woff[at] = wo;
      m.wm[at] = wmv;
      // ref = -inf only with wo = -inf here
      put_q(m, at, qv == qv ? qv : (ref == kNegInf ? 0.0 : wmv * exp(wo - ref)));
    }
    return;
  }
  if (lane == 0) m.woff[at] = wo, m.wm[at] = wmv;
  __syncwarp(gmask);
  const int nr = min(K, s + 1);  // rows pos, pos -+ 1, ...: the window of the next step
  double mx = kNegInf;
  for (int j = lane; j < nr; j += G) mx = max_nn(mx, m.woff[ring_slot(slot, j, rev, K) * C + c]);
  mx = group_max<G>(mx, gmask);
  for (int j = lane; j < nr; j += G) {
    const int row = ring_slot(slot, j, rev, K) * C + c;
    put_q(m, row, mx == kNegInf ? 0.0 : m.wm[row] * exp(m.woff[row] - mx));
  }
  ref = mx;
}

// The unrolled variants' start (the whole block): the mirrored ring 0 (the
// rows before the first position), the padding of the label buffers (offset
// -inf, mantissa 1, P 0).
__device__ void fast_zero(const FastSmem& m, int K, int C, int tid) {
  for (int i = tid; i < 2 * K * C; i += blockDim.x) m.q[i] = 0.0;
  for (int i = tid; i < 2 * (m.CP - C); i += blockDim.x) {
    const int at = (i & 1) * m.CP + C + (i >> 1);
    m.xoff[at] = kNegInf, m.xm[at] = 1.0, m.P[at] = 0.0;
  }
  __syncthreads();
}

// Per-label set-up by the group of c: Dmax, Amax, ED, ET and whether every
// finite ET is >= kEtMin; row 0 of the recurrence (forward sigma[0] = s,
// backward gamma[L] = e; alpha[0] / rho[L] = -inf) into the ring and tables.
template <int G>
__device__ void fast_init(const RecArgs& a, const FastSmem& m, bool rev, int L, int c, int lane, unsigned gmask,
                          const float* cum, const float* onset, double* X, double* Y, double& dmx, double& amx,
                          bool& etok, double& ref) {
  const int K = a.K, C = a.C;
  dmx = kNegInf, amx = kNegInf;
  for (int k = lane; k < K; k += G) dmx = fmax(dmx, static_cast<double>(a.D[k * C + c]));
  for (int c2 = lane; c2 < C; c2 += G) amx = fmax(amx, static_cast<double>(trans(a.A, C, rev, c, c2)));
  dmx = group_max<G>(dmx, gmask);
  amx = group_max<G>(amx, gmask);
  for (int k = lane; k < K; k += G) m.ED[k * C + c] = dmx == kNegInf ? 0.0 : exp(static_cast<double>(a.D[k * C + c]) - dmx);
  bool small = false;
  for (int c2 = lane; c2 < C; c2 += G) {
    const double t = static_cast<double>(trans(a.A, C, rev, c, c2));
    const double et = amx == kNegInf ? 0.0 : exp(t - amx);
    m.ET[c * C + c2] = et;
    small = small || (t != kNegInf && !(et >= kEtMin));
  }
  etok = !__any_sync(gmask, small);
  const int pos0 = rev ? L : 0, pos1 = rev ? L - 1 : 1;
  const double y0 = rev ? a.e[c] : a.s[c];
  const double cp = cum[pos0 * C + c];
  double w = rev ? y0 + cp : y0 - cp;
  if (!rev && onset) w += static_cast<double>(onset[c]);  // o[0,c]
  ref = w;
  if (lane == 0) {
    if (X) X[pos0 * C + c] = kNegInf;
    if (Y) Y[pos0 * C + c] = y0;
    const int at = (pos0 % K) * C + c;
    m.woff[at] = w;
    m.wm[at] = 1.0;
    put_q(m, at, w == kNegInf ? 0.0 : 1.0);
    const double cp1 = cum[pos1 * C + c];
    m.cur[C + c] = cp1;  // buffer of step 1
    // An upper bound of alpha[1,c] / rho[L-1,c] (reference of step 1, its max over labels).
    m.xoff[c] = rev ? (ref + dmx) - cp1 : (ref + dmx) + cp1;
  }
}

// Phase 1 of step s (position pos) for label c: segments ending at pos
// (forward) / starting at pos (backward); xoff, xm and P (against the
// reference R) of the row into shared memory.
template <int G, int J>
__device__ __forceinline__ void fast_phase1(const RecArgs& a, const FastSmem& m, bool rev, int s, int pos, int slot,
                                            int c, const double* cur, const float* onset, double ref, double dmx,
                                            double R, const double (&ed)[J > 0 ? J : 1], int lane, unsigned gmask) {
  const int K = a.K, C = a.C;
  const int dmax = min(K, s);
  const double cp = cur[c];
  // x = base + e log 2 + log m for a sum m 2^e; P = sum * exp(base - R),
  // the exp independent of the sum (off the sequential path).
  double base = rev ? (ref + dmx) - cp : (ref + dmx) + cp;
  // Backward: every segment summed into rho[pos,c] starts at pos.
  const double o = (rev && onset) ? static_cast<double>(onset[pos * C + c]) : 0.0;
  if (rev && onset) base += o;
  const double F = exp(base - R);
  double part = 0.0;
  if constexpr (J > 0) {
    // At most J terms per lane (K <= J G): unrolled, no bound. ED[k = lane +
    // j G][c] in registers (0 for k >= K), the mirrored ring read at row
    // slot -+ (k + 1) without a wrap (k >= K: a valid row, times 0); rows
    // before the first position are 0 (zeroed at the start), so the terms
    // d > s add +0: the same sum, bit for bit, as the loop below.
    const double* q0 = m.q + (rev ? slot + 1 : slot + K - 1) * C + c;  // the row of d = 1
    const int dir = rev ? C : -C;
#pragma unroll
    for (int j = 0; j < J; ++j) part = fma(ed[j], q0[min(lane + j * G, K - 1) * dir], part);
  } else {
    for (int k = lane; k < dmax; k += G) part = fma(m.ED[k * C + c], m.q[ring_slot(slot, k + 1, rev, K) * C + c], part);
  }
  const double sum = group_sum<G>(part, gmask);
  double xo, xmv = 1.0, pv;
  if (sum >= kSumLo && sum <= kSumHi) {
    int e = 0;
    xmv = split_exp(sum, e);
    xo = base + static_cast<double>(e) * kLn2;
    pv = (F >= 0x1p-1000 && F <= 0x1p1000) ? sum * F : xmv * exp(xo - R);
  } else {
    const double v = exact_phase1<G>(m, a.D, K, C, c, slot, rev, dmax, lane, gmask);
    xo = rev ? v - cp : v + cp;
    if (rev && onset && xo > kNegInf) xo += o;
    pv = xo == kNegInf ? 0.0 : (R == kNegInf ? INFINITY : exp(xo - R));
  }
  if (lane == 0) {
    m.xoff[c] = xo;
    m.xm[c] = xmv;
    m.P[c] = pv;
  }
}

// Phase 2 of step s for label c: the C x C transition as a matrix-vector
// product; the max offset of the row (R := the next reference); w into the
// rings; with store, yoff / ym for the table warp.
template <int G, int J>
__device__ __forceinline__ void fast_phase2(const RecArgs& a, const FastSmem& m, bool rev, int s, int pos, int slot,
                                            int c, const double* cur, const float* onset, bool store, double amx,
                                            bool etok, const double (&et)[J > 0 ? J : 1], double& ref, double& R,
                                            int lane, unsigned gmask) {
  const int K = a.K, C = a.C;
  // w = wbase + e log 2 + log m for a sum m 2^e; q = sum * exp(wbase - ref).
  const double cp = cur[c];
  double wbase = rev ? (R + amx) + cp : (R + amx) - cp;
  if (!rev && onset) wbase += static_cast<double>(onset[pos * C + c]);
  const double F = exp(wbase - ref);
  double part = 0.0, mx = kNegInf;
  if constexpr (J > 0) {
    // C <= J G <= CP: unrolled, no bound: ET[c][lane + j G] in registers (0
    // past C), the padding of P (0) and xoff (-inf) adds nothing.
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const int c2 = lane + j * G;
      part = fma(et[j], m.P[c2], part);
      mx = max_nn(mx, m.xoff[c2]);
    }
  } else {
    for (int c2 = lane; c2 < C; c2 += G) {
      part = fma(m.ET[c * C + c2], m.P[c2], part);
      mx = max_nn(mx, m.xoff[c2]);
    }
  }
  const double sum = group_sum<G>(part, gmask);
  mx = group_max<G>(mx, gmask);
  double yo, ymv = 1.0, wo, qv = NAN;
  if (amx != kNegInf && etok && sum >= kSumLo && sum <= kSumHi) {
    int e = 0;
    ymv = split_exp(sum, e);
    yo = (R + amx) + static_cast<double>(e) * kLn2;
    wo = wbase + static_cast<double>(e) * kLn2;
    if (F >= 0x1p-1000 && F <= 0x1p1000) qv = sum * F;
  } else {
    // amx = -inf: every transition into c is -inf.
    yo = amx == kNegInf ? kNegInf : exact_phase2<G>(m, a.A, C, c, rev, lane, gmask);
    wo = rev ? yo + cp : yo - cp;
    if (!rev && onset) wo += static_cast<double>(onset[pos * C + c]);
  }
  if (lane == 0 && store) m.yoff[c] = yo, m.ym[c] = ymv;
  ring_store<G>(m, K, C, rev, s, slot, c, wo, ymv, qv, ref, lane, gmask);
  R = mx;
  __syncwarp(gmask);  // the ring row (written by lane 0 or the reset) before the next phase 1 reads it
}

// The table warps' part of step s (threads nmain..): the log of each value,
// i < C: the X row of this step (buffers v); C + c2: the Y row of the
// previous one; kCk: only the rows of rg (a checkpointed block's), else
// every row (the full run's code as it was, tests unchanged in the loop).
template <bool kCk>
__device__ __forceinline__ void write_tables(const FastSmem& m, const FastSmem& v, int C, bool rev, int s, int L,
                                             int pos, int tid, int nmain, double* X, double* Y, const CkRange& rg) {
  const FastSmem u = step_view(m, C, (s - 1) & 1, 0);
  const int prev = rev ? pos + 1 : pos - 1;
  const bool wx = !kCk || (X && s < L && pos >= rg.xlo && pos < rg.xhi);
  const bool wy = !kCk || (Y && s > rg.s0 && prev >= rg.ylo && prev < rg.yhi);
  const int nh = static_cast<int>(blockDim.x) - nmain;
  for (int i = tid - nmain; i < 2 * C; i += nh) {
    if (i < C) {
      if (kCk ? wx : (X && s < L)) X[pos * C + i] = v.xoff[i] + log(v.xm[i]);
    } else if (kCk ? wy : (Y && s > 1)) {
      Y[prev * C + (i - C)] = u.yoff[i - C] + log(u.ym[i - C]);
    }
  }
}

// X (Y) when row `pos` is one of the rows [lo, hi) the block writes, else null.
__device__ __forceinline__ double* row_or_null(double* X, int pos, int lo, int hi) {
  return (pos >= lo && pos < hi) ? X : nullptr;
}

// The kernel's start, the whole block: the zeroed rings (unrolled variants),
// the per-label set-up and row 0 (fast_init; its table row only when the block
// starts there and writes it), ED / ET into registers and R, the reference of
// the first step; a resumed block then takes the ring, ref, R of its
// checkpoint (checkpoint.cuh) and the cum_scores row of its first step.
template <int G, int J1, int J2, bool kCk>
__device__ __forceinline__ void fast_start(const RecArgs& a, const FastSmem& m, const CkRange& rg, bool rev, int b,
                                           int L, int c, int lane, unsigned gmask, bool active, const float* cum,
                                           const float* onset, double* X, double* Y, double& dmx, double& amx,
                                           bool& etok, double& ref, double& R, double (&ed)[J1 > 0 ? J1 : 1],
                                           double (&et)[J2 > 0 ? J2 : 1]) {
  const int K = a.K, C = a.C, tid = threadIdx.x;
  constexpr bool kSmall = J1 > 0;
  if (kSmall) fast_zero(m, K, C, tid);
  const int pos0 = rev ? L : 0;
  double* X0 = !kCk ? X : rg.resume ? nullptr : row_or_null(X, pos0, rg.xlo, rg.xhi);
  double* Y0 = !kCk ? Y : rg.resume ? nullptr : row_or_null(Y, pos0, rg.ylo, rg.yhi);
  if (active) fast_init<G>(a, m, rev, L, c, lane, gmask, cum, onset, X0, Y0, dmx, amx, etok, ref);
  __syncthreads();
#pragma unroll
  for (int j = 0; j < (J1 > 0 ? J1 : 1); ++j) {
    const int k = lane + j * G;
    ed[j] = (kSmall && active && k < K) ? m.ED[k * C + c] : 0.0;
  }
#pragma unroll
  for (int j = 0; j < (J2 > 0 ? J2 : 1); ++j) {
    const int k = lane + j * G;
    et[j] = (kSmall && active && k < C) ? m.ET[c * C + k] : 0.0;
  }
  if (active) {  // the reference of step 1: the max of the bounds of row 1 (buffer 0)
    for (int c2 = lane; c2 < C; c2 += G) R = max_nn(R, m.xoff[c2]);
    R = group_max<G>(R, gmask);
  }
  if (!kCk || !rg.resume) return;
  if (active) {
    ck_restore(ck_state(a, rev, b, rg.j), m.q, m.q2, m.woff, m.wm, K, C, c, lane, G, ref, R);
    const int pos = rev ? L - rg.s0 : rg.s0;
    if (lane == 0) m.cur[(rg.s0 % 3) * C + c] = cum[pos * C + c];
  }
  __syncthreads();
}

// One block per utterance: blocks 0..B-1 forward, B..2B-1 backward (as
// recurrence_kernel); a checkpointed window (kCkResume): 2 B P blocks, one
// per block of positions (ck_map). X/Y tables written only when a.store. J1,
// J2 > 0: at most J1 duration terms (K <= J1 G) and J2 transition terms (C <=
// J2 G) per lane, at most small_threads(J2) threads: the term loops unrolled
// with no bounds, ED / ET in registers, the ring mirrored, the label buffers
// padded to CP = J2 G; J1 = J2 = 0: any K, C. kCk: a.ck_mode may be set
// (false: the code of the full run only, its block range constants).
template <int G, int J1, int J2, bool kCk>
__global__ void __launch_bounds__(J1 > 0 ? small_threads(J2) : kMaxRecThreads, 1) lse_fast_kernel(RecArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int B = a.B, T = a.T, K = a.K, C = a.C;
  bool rev = false;
  int b = 0, jb = 0;
  ck_map<kCk>(a, rev, b, jb);
  if (input_invalid(a.status)) return;
  const int L = a.lengths[b];
  const CkRange rg = kCk ? ck_range(a, rev, jb, L) : CkRange{1, L, 0, INT_MAX, 0, INT_MAX, false, true, 0};
  if (!rg.active) return;
  const int tid = threadIdx.x;
  const int lane = tid % G, c = tid / G;
  const bool active = c < C;
  // With a.store, the warps after the label groups (1 to kMaxTableWarps)
  // write the tables (the log of each value), off the sequential path of the
  // groups; with one value a thread their step is shorter than the groups'.
  const int nmain = (C * G + 31) / 32 * 32;
  const bool helper = tid >= nmain;
  const unsigned gmask = G == 32 ? 0xffffffffu : (((1u << G) - 1u) << ((tid & 31) / G * G));

  const size_t base = static_cast<size_t>(b) * (T + 1) * C;
  const float* cum = a.cum + base;
  const float* onset = a.onset ? a.onset + static_cast<size_t>(b) * T * C : nullptr;  // [T][C] or null
  // [T+1][C]; a window: rows [ck_t0, ck_t0 + ck_rows), addressed by position
  const long long tb = kCk && a.ck_mode == kCkResume ? (static_cast<long long>(b) * a.ck_rows - a.ck_t0) * C
                                              : static_cast<long long>(base);
  double* X = a.store ? (rev ? a.rho : a.alpha) + tb : nullptr;
  double* Y = a.store ? (rev ? a.gamma : a.sigma) + tb : nullptr;
  constexpr bool kSmall = J1 > 0;
  const FastSmem m = carve(smem_raw, K, C, kSmall, kSmall ? J2 * G : C);

  double dmx = kNegInf, amx = kNegInf, ref = kNegInf, R = kNegInf;
  bool etok = true;
  double ed[J1 > 0 ? J1 : 1], et[J2 > 0 ? J2 : 1];  // ED[lane + j G][c], ET[c][lane + j G] (0 past K / C)
  fast_start<G, J1, J2, kCk>(a, m, rg, rev, b, L, c, lane, gmask, active, cum, onset, X, Y, dmx, amx, etok, ref, R, ed,
                        et);

  // One __syncthreads per position: phase 1 of step s writes the buffers of
  // parity s & 1, which phase 2 of step s and the table warp read after the
  // barrier; they are next written in phase 1 of step s + 2, after the next
  // barrier. The ring (own label) is ordered by __syncwarp in the group.
  int cb = rg.s0 % 3;  // s % 3: the cum_scores buffer of step s
  int slot = (rev ? L - rg.s0 : rg.s0) % K;  // pos % K
  for (int s = rg.s0;; ++s) {
    const int pos = rev ? L - s : s;
    if (kCk && a.ck_mode == kCkSave && active) {  // the state at the top of step s (checkpoint.cuh)
      const int jc = ck_index(a, rev, s, L);
      if (jc >= 0) ck_save(ck_state(a, rev, b, jc), m.q, m.woff, m.wm, K, C, c, lane, G, ref, R);
    }
    const FastSmem v = step_view(m, C, s & 1, cb);
    const int cb_next = cb == 2 ? 0 : cb + 1;
    // The next position's cum_scores row: loaded now, stored after phase 1
    // into the buffer of step s + 1 (last read in step s - 2).
    const bool prefetch = s < L && tid < C;
    float next_cum = 0.0f;
    if (prefetch) next_cum = cum[(rev ? pos - 1 : pos + 1) * C + tid];
    if (active) fast_phase1<G, J1>(a, v, rev, s, pos, slot, c, v.cur, onset, ref, dmx, R, ed, lane, gmask);
    if (prefetch) m.cur[cb_next * C + tid] = next_cum;
    __syncthreads();
    if (helper) write_tables<kCk>(m, v, C, rev, s, L, pos, tid, nmain, X, Y, rg);
    if (s == rg.s1) break;  // sigma[L] / gamma[0] are never used; a block of a window ends earlier
    if (active)
      fast_phase2<G, J2>(a, v, rev, s, pos, slot, c, v.cur, onset, Y != nullptr, amx, etok, et, ref, R, lane, gmask);
    cb = cb_next;
    slot = rev ? (slot == 0 ? K - 1 : slot - 1) : (slot == K - 1 ? 0 : slot + 1);
  }
  if (rg.s1 != L) return;  // a block of a window that ends before the last row

  // log Z from the exact last row (forward alpha[L], backward rho[0]), which
  // is also the last X row (buffer L & 1; buffer 0 of P is free by now).
  if (active && lane == 0) {
    const FastSmem v = step_view(m, C, L & 1, 0);
    m.P[c] = v.xoff[c] + log(v.xm[c]);
    const int last = rev ? 0 : L;
    if (X && (!kCk || (last >= rg.xlo && last < rg.xhi))) X[last * C + c] = m.P[c];
    if (kCk && a.edge) a.edge[static_cast<size_t>(rev ? B + b : b) * C + c] = m.P[c];
  }
  if (kCk && a.ck_mode == kCkResume) return;  // log Z is the full run's
  __syncthreads();
  __shared__ double fin_val;
  __shared__ int fin_idx;
  finish_recurrence<LseAcc, false>(a, b, rev, m.P, fin_val, fin_idx);
}

template <int G, int J1 = 0, int J2 = 0>
void launch_g(RecArgs& a, int blocks, size_t smem, cudaStream_t stream) {
  const auto kernel = a.ck_mode != kCkNone ? lse_fast_kernel<G, J1, J2, true> : lse_fast_kernel<G, J1, J2, false>;
  if (smem > 48 * 1024) allow_dynamic_smem(kernel, smem);
  const int max_threads = J1 > 0 ? small_threads(J2) : kMaxRecThreads;
  kernel<<<blocks, lse_fast_threads(a.C, G, a.store != 0, max_threads), smem, stream>>>(a);
  TS_LAUNCHED("lse_fast_kernel");
}

}  // namespace

// Dynamic shared memory, plus 64 bytes for the kernel's static fin_val / fin_idx.
size_t lse_fast_smem_bytes(int K, int C) {
  const size_t k = static_cast<size_t>(K), c = static_cast<size_t>(C);
  return sizeof(double) * (4 * k * c + c * c + 13 * c) + 64;
}

// The unrolled variants: the ring mirrored (K C more), label buffers of CP.
static size_t lse_fast_small_smem_bytes(int K, int C, int CP) {
  const size_t k = static_cast<size_t>(K), c = static_cast<size_t>(C), cp = static_cast<size_t>(CP);
  return sizeof(double) * (5 * k * c + c * c + 10 * cp + 3 * c) + 64;
}

bool lse_fast_fits(int K, int C, int G, size_t smem_limit) {
  // The label groups plus the table warp within the thread cap.
  return (static_cast<long long>(C) * G + 31) / 32 * 32 + 32 <= kMaxRecThreads &&
         lse_fast_smem_bytes(K, C) <= smem_limit &&
         (G == 4 || G == 8 || G == 16 || G == 32);
}

void launch_lse_fast(const Layout& l, RecArgs& a, int blocks, size_t smem_limit, cudaStream_t stream) {
  if (!lse_fast_fits(l.K, l.C, a.G, smem_limit))
    throw std::logic_error("cuda backend: launch_lse_fast called for dims it does not fit");
  const size_t smem = lse_fast_smem_bytes(l.K, l.C) - 64;  // the dynamic part
  // The unrolled variants for the default G = 8: K <= 32 or 64 (J1 = 4, 8),
  // C <= 40 or 64 (J2 = 5, 8), where their shared memory fits too.
  const int J1 = l.K <= 32 ? 4 : (l.K <= 64 ? 8 : 0), J2 = l.C <= 40 ? 5 : (l.C <= 64 ? 8 : 0);
  const size_t small_smem = lse_fast_small_smem_bytes(l.K, l.C, J2 * 8) - 64;
  if (a.G == 8 && J1 > 0 && J2 > 0 && (l.C * 8 + 31) / 32 * 32 + 32 <= small_threads(J2) &&
      small_smem + 64 <= smem_limit) {
    if (J1 == 4)
      J2 == 5 ? launch_g<8, 4, 5>(a, blocks, small_smem, stream) : launch_g<8, 4, 8>(a, blocks, small_smem, stream);
    else
      J2 == 5 ? launch_g<8, 8, 5>(a, blocks, small_smem, stream) : launch_g<8, 8, 8>(a, blocks, small_smem, stream);
    return;
  }
  switch (a.G) {
    case 4: launch_g<4>(a, blocks, smem, stream); break;
    case 8: launch_g<8>(a, blocks, smem, stream); break;
    case 16: launch_g<16>(a, blocks, smem, stream); break;
    default: launch_g<32>(a, blocks, smem, stream); break;
  }
}

}  // namespace timitseg::crf::cuda_impl
