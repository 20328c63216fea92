// The constrained forward-backward on the device (docs/crf.md "Confidence"
// and "Training from transcripts"): one utterance's inputs, the S/F/H/G
// tables of its phones and the passes that fill them, shared by the
// confidence kernels (confidence.cu) and the transcript NLL (transcript.cu).
// One thread block per utterance; each row t is one step, one warp per phone
// (strided) and its lanes over the durations, reduced by shuffles in a fixed
// order: results are deterministic.
#pragma once

#include "crf/cuda/common.cuh"
#include "crf/phone_graph.h"

namespace timitseg::crf::cuda_impl {

// Threads of a block of the constrained passes: 16 warps, a warp per phone.
constexpr int kPassThreads = 512;

__device__ inline double lse2(double a, double b) {
  const double m = a > b ? a : b;
  if (m == kNegInf) return kNegInf;
  return m + log(exp(a - m) + exp(b - m));
}

// Lane 0 ends with the warp's maximum / sum (a fixed butterfly: the same
// order on every run).
__device__ inline double warp_max(double v) {
  for (int off = 16; off > 0; off >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}
__device__ inline double warp_sum(double v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// One utterance's inputs (float32 read as float64).
struct ConfUtt {
  int L, K, C;
  const float* cum;  // [L+1][C]
  const float* A;
  const float* D;
  const float* on;   // [L][C] or null
  __device__ double trans(int from, int to) const { return static_cast<double>(A[from * C + to]); }
  __device__ double seg(int v, int d, int c) const {
    const double x = static_cast<double>(cum[static_cast<size_t>(v + d) * C + c]) -
                     static_cast<double>(cum[static_cast<size_t>(v) * C + c]) +
                     static_cast<double>(D[(d - 1) * C + c]);
    return on ? x + static_cast<double>(on[static_cast<size_t>(v) * C + c]) : x;
  }
  __device__ double phone(int v, int r, int c) const {  // pieces of K then the remainder
    double sc = 0.0;
    for (int pos = v; pos < v + r; pos += K) {
      if (pos > v) sc += trans(c, c);
      sc += seg(pos, min(K, v + r - pos), c);
    }
    return sc;
  }
};

struct PostArgs {
  int B, T, K, C, N;
  Params p;
  const float* s;  // never null
  const float* e;  // never null
  const int32_t* phones;
  const int32_t* num_phones;
  const int32_t* optional;
  const int32_t* links;  // [B][N] the phone graph or null (the chain of optional)
  const int32_t* spans;
  double *S, *F, *H, *G;  // [B][T+1][N]
  double* log_z_c;        // [B] or null
  double* out;            // [B][N][3]
};

// The tables of one utterance and the posteriors read from them (docs/crf.md).
struct PostUtt {
  ConfUtt u;
  int np, N;
  const int32_t* y;
  const int32_t* opt;
  const float *s, *e;
  double *S, *F, *H, *G;
  double lz;
  const int32_t* lk = nullptr;  // [np] the phone graph (crf/phone_graph.h) or null: the chain of opt
  // [np] each phone's links and its successors (bit j: phone n + 1 + j may follow), cached in shared
  // memory by constrained_passes (null: computed from lk / opt when asked)
  const int32_t *pm = nullptr, *sm = nullptr;
  __device__ bool optional(int n) const { return opt != nullptr && opt[n] == 1; }
  __device__ int32_t link(int n) const {
    if (pm) return pm[n];
    return lk ? lk[n] : chain_link(n, np, opt);
  }
  __device__ bool precedes(int m, int n) const {  // phone m may come right before phone n
    return m < n && n - 1 - m < kMaxLinkBack && (link(n) >> (n - 1 - m) & 1);
  }
  __device__ int32_t successors(int n) const {
    if (sm) return sm[n];
    int32_t f = 0;
    for (int m = n + 1; m < np && m - 1 - n < kMaxLinkBack; ++m)
      if (link(m) >> (m - 1 - n) & 1) f |= 1 << (m - 1 - n);
    return f;
  }
  __device__ double& at(double* tab, int t, int n) const { return tab[static_cast<size_t>(t) * N + n]; }
  __device__ double entry(int t, int n) const {
    const int32_t l = link(n);
    if (t == 0) return (l & kLinkStart) ? static_cast<double>(s[y[n]]) : kNegInf;
    double acc = kNegInf;  // each phone that may precede n, the nearest first (the set bits, lowest first)
    for (int32_t bits = l & kLinkBackMask; bits != 0; bits &= bits - 1) {
      const int m = n - __ffs(bits);  // bit j: phone n - 1 - j
      if (m >= 0) acc = lse2(acc, at(F, t, m) + u.trans(y[m], y[n]));
    }
    return acc;
  }
  __device__ double span(int n, int a, int b) const {
    if (a < 0 || b > u.L || a >= b) return 0.0;
    return exp(entry(a, n) + u.phone(a, b - a, y[n]) + at(G, b, n) - lz);
  }
  __device__ double starts(int n, int a) const { return a < 0 || a >= u.L ? 0.0 : exp(entry(a, n) + at(H, a, n) - lz); }
  __device__ double ends(int n, int t) const { return t < 1 || t > u.L ? 0.0 : exp(at(F, t, n) + at(G, t, n) - lz); }
  __device__ double skipped(int n) const {
    if (!optional(n)) return 0.0;
    if (n == 0) return exp(static_cast<double>(s[y[1]]) + at(H, 0, 1) - lz);
    if (n == np - 1) return exp(at(F, u.L, np - 2) + static_cast<double>(e[y[np - 2]]) - lz);
    double sum = 0.0;
    for (int t = 1; t < u.L; ++t) sum += exp(at(F, t, n - 1) + u.trans(y[n - 1], y[n + 1]) + at(H, t, n + 1) - lz);
    return sum;
  }
};

// log-sum-exp over d = 1..dmax of term(d), by the calling warp's lanes in one
// pass: each lane keeps its terms' running maximum m and sum of exp(x - m)
// (every term read once), then the warp's maximum and the lanes' sums rescaled
// to it, reduced by the fixed butterfly; every lane holds the result (-inf
// when every term is).
template <class Term>
__device__ double warp_lse(int lane, int dmax, Term term) {
  double m = kNegInf, s = 0.0;
  for (int d = 1 + lane; d <= dmax; d += 32) {
    const double x = term(d);
    if (x > m) {
      s = s * exp(m - x) + 1.0;  // m = -inf: s = 0
      m = x;
    } else if (x > kNegInf) {
      s += exp(x - m);
    }
  }
  const double M = __shfl_sync(0xffffffffu, warp_max(m), 0);
  if (M == kNegInf) return kNegInf;
  const double sum = warp_sum(m == kNegInf ? 0.0 : s * exp(m - M));
  return M + log(sum);
}

// Phones whose links and successors constrained_passes caches in shared memory (more: read as they are).
constexpr int kLinkCache = 1024;

// Forward then backward, a barrier per row (blockDim.x a multiple of 32).
__device__ inline void constrained_passes(PostUtt& x, double* shared_lz) {
  const int tid = threadIdx.x, nt = blockDim.x, lane = tid & 31, warp = tid >> 5, nw = nt >> 5;
  const int L = x.u.L, K = x.u.K, np = x.np;
  const int32_t* y = x.y;
  __shared__ int32_t links_cache[kLinkCache], succ_cache[kLinkCache];
  if (np <= kLinkCache) {
    for (int n = tid; n < np; n += nt) links_cache[n] = x.link(n), succ_cache[n] = x.successors(n);
    __syncthreads();
    x.pm = links_cache, x.sm = succ_cache;
  }
  for (int n = tid; n < np; n += nt) x.at(x.S, 0, n) = x.entry(0, n), x.at(x.F, 0, n) = kNegInf;
  __syncthreads();
  for (int t = 1; t <= L; ++t) {
    for (int n = warp; n < np; n += nw) {  // warp-uniform
      const int c = y[n];
      const double f = warp_lse(lane, min(K, t), [&](int d) { return x.at(x.S, t - d, n) + x.u.seg(t - d, d, c); });
      if (lane == 0) x.at(x.F, t, n) = f;
    }
    __syncthreads();
    for (int n = tid; n < np; n += nt) {
      const double cont = t < L && t >= K ? x.at(x.S, t - K, n) + x.u.seg(t - K, K, y[n]) + x.u.trans(y[n], y[n]) : kNegInf;
      x.at(x.S, t, n) = t < L ? lse2(x.entry(t, n), cont) : kNegInf;
    }
    __syncthreads();
  }
  if (tid == 0) {
    double lz = kNegInf;
    for (int n = np - 1; n >= 0; --n)  // each phone that may end the utterance, the last first
      if (x.link(n) & kLinkEnd) lz = lse2(lz, x.at(x.F, L, n) + static_cast<double>(x.e[y[n]]));
    *shared_lz = lz > kNegInf ? lz : kNegInf;
  }
  __syncthreads();
  x.lz = *shared_lz;
  if (!(x.lz > kNegInf)) return;  // uniform over the block
  for (int n = tid; n < np; n += nt) {
    x.at(x.G, L, n) = (x.link(n) & kLinkEnd) ? static_cast<double>(x.e[y[n]]) : kNegInf;
    x.at(x.H, L, n) = kNegInf;
  }
  __syncthreads();
  for (int t = L - 1; t >= 0; --t) {
    for (int n = warp; n < np; n += nw) {  // warp-uniform
      const int c = y[n];
      const double fin = warp_lse(lane, min(K, L - t), [&](int d) { return x.u.seg(t, d, c) + x.at(x.G, t + d, n); });
      if (lane == 0) {
        const double cont = t + K < L ? x.u.seg(t, K, c) + x.u.trans(c, c) + x.at(x.H, t + K, n) : kNegInf;
        x.at(x.H, t, n) = lse2(fin, cont);
      }
    }
    __syncthreads();
    for (int n = tid; n < np; n += nt) {
      if (t == 0) {
        x.at(x.G, 0, n) = kNegInf;
        continue;
      }
      double acc = kNegInf;  // each phone that may follow n, the nearest first (the set bits, lowest first)
      for (int32_t bits = x.successors(n); bits != 0; bits &= bits - 1) {
        const int m = n + __ffs(bits);  // bit j: phone n + 1 + j
        acc = lse2(acc, x.u.trans(y[n], y[m]) + x.at(x.H, t, m));
      }
      x.at(x.G, t, n) = acc;
    }
    __syncthreads();
  }
}

}  // namespace timitseg::crf::cuda_impl
