// The scaled linear-domain log-sum-exp recurrence (docs/cuda.md "Fast
// recurrence"): the forward (alpha, sigma) and backward (rho, gamma)
// recurrences of docs/crf.md with one exp/log per (position, label) instead of
// one exp per (position, label, duration or source label). One block per
// utterance and direction, labels owned by groups of G lanes as in
// recurrence.cu; all state float64.
//
// Forward (backward: mirror, in brackets). With the ring value
//   w[u,c] = sigma[u,c] - cum[u,c] + o[u,c]          [w[v,c] = gamma[v,c] + cum[v,c]]
// phase 1 is
//   alpha[t,c] = cum[t,c] + lse_d (D[d-1,c] + w[t-d,c])
//              = cum[t,c] + Dmax[c] + ref[c] + log sum_d ED[d-1,c] q[t-d,c]
//   [rho[u,c] = o[u,c] - cum[u,c] + lse_d (D[d-1,c] + w[u+d,c])]
// where ED[k,c] = exp(D[k,c] - Dmax[c]) <= 1 (Dmax[c] = max_k D[k,c]) and the
// linear ring q[u,c] = exp(w[u,c] - ref[c]) with a per-label reference ref[c].
// Phase 2 is a matrix-vector product with the row max M = max_c' alpha[t,c']:
//   sigma[t,c] = M + Amax[c] + log sum_c' ET[c][c'] P[c'],  P[c'] = exp(alpha[t,c'] - M) <= 1,
//   ET[c][c'] = exp(A[c',c] - Amax[c]) <= 1              [A[c,c'], row max]
//
// ref[c] is reset to the window max of w (so every q <= 1) every
// kRescalePeriod positions and whenever a new w exceeds ref[c] +
// kRescaleMargin; between resets q <= exp(kRescaleMargin). Exactness: every
// factor is either <= 1 (ED, ET, P) or <= exp(256) (q), so a product that
// underflows is below 2^-1022 * 2^370 = 2^-652; a sum accepted in
// [kSumLo, kSumHi] = [2^-500, 2^1000] therefore loses nothing above 2^-150 of
// itself, and the result is the log-sum-exp to float64 rounding. A sum outside
// that range (all terms tiny, -inf entries, scores of +-1e4) falls back, for
// that (position, label) only, to the exact two-pass log-sum-exp of
// recurrence.cu on the log ring wl. The choice depends on the data alone, so
// reruns are bitwise identical; log_partition and backward run the same code
// (only the table stores differ), so their log Z agree bitwise.
#include <stdexcept>

#include "crf/cuda/recurrence.cuh"
#include "crf/cuda/reduce.cuh"

namespace timitseg::crf::cuda_impl {
namespace {

constexpr int kRescalePeriod = 16;
constexpr double kRescaleMargin = 256.0;
constexpr double kSumLo = 0x1p-500;
constexpr double kSumHi = 0x1p1000;

// Symmetric xor-butterfly sum over the G lanes of a group: every lane ends
// with the same bits.
__device__ __forceinline__ double group_sum(double v, int G, unsigned mask) {
  for (int off = G / 2; off >= 1; off >>= 1) v += __shfl_xor_sync(mask, v, off, G);
  return v;
}
__device__ __forceinline__ double group_max(double v, int G, unsigned mask) {
  for (int off = G / 2; off >= 1; off >>= 1) v = fmax(v, __shfl_xor_sync(mask, v, off, G));
  return v;
}

// Ring slot of the row `d` positions away from `slot` (towards the start
// for the forward, towards the end for the backward), 0 <= d <= K.
__device__ __forceinline__ int ring_slot(int slot, int d, bool rev, int K) {
  int src = rev ? slot + d : slot - d;
  src += src < 0 ? K : 0;
  src -= src >= K ? K : 0;
  return src;
}

// Shared memory, all float64: wl, q, ED [K][C]; ET [C][C]; ref, dmax, amax,
// xrow, P [C]; cur [2][C] (the cum_scores row of this / the next position); mrow.
struct FastSmem {
  double *wl, *q, *ED, *ET, *ref, *dmax, *amax, *xrow, *P, *cur, *mrow;
};

__device__ FastSmem carve(unsigned char* raw, int K, int C) {
  FastSmem m;
  double* p = reinterpret_cast<double*>(raw);
  const size_t KC = static_cast<size_t>(K) * C;
  m.wl = p, p += KC;
  m.q = p, p += KC;
  m.ED = p, p += KC;
  m.ET = p, p += static_cast<size_t>(C) * C;
  m.ref = p, p += C;
  m.dmax = p, p += C;
  m.amax = p, p += C;
  m.xrow = p, p += C;
  m.P = p, p += C;
  m.cur = p, p += 2 * C;
  m.mrow = p;
  return m;
}

// Transition from c2 to c in the direction of the recurrence (forward A[c2][c],
// backward A[c][c2]).
__device__ __forceinline__ float trans(const float* A, int C, bool rev, int c, int c2) {
  return rev ? A[c * C + c2] : A[c2 * C + c];
}

// The parameters' linear forms (ED, ET with their maxima) and row 0 of the
// recurrence: forward sigma[0] = s, backward gamma[L] = e; alpha[0] / rho[L]
// = -inf. The ring gets w of row 0 with ref = w (q = 1, or 0 for -inf).
__device__ void fast_init(const RecArgs& a, const FastSmem& m, bool rev, int L, const float* cum, const float* onset,
                          double* X, double* Y) {
  const int K = a.K, C = a.C, tid = threadIdx.x, nthreads = blockDim.x;
  for (int c = tid; c < C; c += nthreads) {
    double dm = kNegInf, am = kNegInf;
    for (int k = 0; k < K; ++k) dm = fmax(dm, static_cast<double>(a.D[k * C + c]));
    for (int c2 = 0; c2 < C; ++c2) am = fmax(am, static_cast<double>(trans(a.A, C, rev, c, c2)));
    m.dmax[c] = dm;
    m.amax[c] = am;
  }
  __syncthreads();
  for (int i = tid; i < K * C; i += nthreads) {
    const double dm = m.dmax[i % C];
    m.ED[i] = dm == kNegInf ? 0.0 : exp(static_cast<double>(a.D[i]) - dm);
  }
  for (int i = tid; i < C * C; i += nthreads) {
    const int c = i / C, c2 = i % C;
    const double am = m.amax[c];
    m.ET[i] = am == kNegInf ? 0.0 : exp(static_cast<double>(trans(a.A, C, rev, c, c2)) - am);
  }
  const int pos0 = rev ? L : 0, pos1 = rev ? L - 1 : 1;
  const int slot0 = pos0 % K;
  for (int c = tid; c < C; c += nthreads) {
    const double y0 = rev ? a.e[c] : a.s[c];
    if (X) X[static_cast<size_t>(pos0) * C + c] = kNegInf;
    if (Y) Y[static_cast<size_t>(pos0) * C + c] = y0;
    const double cp = cum[static_cast<size_t>(pos0) * C + c];
    double w = rev ? y0 + cp : y0 - cp;
    if (!rev && onset) w += static_cast<double>(onset[c]);  // o[0,c]
    m.wl[slot0 * C + c] = w;
    m.q[slot0 * C + c] = w == kNegInf ? 0.0 : 1.0;
    m.ref[c] = w;
    m.cur[C + c] = cum[static_cast<size_t>(pos1) * C + c];  // buffer of step 1
  }
}

// Phase 1 for label c at position pos (step s): X[pos,c] (alpha / rho).
__device__ __forceinline__ double fast_phase1(const RecArgs& a, const FastSmem& m, bool rev, int pos, int slot,
                                              int dmax, int c, const double* cur, const float* onset, int lane, int G,
                                              unsigned gmask) {
  const int K = a.K, C = a.C;
  double part = 0.0;
  for (int k = lane; k < dmax; k += G) part = fma(m.ED[k * C + c], m.q[ring_slot(slot, k + 1, rev, K) * C + c], part);
  const double sum = group_sum(part, G, gmask);
  double v;
  if (sum >= kSumLo && sum <= kSumHi) {
    v = (m.ref[c] + m.dmax[c]) + log(sum);
  } else {  // exact fallback on the log ring
    auto term = [=](int k) {
      return static_cast<double>(a.D[k * C + c]) + m.wl[ring_slot(slot, k + 1, rev, K) * C + c];
    };
    int arg = 0;
    v = group_reduce<false>(dmax, lane, G, gmask, term, arg);
  }
  const double cp = cur[c];
  double x = rev ? v - cp : v + cp;
  // Backward: every segment summed into rho[pos,c] starts at pos.
  if (rev && onset && x > kNegInf) x += static_cast<double>(onset[static_cast<size_t>(pos) * C + c]);
  return x;
}

// Phase 2 for label c: Y[pos,c] (sigma / gamma) from P and ET, with the exact
// fallback on xrow.
__device__ __forceinline__ double fast_phase2(const RecArgs& a, const FastSmem& m, bool rev, int c, double M, int lane,
                                              int G, unsigned gmask) {
  const int C = a.C;
  const double am = m.amax[c];
  if (M == kNegInf || am == kNegInf) return kNegInf;  // every term is -inf
  double part = 0.0;
  for (int c2 = lane; c2 < C; c2 += G) part = fma(m.ET[c * C + c2], m.P[c2], part);
  const double sum = group_sum(part, G, gmask);
  if (sum >= kSumLo && sum <= kSumHi) return (M + am) + log(sum);
  auto term = [=](int c2) { return m.xrow[c2] + static_cast<double>(trans(a.A, C, rev, c, c2)); };
  int arg = 0;
  return group_reduce<false>(C, lane, G, gmask, term, arg);
}

// Stores w[pos,c] into the rings: q relative to ref[c], or, on a reset step
// (every kRescalePeriod steps, or w above ref + kRescaleMargin), ref[c] :=
// the max of w over the rows the next steps read and their q recomputed.
// Called by the whole group (w is the same in every lane).
__device__ __forceinline__ void fast_ring_store(const RecArgs& a, const FastSmem& m, bool rev, int s, int slot, int c,
                                                double w, int lane, int G, unsigned gmask) {
  const int K = a.K, C = a.C;
  const double r = m.ref[c];
  const bool reset = (s % kRescalePeriod == 0) || !(w <= r + kRescaleMargin);
  if (!reset) {
    if (lane == 0) {
      m.wl[slot * C + c] = w;
      m.q[slot * C + c] = r == kNegInf ? 0.0 : exp(w - r);  // r = -inf only with w = -inf here
    }
    return;
  }
  if (lane == 0) m.wl[slot * C + c] = w;
  __syncwarp(gmask);
  const int nr = min(K, s + 1);  // rows pos, pos -+ 1, ..., the window of the next step
  double mx = kNegInf;
  for (int j = lane; j < nr; j += G) mx = fmax(mx, m.wl[ring_slot(slot, j, rev, K) * C + c]);
  mx = group_max(mx, G, gmask);
  for (int j = lane; j < nr; j += G) {
    const int row = ring_slot(slot, j, rev, K) * C + c;
    m.q[row] = mx == kNegInf ? 0.0 : exp(m.wl[row] - mx);
  }
  if (lane == 0) m.ref[c] = mx;
}

// One block per utterance: blocks 0..B-1 forward, B..2B-1 backward (as
// recurrence_kernel). X/Y tables written only when a.store.
__global__ void __launch_bounds__(kMaxRecThreads, 1) lse_fast_kernel(RecArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int B = a.B, T = a.T, K = a.K, C = a.C, G = a.G;
  const bool rev = blockIdx.x >= static_cast<unsigned>(B);
  const int b = rev ? blockIdx.x - B : blockIdx.x;
  const int L = a.lengths[b];
  const int tid = threadIdx.x, nthreads = blockDim.x;
  const int lane = tid % G, grp = tid / G, ngroups = nthreads / G;
  const int wlane = tid & 31, warp = tid / 32, nwarps = nthreads / 32;
  const unsigned gmask = G == 32 ? 0xffffffffu : (((1u << G) - 1u) << (wlane / G * G));

  const size_t base = static_cast<size_t>(b) * (T + 1) * C;
  const float* cum = a.cum + base;
  const float* onset = a.onset ? a.onset + static_cast<size_t>(b) * T * C : nullptr;  // [T][C] or null
  double* X = a.store ? (rev ? a.rho : a.alpha) + base : nullptr;    // [T+1][C]
  double* Y = a.store ? (rev ? a.gamma : a.sigma) + base : nullptr;  // [T+1][C]
  const FastSmem m = carve(smem_raw, K, C);

  fast_init(a, m, rev, L, cum, onset, X, Y);
  __syncthreads();

  for (int s = 1; s <= L; ++s) {
    const int pos = rev ? L - s : s;
    const int slot = pos % K;
    const double* cur = m.cur + (s & 1) * C;  // cum_scores row pos
    // The next position's cum_scores row: loaded now, stored after phase 1.
    const int pos_next = rev ? pos - 1 : pos + 1;
    const bool prefetch = s < L && tid < C;
    float next_cum = 0.0f;
    if (prefetch) next_cum = cum[static_cast<size_t>(pos_next) * C + tid];

    // Phase 1: segments ending at pos (forward) / starting at pos (backward).
    const int dmax = min(K, s);
    for (int c = grp; c < C; c += ngroups) {
      const double x = fast_phase1(a, m, rev, pos, slot, dmax, c, cur, onset, lane, G, gmask);
      if (lane == 0) {
        m.xrow[c] = x;
        if (X) X[static_cast<size_t>(pos) * C + c] = x;
      }
    }
    __syncthreads();
    if (s == L) break;  // sigma[L] / gamma[0] are never used

    // Phase 2a: the row max M of xrow (every warp the same bits) and
    // P = exp(xrow - M); the next cum_scores row into the other buffer.
    double* nxt = m.cur + ((s + 1) & 1) * C;
    if (prefetch) nxt[tid] = next_cum;
    for (int c = tid + nthreads; s < L && c < C; c += nthreads) nxt[c] = cum[static_cast<size_t>(pos_next) * C + c];
    for (int c0 = warp * 32; c0 < C; c0 += nwarps * 32) {
      double mx = kNegInf;
      for (int i = wlane; i < C; i += 32) mx = fmax(mx, m.xrow[i]);
      mx = group_max(mx, 32, 0xffffffffu);
      const int c = c0 + wlane;
      if (c < C) m.P[c] = mx == kNegInf ? 0.0 : exp(m.xrow[c] - mx);
      if (c0 == 0 && wlane == 0) *m.mrow = mx;
    }
    __syncthreads();

    // Phase 2b: the C x C transition as a matrix-vector product, then w into the rings.
    const double M = *m.mrow;
    for (int c = grp; c < C; c += ngroups) {
      const double y = fast_phase2(a, m, rev, c, M, lane, G, gmask);
      if (lane == 0 && Y) Y[static_cast<size_t>(pos) * C + c] = y;
      const double cp = cur[c];
      double w = rev ? y + cp : y - cp;
      if (!rev && onset) w += static_cast<double>(onset[static_cast<size_t>(pos) * C + c]);
      fast_ring_store(a, m, rev, s, slot, c, w, lane, G, gmask);
    }
    __syncthreads();
  }

  __shared__ double fin_val;
  __shared__ int fin_idx;
  finish_recurrence<LseAcc, false>(a, b, rev, m.xrow, fin_val, fin_idx);
}

}  // namespace

// Dynamic shared memory, plus 64 bytes for the kernel's static fin_val / fin_idx.
size_t lse_fast_smem_bytes(int K, int C) {
  const size_t k = static_cast<size_t>(K), c = static_cast<size_t>(C);
  return sizeof(double) * (3 * k * c + c * c + 7 * c + 1) + 64;
}

void launch_lse_fast(const Layout& l, RecArgs& a, int blocks, size_t smem_limit, cudaStream_t stream) {
  const size_t smem = lse_fast_smem_bytes(l.K, l.C) - 64;  // the dynamic part
  if (smem + 64 > smem_limit) throw std::logic_error("cuda backend: launch_lse_fast called with too little shared memory");
  if (smem > 48 * 1024)
    TS_CUDA(cudaFuncSetAttribute(lse_fast_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  // Thread shape as launch_recurrence: groups of G lanes, the labels spread
  // evenly over as few rounds as the thread cap allows.
  const int max_groups = kMaxRecThreads / a.G;
  const int rounds = (l.C + max_groups - 1) / max_groups;
  const int groups = (l.C + rounds - 1) / rounds;
  int threads = ((groups * a.G + 31) / 32) * 32;
  threads = std::max(threads, 32);
  lse_fast_kernel<<<blocks, threads, smem, stream>>>(a);
  TS_LAUNCHED("lse_fast_kernel");
}

}  // namespace timitseg::crf::cuda_impl
