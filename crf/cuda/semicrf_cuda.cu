// CUDA semi-Markov CRF backend: the factorized recurrences of
// ../shared/spec/semi-crf.md (forward, backward, Viterbi with traceback).
//
// Design (docs/cuda.md has the long form):
//   * One thread block per utterance runs a recurrence; the forward (alpha,
//     sigma) and backward (rho, gamma) recurrences are independent of each
//     other, so backward() launches both in one grid of 2B blocks.
//   * Inside a block every output label c is owned by a group of G lanes of one
//     warp; a lane reduces its share of the terms (durations d, or source
//     labels c') and the group combines by xor-shuffles in a fixed pattern.
//   * The last K+1 rows of sigma / gamma (float64) and of cum_scores (float32)
//     are kept in a shared-memory ring, with the transition and duration
//     parameters, when they fit; otherwise the same code reads the full
//     [T+1][C] arrays in global memory.
//   * All log-space state is float64 and every exp/log is the float64 one:
//     over T = 100000 steps float32 rounding of a log-sum-exp would drift by
//     ~1e-5 and miss the 1e-5 agreement. Gradient sums are float64 too.
//   * Parameter gradients: per (utterance, chunk of positions) partial sums
//     written to workspace, then summed over (b, chunk) in a fixed order by
//     one thread per entry. No float atomics anywhere; the only atomics are
//     integer counts (gold segment counts) and a 64-bit atomicMin that picks
//     the first invalid input for the error message. Two runs on the same
//     input give bitwise identical results.
//   * Padding rows (t > lengths[b]) are never read; their gradient is 0.
#include "crf/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace timitseg::crf {
namespace {

// ---------------------------------------------------------------------------
// Error checking: every CUDA call and every launch.
[[noreturn]] void cuda_fail(cudaError_t err, const char* what, const char* file, int line) {
  std::ostringstream os;
  os << "cuda backend: " << what << " failed: " << cudaGetErrorString(err) << " (" << file << ":" << line << ")";
  throw std::runtime_error(os.str());
}
#define TS_CUDA(call)                                                  \
  do {                                                                 \
    cudaError_t ts_err_ = (call);                                      \
    if (ts_err_ != cudaSuccess) cuda_fail(ts_err_, #call, __FILE__, __LINE__); \
  } while (0)
#define TS_LAUNCHED(name)                                              \
  do {                                                                 \
    cudaError_t ts_err_ = cudaGetLastError();                          \
    if (ts_err_ != cudaSuccess) cuda_fail(ts_err_, "launch of " name, __FILE__, __LINE__); \
  } while (0)

constexpr double kNegInf = -INFINITY;

// Tensor ids in the status key (smaller id = reported first).
enum TensorId : int {
  kLengths = 0,
  kCum = 1,
  kTransition = 2,
  kDuration = 3,
  kStart = 4,
  kEnd = 5,
  kLabels = 6,
  kLogZ = 7,
  kGold = 8,
};
constexpr unsigned long long kNoError = ~0ULL;
constexpr int kIndexBits = 56;

__device__ inline void report(unsigned long long* status, int tensor, long long index) {
  unsigned long long key = (static_cast<unsigned long long>(tensor) << kIndexBits) |
                           (static_cast<unsigned long long>(index) & ((1ULL << kIndexBits) - 1));
  atomicMin(status, key);  // integer: the smallest key wins whatever the order
}

// ---------------------------------------------------------------------------
// Workspace layout (byte offsets, each 256-aligned). [B][T+1][C] arrays are
// float64 in log space; Viterbi backpointers reuse the rho/gamma storage.
struct Layout {
  int B = 0, T = 0, K = 0, C = 0;
  int nch = 1;    // chunks of positions per utterance for parameter gradients
  int chunk = 1;  // positions per chunk
  size_t status = 0, alpha = 0, sigma = 0, rho = 0, gamma = 0, segtmp = 0, bound = 0, logz = 0, logz_rev = 0,
         gold = 0, cnt_a = 0, cnt_d = 0, cnt_s = 0, cnt_e = 0, part = 0, zeros = 0, total = 0;
};

size_t align256(size_t x) { return (x + 255) / 256 * 256; }

Layout make_layout(const Dims& d) {
  Layout l;
  l.B = static_cast<int>(d.B);
  l.T = static_cast<int>(d.T);
  l.K = static_cast<int>(d.K);
  l.C = static_cast<int>(d.C);
  // Fixed from the dims alone (never from the device), so the summation order
  // and hence the bits of the gradients are the same on every GPU.
  const int64_t want = (512 + d.B - 1) / d.B;
  const int64_t most = (d.T + 15) / 16;
  l.nch = static_cast<int>(std::max<int64_t>(1, std::min(want, most)));
  l.chunk = static_cast<int>((d.T + l.nch - 1) / l.nch);
  const size_t btc = static_cast<size_t>(d.B) * static_cast<size_t>(d.T + 1) * static_cast<size_t>(d.C);
  const size_t B = static_cast<size_t>(d.B), C = static_cast<size_t>(d.C), K = static_cast<size_t>(d.K);
  size_t off = 0;
  auto take = [&](size_t bytes) {
    size_t at = off;
    off += align256(bytes);
    return at;
  };
  l.status = take(64);
  l.alpha = take(btc * sizeof(double));
  l.sigma = take(btc * sizeof(double));
  l.rho = take(btc * sizeof(double));
  l.gamma = take(btc * sizeof(double));
  l.segtmp = take(B * static_cast<size_t>(d.T) * 3 * sizeof(int32_t));
  l.bound = take(B * static_cast<size_t>(d.T + 1) * sizeof(int32_t));
  l.logz = take(B * sizeof(double));
  l.logz_rev = take(B * sizeof(double));
  l.gold = take(B * sizeof(double));
  l.cnt_a = take(B * C * C * sizeof(int32_t));
  l.cnt_d = take(B * K * C * sizeof(int32_t));
  l.cnt_s = take(B * C * sizeof(int32_t));
  l.cnt_e = take(B * C * sizeof(int32_t));
  l.part = take(B * static_cast<size_t>(l.nch) * (C * C + K * C) * sizeof(double));
  l.zeros = take(C * sizeof(float));
  l.total = off;
  return l;
}

template <class T>
T* at(void* ws, size_t off) {
  return reinterpret_cast<T*>(static_cast<char*>(ws) + off);
}

// ---------------------------------------------------------------------------
// Input validation on the device: lengths in [1,T]; cum_scores finite on the
// valid rows 0..L; parameters never NaN or +inf (-inf forbids an entry);
// labels in [0,C) on valid frames.
__global__ void validate_kernel(int B, int T, int K, int C, const float* __restrict__ cum,
                                const float* __restrict__ A, const float* __restrict__ D,
                                const float* __restrict__ s, const float* __restrict__ e,
                                const int32_t* __restrict__ lengths, const int32_t* __restrict__ labels,
                                unsigned long long* status) {
  const long long n_len = B;
  const long long n_cum = static_cast<long long>(B) * (T + 1) * C;
  const long long n_a = static_cast<long long>(C) * C;
  const long long n_d = static_cast<long long>(K) * C;
  const long long n_s = s ? C : 0;
  const long long n_e = e ? C : 0;
  const long long n_lab = labels ? static_cast<long long>(B) * T : 0;
  const long long total = n_len + n_cum + n_a + n_d + n_s + n_e + n_lab;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    long long j = i;
    if (j < n_len) {
      int L = lengths[j];
      if (L < 1 || L > T) report(status, kLengths, j);
      continue;
    }
    j -= n_len;
    if (j < n_cum) {
      const long long b = j / (static_cast<long long>(T + 1) * C);
      const long long t = (j / C) % (T + 1);
      const int L = lengths[b];
      if (L < 1 || L > T || t > L) continue;
      if (!isfinite(cum[j])) report(status, kCum, j);
      continue;
    }
    j -= n_cum;
    auto bad_param = [](float v) { return isnan(v) || v == INFINITY; };
    if (j < n_a) {
      if (bad_param(A[j])) report(status, kTransition, j);
      continue;
    }
    j -= n_a;
    if (j < n_d) {
      if (bad_param(D[j])) report(status, kDuration, j);
      continue;
    }
    j -= n_d;
    if (j < n_s) {
      if (bad_param(s[j])) report(status, kStart, j);
      continue;
    }
    j -= n_s;
    if (j < n_e) {
      if (bad_param(e[j])) report(status, kEnd, j);
      continue;
    }
    j -= n_e;
    {
      const long long b = j / T, t = j % T;
      const int L = lengths[b];
      if (L < 1 || L > T || t >= L) continue;
      const int v = labels[j];
      if (v < 0 || v >= C) report(status, kLabels, j);
    }
  }
}

// ---------------------------------------------------------------------------
// Semiring accumulators for one lane, combined across a lane group.
struct LseAcc {
  double m = kNegInf;  // running max
  double s = 0.0;      // sum of exp(v - m)
  __device__ void push(double v, int) {
    if (v == kNegInf) return;
    if (v > m) {
      s = s * exp(m - v) + 1.0;  // m = -inf first: 0 * 0 + 1
      m = v;
    } else {
      s += exp(v - m);
    }
  }
  // Symmetric in (this, other), so both lanes of an xor pair get the same bits.
  __device__ void combine(double om, double os) {
    const double M = fmax(m, om);
    if (M == kNegInf) {
      m = kNegInf;
      s = 0.0;
      return;
    }
    s = s * exp(m - M) + os * exp(om - M);
    m = M;
  }
  __device__ void reduce(unsigned mask, int G) {
    for (int off = G / 2; off >= 1; off >>= 1) {
      const double om = __shfl_xor_sync(mask, m, off, G);
      const double os = __shfl_xor_sync(mask, s, off, G);
      combine(om, os);
    }
  }
  __device__ double value() const { return m == kNegInf ? kNegInf : m + log(s); }
  __device__ int index() const { return 0; }
};

// Max with argmax; ties go to the smallest index (spec: smallest d, then
// smallest label). Each lane pushes indices in increasing order.
struct MaxAcc {
  double m = kNegInf;
  int idx = INT_MAX;
  __device__ void push(double v, int i) {
    if (v > m || (v == m && i < idx)) {
      m = v;
      idx = i;
    }
  }
  __device__ void combine(double om, int oi) {
    if (om > m || (om == m && oi < idx)) {
      m = om;
      idx = oi;
    }
  }
  __device__ void reduce(unsigned mask, int G) {
    for (int off = G / 2; off >= 1; off >>= 1) {
      const double om = __shfl_xor_sync(mask, m, off, G);
      const int oi = __shfl_xor_sync(mask, idx, off, G);
      combine(om, oi);
    }
  }
  __device__ double value() const { return m; }
  __device__ int index() const { return idx; }
};

// Reduces terms k = 0..n-1 over the G lanes of a group (lane takes k = lane,
// lane + G, ...). kMax: max with the smallest argmax k. Otherwise
// log-sum-exp in two passes: the group max, then sum exp(v - max) (one exp
// per term, none for the cross-lane combine). Sums go lane order then a
// symmetric xor butterfly, so every lane holds the same bits and the result
// does not depend on timing. The first kCache terms stay in registers.
template <bool kMax, class F>
__device__ inline double group_reduce(int n, int lane, int G, unsigned mask, F term, int& arg) {
  if (kMax) {
    MaxAcc acc;
    for (int k = lane; k < n; k += G) acc.push(term(k), k);
    acc.reduce(mask, G);
    arg = acc.idx;
    return acc.m;
  }
  constexpr int kCache = 6;
  double v[kCache];
  double m = kNegInf;
#pragma unroll
  for (int i = 0; i < kCache; ++i) {
    const int k = lane + i * G;
    v[i] = k < n ? term(k) : kNegInf;
    m = fmax(m, v[i]);
  }
  for (int k = lane + kCache * G; k < n; k += G) m = fmax(m, term(k));
  for (int off = G / 2; off >= 1; off >>= 1) m = fmax(m, __shfl_xor_sync(mask, m, off, G));
  if (m == kNegInf) return kNegInf;  // the same m in every lane of the group
  double sum = 0.0;
#pragma unroll
  for (int i = 0; i < kCache; ++i)
    if (v[i] != kNegInf) sum += exp(v[i] - m);
  for (int k = lane + kCache * G; k < n; k += G) {
    const double t = term(k);
    if (t != kNegInf) sum += exp(t - m);
  }
  for (int off = G / 2; off >= 1; off >>= 1) sum += __shfl_xor_sync(mask, sum, off, G);
  return m + log(sum);
}

constexpr int kMaxRecThreads = 640;

struct RecArgs {
  int B, T, K, C;
  int G;          // lanes per label group (8, 16 or 32)
  int use_smem;   // rings and parameters in shared memory
  const float* cum;
  const float* A;
  const float* D;
  const float* s;  // never null (zeros buffer)
  const float* e;  // never null
  const int32_t* lengths;
  double* alpha;
  double* sigma;
  double* rho;
  double* gamma;
  int32_t* bp_d;   // Viterbi: argmax duration per [b][t][c]
  int32_t* bp_c;   // Viterbi: argmax source label per [b][u][c]
  int32_t* segtmp; // Viterbi: [B][T][3] reversed segments
  double* logz;      // [B] internal (forward)
  double* logz_rev;  // [B] internal (backward recurrence: lse_c s + rho[0])
  double* logz_user; // [B] or null
  double* vit_score; // [B] (Viterbi)
  int32_t* segments; // [B][T][3] (Viterbi)
  int32_t* nsegs;    // [B] (Viterbi)
  unsigned long long* status;
};

// One block per utterance. Forward (blocks 0..B-1):
//   alpha[t,c] = lse_{d<=min(K,t)} cum[t,c]-cum[t-d,c] + D[d-1,c] + sigma[t-d,c]
//   sigma[t,c] = lse_{c'} alpha[t,c'] + A[c',c]
// Backward (blocks B..2B-1), u = L-1 .. 0:
//   rho[u,c]   = lse_{d<=min(K,L-u)} cum[u+d,c]-cum[u,c] + D[d-1,c] + gamma[u+d,c]
//   gamma[u,c] = lse_{c''} A[c,c''] + rho[u,c'']
// Viterbi (kMax): the forward with max and backpointers, then traceback.
template <class Acc, bool kMax>
__global__ void __launch_bounds__(kMaxRecThreads, 1) recurrence_kernel(RecArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int B = a.B, T = a.T, K = a.K, C = a.C, G = a.G;
  const bool rev = blockIdx.x >= static_cast<unsigned>(B);
  const int b = rev ? blockIdx.x - B : blockIdx.x;
  const int L = a.lengths[b];
  const int tid = threadIdx.x, nthreads = blockDim.x;
  const int lane = tid % G, grp = tid / G, ngroups = nthreads / G;
  const int wl = tid & 31;
  const unsigned gmask = G == 32 ? 0xffffffffu : (((1u << G) - 1u) << (wl / G * G));

  const size_t base = static_cast<size_t>(b) * (T + 1) * C;
  const float* cum = a.cum + base;
  double* X = (rev ? a.rho : a.alpha) + base;    // phase-1 output [T+1][C]
  double* Y = (rev ? a.gamma : a.sigma) + base;  // phase-2 output [T+1][C]

  // Shared memory carve-up: doubles first.
  const int R_s = K + 1;
  double* xrow = reinterpret_cast<double*>(smem_raw);  // [C]
  double* yring_s = xrow + C;                          // [K+1][C] (smem mode)
  float* cumring_s = reinterpret_cast<float*>(yring_s + (a.use_smem ? static_cast<size_t>(R_s) * C : 0));
  float* D_s = cumring_s + (a.use_smem ? static_cast<size_t>(R_s) * C : 0);
  float* A_s = D_s + (a.use_smem ? static_cast<size_t>(K) * C : 0);

  const double* yring = a.use_smem ? yring_s : Y;
  const float* cumring = a.use_smem ? cumring_s : cum;
  const int R = a.use_smem ? R_s : T + 1;
  const float* Dp = a.use_smem ? D_s : a.D;
  const float* Ap = a.use_smem ? A_s : a.A;
  if (a.use_smem) {
    for (int i = tid; i < K * C; i += nthreads) D_s[i] = a.D[i];
    for (int i = tid; i < C * C; i += nthreads) A_s[i] = a.A[i];
  }

  // Row 0 of the recurrence: forward sigma[0] = s at position 0, backward
  // gamma[L] = e at position L. X there is -inf (no segment ends at 0 /
  // starts at L). The ring also gets the cum_scores row of step 1.
  const int pos0 = rev ? L : 0;
  const int pos1 = rev ? L - 1 : 1;
  for (int c = tid; c < C; c += nthreads) {
    const double y0 = rev ? a.e[c] : a.s[c];
    Y[static_cast<size_t>(pos0) * C + c] = y0;
    X[static_cast<size_t>(pos0) * C + c] = kNegInf;
    if (a.use_smem) {
      yring_s[(pos0 % R_s) * C + c] = y0;
      cumring_s[(pos0 % R_s) * C + c] = cum[static_cast<size_t>(pos0) * C + c];
      cumring_s[(pos1 % R_s) * C + c] = cum[static_cast<size_t>(pos1) * C + c];
    }
  }
  __syncthreads();

  for (int s = 1; s <= L; ++s) {
    const int pos = rev ? L - s : s;
    const int slot = pos % R;  // the only division of the step
    // Prefetch the cum_scores row of the next step into a register; it is
    // stored into the ring after phase 1 (its slot is read by phase 1 as
    // d = K), so the load latency hides behind phase 1 and 2.
    const int pos_next = rev ? pos - 1 : pos + 1;
    const bool prefetch = a.use_smem && s < L && tid < C;
    float next_cum = 0.0f;
    if (prefetch) next_cum = cum[static_cast<size_t>(pos_next) * C + tid];

    // Phase 1: segments ending at pos (forward) / starting at pos (backward).
    const int dmax = min(K, s);
    for (int c = grp; c < C; c += ngroups) {
      const double cp = cumring[slot * C + c];
      auto term = [=](int k) {  // duration d = k + 1
        int src = rev ? slot + (k + 1) : slot - (k + 1);
        src += src < 0 ? R : 0;
        src -= src >= R ? R : 0;
        const int row = src * C + c;
        const double seg = rev ? static_cast<double>(cumring[row]) - cp : cp - static_cast<double>(cumring[row]);
        return seg + static_cast<double>(Dp[k * C + c]) + yring[row];
      };
      int arg = 0;
      const double v = group_reduce<kMax>(dmax, lane, G, gmask, term, arg);
      if (lane == 0) {
        xrow[c] = v;
        X[static_cast<size_t>(pos) * C + c] = v;
        if (kMax) a.bp_d[base + static_cast<size_t>(pos) * C + c] = arg + 1;
      }
    }
    __syncthreads();
    if (s == L) break;  // sigma[L] / gamma[0] are never used
    if (a.use_smem) {
      const int nslot = rev ? (slot == 0 ? R - 1 : slot - 1) : (slot + 1 == R ? 0 : slot + 1);
      if (prefetch) cumring_s[nslot * C + tid] = next_cum;
      for (int c = tid + nthreads; c < C; c += nthreads) cumring_s[nslot * C + c] = cum[static_cast<size_t>(pos_next) * C + c];
    }
    // Phase 2: the C x C transition, once per position.
    for (int c = grp; c < C; c += ngroups) {
      auto term = [=](int c2) {
        const float t = rev ? Ap[c * C + c2] : Ap[c2 * C + c];
        return xrow[c2] + static_cast<double>(t);
      };
      int arg = 0;
      const double v = group_reduce<kMax>(C, lane, G, gmask, term, arg);
      if (lane == 0) {
        Y[static_cast<size_t>(pos) * C + c] = v;
        if (a.use_smem) yring_s[slot * C + c] = v;
        if (kMax) a.bp_c[base + static_cast<size_t>(pos) * C + c] = arg;
      }
    }
    __syncthreads();
  }

  // Final reduction over labels by warp 0: forward lse_c alpha[L,c] + e[c];
  // backward lse_c s[c] + rho[0,c] (the same log Z, kept as a cross-check).
  __shared__ double fin_val;
  __shared__ int fin_idx;
  if (tid < 32) {
    Acc acc;
    for (int c = tid; c < C; c += 32) acc.push(xrow[c] + static_cast<double>(rev ? a.s[c] : a.e[c]), c);
    acc.reduce(0xffffffffu, 32);
    if (tid == 0) {
      fin_val = acc.value();
      fin_idx = acc.index();
      if (kMax) {
        a.vit_score[b] = fin_val;
      } else if (rev) {
        a.logz_rev[b] = fin_val;
      } else {
        a.logz[b] = fin_val;
        if (a.logz_user) a.logz_user[b] = fin_val;
      }
      if (!(fin_val > kNegInf)) report(a.status, kLogZ, b);
    }
  }
  if (!kMax) return;
  __syncthreads();

  // Viterbi traceback (thread 0), then a parallel copy into time order.
  __shared__ int nseg_s;
  int32_t* tmp = a.segtmp + static_cast<size_t>(b) * T * 3;
  if (tid == 0) {
    int n = 0;
    int t = L, c = fin_idx;
    bool ok = fin_val > kNegInf && c >= 0 && c < C;
    while (ok && t > 0) {
      const int d = a.bp_d[base + static_cast<size_t>(t) * C + c];
      if (d < 1 || d > min(K, t) || n >= T) {
        ok = false;
        break;
      }
      const int u = t - d;
      tmp[n * 3 + 0] = u;
      tmp[n * 3 + 1] = d;
      tmp[n * 3 + 2] = c;
      ++n;
      if (u > 0) {
        c = a.bp_c[base + static_cast<size_t>(u) * C + c];
        if (c < 0 || c >= C) ok = false;
      }
      t = u;
    }
    if (!ok) {
      n = 0;
      report(a.status, kLogZ, b);
    }
    nseg_s = n;
    a.nsegs[b] = n;
  }
  __syncthreads();
  const int n = nseg_s;
  int32_t* out = a.segments + static_cast<size_t>(b) * T * 3;
  for (int i = tid; i < n; i += nthreads) {
    const int j = n - 1 - i;
    out[i * 3 + 0] = tmp[j * 3 + 0];
    out[i * 3 + 1] = tmp[j * 3 + 1];
    out[i * 3 + 2] = tmp[j * 3 + 2];
  }
}

// ---------------------------------------------------------------------------
// Gold segmentation: one block (kGoldThreads threads) per utterance.
// Frame runs are split left to right into pieces of at most K. bound[b][t] = 1
// when a gold segment boundary is at t (t = 0 and t = L included). Counts of
// the gold segments' parameters are integers (atomics on integers are exact
// and order-free); the score is summed in float64 by a fixed tree.
constexpr int kGoldThreads = 256;
__global__ void gold_kernel(int T, int K, int C, const float* __restrict__ cum_all, const float* __restrict__ A,
                            const float* __restrict__ D, const float* __restrict__ s, const float* __restrict__ e,
                            const int32_t* __restrict__ lengths, const int32_t* __restrict__ labels_all,
                            int32_t* bound_all, int32_t* cnt_a, int32_t* cnt_d, int32_t* cnt_s, int32_t* cnt_e,
                            double* gold, double* gold_user, unsigned long long* status) {
  __shared__ int last_change[kGoldThreads];
  __shared__ double part[kGoldThreads];
  const int b = blockIdx.x, tid = threadIdx.x;
  const int L = lengths[b];
  const float* cum = cum_all + static_cast<size_t>(b) * (T + 1) * C;
  const int32_t* lab = labels_all + static_cast<size_t>(b) * T;
  int32_t* bound = bound_all + static_cast<size_t>(b) * (T + 1);
  const int chunk = (L + kGoldThreads - 1) / kGoldThreads;
  const int t0 = min(L, tid * chunk), t1 = min(L, t0 + chunk);

  int lc = -1;
  for (int t = t0; t < t1; ++t)
    if (t == 0 || lab[t] != lab[t - 1]) lc = t;
  last_change[tid] = lc;
  __syncthreads();
  if (tid == 0) {  // exclusive max-scan, sequential (256 entries)
    int run = -1;
    for (int i = 0; i < kGoldThreads; ++i) {
      const int v = last_change[i];
      last_change[i] = run;
      run = max(run, v);
    }
  }
  __syncthreads();
  int rs = last_change[tid];
  for (int t = t0; t < t1; ++t) {
    if (t == 0 || lab[t] != lab[t - 1]) rs = t;
    bound[t] = ((t - rs) % K == 0) ? 1 : 0;
  }
  for (int t = L + tid; t <= T; t += kGoldThreads) bound[t] = (t == L) ? 1 : 0;
  __syncthreads();

  double score = 0.0;
  int32_t* ca = cnt_a + static_cast<size_t>(b) * C * C;
  int32_t* cd = cnt_d + static_cast<size_t>(b) * K * C;
  for (int t = t0; t < t1; ++t) {
    if (!bound[t]) continue;
    int d = 1;
    while (!bound[t + d]) ++d;  // bound[L] = 1 stops it; d <= K by construction
    const int c = lab[t];
    double v = static_cast<double>(cum[static_cast<size_t>(t + d) * C + c]) -
               static_cast<double>(cum[static_cast<size_t>(t) * C + c]) + static_cast<double>(D[(d - 1) * C + c]);
    if (t == 0) {
      v += s[c];
      atomicAdd(&cnt_s[static_cast<size_t>(b) * C + c], 1);
    } else {
      const int pc = lab[t - 1];
      v += A[pc * C + c];
      atomicAdd(&ca[pc * C + c], 1);
    }
    if (t + d == L) {
      v += e[c];
      atomicAdd(&cnt_e[static_cast<size_t>(b) * C + c], 1);
    }
    atomicAdd(&cd[(d - 1) * C + c], 1);
    score += v;
  }
  part[tid] = score;
  __syncthreads();
  for (int w = kGoldThreads / 2; w >= 1; w >>= 1) {
    if (tid < w) part[tid] += part[tid + w];
    __syncthreads();
  }
  if (tid == 0) {
    gold[b] = part[0];
    if (gold_user) gold_user[b] = part[0];
    if (!(part[0] > kNegInf)) report(status, kGold, b);
  }
}

// ---------------------------------------------------------------------------
// Partial parameter gradients of log Z for (chunk, utterance):
//   dA[c',c] += exp(alpha[u,c'] + A[c',c] + rho[u,c] - logZ)      1 <= u < L
//   dD[d-1,c] += exp(sigma[u,c] + cum[u+d,c]-cum[u,c] + D[d-1,c] + gamma[u+d,c] - logZ)
// Each entry is owned by one thread that walks its chunk in order.
__global__ void marginal_kernel(Layout l, const float* __restrict__ cum_all, const float* __restrict__ A,
                                const float* __restrict__ D, const int32_t* __restrict__ lengths, const double* alpha_all,
                                const double* sigma_all, const double* rho_all, const double* gamma_all,
                                const double* logz, double* part) {
  const int ch = blockIdx.x, b = blockIdx.y;
  const int C = l.C, K = l.K;
  const int L = lengths[b];
  const double lz = logz[b];
  const bool ok = lz > kNegInf;
  const size_t base = static_cast<size_t>(b) * (l.T + 1) * C;
  const float* cum = cum_all + base;
  const double* alpha = alpha_all + base;
  const double* sigma = sigma_all + base;
  const double* rho = rho_all + base;
  const double* gamma = gamma_all + base;
  const int u0 = ch * l.chunk, u1 = min(L, u0 + l.chunk);
  const int nA = C * C, nD = K * C;
  double* out = part + (static_cast<size_t>(b) * l.nch + ch) * (nA + nD);
  for (int e = threadIdx.x; e < nA + nD; e += blockDim.x) {
    double acc = 0.0;
    if (ok && e < nA) {
      const int cp = e / C, c = e % C;
      const double a = A[e];
      for (int u = max(u0, 1); u < u1; ++u)
        acc += exp(alpha[static_cast<size_t>(u) * C + cp] + a + rho[static_cast<size_t>(u) * C + c] - lz);
    } else if (ok) {
      const int k = (e - nA) / C, c = (e - nA) % C;
      const int d = k + 1;
      const double dd = D[e - nA];
      const int uend = min(u1, L - d + 1);  // u + d <= L
      for (int u = u0; u < uend; ++u) {
        const size_t r0 = static_cast<size_t>(u) * C + c, r1 = static_cast<size_t>(u + d) * C + c;
        const double seg = static_cast<double>(cum[r1]) - static_cast<double>(cum[r0]);
        acc += exp(sigma[r0] + seg + dd + gamma[r1] - lz);
      }
    }
    out[e] = acc;
  }
}

// Sums the partials over (b, chunk) in a fixed order, subtracts the gold
// counts, and writes scale * total as float32. Entries: [C*C | K*C | C | C].
__global__ void param_reduce_kernel(Layout l, const float* __restrict__ s, const float* __restrict__ e,
                                    const int32_t* __restrict__ lengths, const double* part, const double* alpha_all,
                                    const double* rho_all, const double* logz, const int32_t* cnt_a,
                                    const int32_t* cnt_d, const int32_t* cnt_s, const int32_t* cnt_e, int with_gold,
                                    double scale, float* g_a, float* g_d, float* g_s, float* g_e) {
  const int C = l.C, K = l.K, B = l.B;
  const int nA = C * C, nD = K * C, nP = nA + nD;
  const int n = nP + 2 * C;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  double total = 0.0;
  if (i < nP) {
    float* dst = i < nA ? g_a : g_d;
    if (!dst) return;
    for (int b = 0; b < B; ++b) {
      double sb = 0.0;
      const double* p = part + static_cast<size_t>(b) * l.nch * nP + i;
      for (int ch = 0; ch < l.nch; ++ch) sb += p[static_cast<size_t>(ch) * nP];
      if (with_gold) sb -= i < nA ? cnt_a[static_cast<size_t>(b) * nA + i] : cnt_d[static_cast<size_t>(b) * nD + (i - nA)];
      total += sb;
    }
    dst[i < nA ? i : i - nA] = static_cast<float>(scale * total);
    return;
  }
  const bool is_start = i < nP + C;
  const int c = is_start ? i - nP : i - nP - C;
  float* dst = is_start ? g_s : g_e;
  if (!dst) return;
  for (int b = 0; b < B; ++b) {
    const double lz = logz[b];
    const int L = lengths[b];
    const size_t base = static_cast<size_t>(b) * (l.T + 1) * C;
    double v = 0.0;
    if (lz > kNegInf) {
      v = is_start ? exp(static_cast<double>(s[c]) + rho_all[base + c] - lz)
                   : exp(alpha_all[base + static_cast<size_t>(L) * C + c] + static_cast<double>(e[c]) - lz);
    }
    if (with_gold) v -= is_start ? cnt_s[static_cast<size_t>(b) * C + c] : cnt_e[static_cast<size_t>(b) * C + c];
    total += v;
  }
  dst[c] = static_cast<float>(scale * total);
}

// d/d cum[t,c] = P(segment with label c ends at t) - P(one starts at t)
//             = exp(alpha[t,c] + gamma[t,c] - logZ) - exp(sigma[t,c] + rho[t,c] - logZ)
// minus the gold indicator (labels given); 0 on padding rows.
__global__ void grad_cum_kernel(Layout l, const int32_t* __restrict__ lengths, const int32_t* __restrict__ labels,
                                const int32_t* bound_all, const double* alpha_all, const double* sigma_all,
                                const double* rho_all, const double* gamma_all, const double* logz, double scale,
                                float* out) {
  const int C = l.C, T = l.T;
  const long long n = static_cast<long long>(l.B) * (T + 1) * C;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int c = static_cast<int>(i % C);
    const int t = static_cast<int>((i / C) % (T + 1));
    const int b = static_cast<int>(i / (static_cast<long long>(T + 1) * C));
    const int L = lengths[b];
    const double lz = logz[b];
    double g = 0.0;
    if (t <= L && lz > kNegInf) {
      if (t >= 1) g += exp(alpha_all[i] + gamma_all[i] - lz);
      if (t < L) g -= exp(sigma_all[i] + rho_all[i] - lz);
      if (labels && bound_all[static_cast<size_t>(b) * (T + 1) + t]) {
        const int32_t* lab = labels + static_cast<size_t>(b) * T;
        if (t >= 1 && lab[t - 1] == c) g -= 1.0;
        if (t < L && lab[t] == c) g += 1.0;
      }
    }
    out[i] = static_cast<float>(scale * g);
  }
}

// P(a segment ends at t) = sum_c exp(alpha[t,c] + gamma[t,c] - logZ), 1 <= t <= L.
__global__ void boundary_kernel(Layout l, const int32_t* __restrict__ lengths, const double* alpha_all,
                                const double* gamma_all, const double* logz, double* out) {
  const int C = l.C, T = l.T;
  const long long n = static_cast<long long>(l.B) * (T + 1);
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int t = static_cast<int>(i % (T + 1));
    const int b = static_cast<int>(i / (T + 1));
    const int L = lengths[b];
    const double lz = logz[b];
    double v = 0.0;
    if (t >= 1 && t <= L && lz > kNegInf) {
      const size_t row = static_cast<size_t>(i) * C;
      for (int c = 0; c < C; ++c) v += exp(alpha_all[row + c] + gamma_all[row + c] - lz);
    }
    out[i] = v;
  }
}

// ---------------------------------------------------------------------------
int grid_for(long long n, int threads) {
  long long blocks = (n + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > 65535LL * 8) blocks = 65535LL * 8;
  return static_cast<int>(blocks);
}

class CudaBackend final : public Backend {
 public:
  CudaBackend() {
    TS_CUDA(cudaGetDevice(&device_));
    TS_CUDA(cudaGetDeviceProperties(&prop_, device_));
    smem_limit_ = prop_.sharedMemPerBlockOptin;
    // Benchmark knob: lanes per label group (4, 8, 16 or 32). Results stay
    // deterministic for a given value, but the summation order (hence the
    // last bits) depends on it. Unset: chosen from K and C.
    if (const char* env = std::getenv("TIMITSEG_CUDA_LANES")) {
      const std::string v = env;
      if (v == "4" || v == "8" || v == "16" || v == "32") {
        lanes_override_ = std::stoi(v);
      } else if (!v.empty()) {
        throw std::invalid_argument("TIMITSEG_CUDA_LANES must be 4, 8, 16 or 32, got '" + v + "'");
      }
    }
    // Test knob: TIMITSEG_CUDA_RING=global keeps the recurrence state in
    // global memory even when the shared-memory ring would fit (the path
    // taken automatically for large K * C, or on GPUs with less shared memory).
    if (const char* env = std::getenv("TIMITSEG_CUDA_RING")) {
      const std::string v = env;
      if (v == "global") {
        force_global_ring_ = true;
      } else if (!v.empty() && v != "shared") {
        throw std::invalid_argument("TIMITSEG_CUDA_RING must be 'shared' or 'global', got '" + v + "'");
      }
    }
  }
  std::string name() const override { return "cuda"; }
  bool on_device() const override { return true; }
  // Every call already waits for its own work (it reads back the status
  // word); this also covers work queued by the caller on the device.
  void synchronize() override { TS_CUDA(cudaDeviceSynchronize()); }
  size_t workspace_bytes(const Dims& dims) const override {
    check_dims(dims);
    return make_layout(dims).total;
  }

  void log_partition(const Dims& dims, const Params& p, double* log_z, void* workspace) override {
    const Layout l = begin(dims, p, nullptr, workspace, "log_partition");
    RecArgs a = rec_args(l, p, workspace);
    a.logz_user = log_z;
    launch_recurrence<LseAcc, false>(l, a, l.B);
    finish(l, p, nullptr, workspace);
  }

  void gold_score(const Dims& dims, const Params& p, const int32_t* labels, double* gold, void* workspace) override {
    if (!labels) throw std::invalid_argument("cuda backend: gold_score needs labels [B][T] (got a null pointer)");
    const Layout l = begin(dims, p, labels, workspace, "gold_score");
    launch_gold(l, p, labels, gold, workspace);
    finish(l, p, labels, workspace);
  }

  void backward(const Dims& dims, const Params& p, const int32_t* labels, double scale, double* log_z, double* gold,
                const Grads& grads, void* workspace) override {
    if (!std::isfinite(scale)) throw std::invalid_argument("cuda backend: backward scale must be finite");
    const Layout l = begin(dims, p, labels, workspace, "backward");
    if (labels) launch_gold(l, p, labels, gold, workspace);
    RecArgs a = rec_args(l, p, workspace);
    a.logz_user = log_z;
    launch_recurrence<LseAcc, false>(l, a, 2 * l.B);
    const int with_gold = labels ? 1 : 0;
    const bool want_params = grads.transition || grads.duration_bias || grads.start || grads.end;
    if (grads.transition || grads.duration_bias) {
      dim3 grid(l.nch, l.B);
      marginal_kernel<<<grid, 256>>>(l, p.cum_scores, p.transition, p.duration_bias, p.lengths,
                                     at<double>(workspace, l.alpha), at<double>(workspace, l.sigma),
                                     at<double>(workspace, l.rho), at<double>(workspace, l.gamma),
                                     at<double>(workspace, l.logz), at<double>(workspace, l.part));
      TS_LAUNCHED("marginal_kernel");
    }
    if (want_params) {
      const int n = l.C * l.C + l.K * l.C + 2 * l.C;
      param_reduce_kernel<<<grid_for(n, 128), 128>>>(
          l, s_ptr(p, workspace, l), e_ptr(p, workspace, l), p.lengths, at<double>(workspace, l.part),
          at<double>(workspace, l.alpha), at<double>(workspace, l.rho), at<double>(workspace, l.logz),
          at<int32_t>(workspace, l.cnt_a), at<int32_t>(workspace, l.cnt_d), at<int32_t>(workspace, l.cnt_s),
          at<int32_t>(workspace, l.cnt_e), with_gold, scale, grads.transition, grads.duration_bias, grads.start,
          grads.end);
      TS_LAUNCHED("param_reduce_kernel");
    }
    if (grads.cum_scores) {
      const long long n = static_cast<long long>(l.B) * (l.T + 1) * l.C;
      grad_cum_kernel<<<grid_for(n, 256), 256>>>(l, p.lengths, labels, at<int32_t>(workspace, l.bound),
                                                 at<double>(workspace, l.alpha), at<double>(workspace, l.sigma),
                                                 at<double>(workspace, l.rho), at<double>(workspace, l.gamma),
                                                 at<double>(workspace, l.logz), scale, grads.cum_scores);
      TS_LAUNCHED("grad_cum_kernel");
    }
    finish(l, p, labels, workspace);
  }

  void viterbi(const Dims& dims, const Params& p, double* score, int32_t* segments, int32_t* num_segments,
               void* workspace) override {
    if (!score || !segments || !num_segments)
      throw std::invalid_argument("cuda backend: viterbi needs score, segments and num_segments outputs");
    const Layout l = begin(dims, p, nullptr, workspace, "viterbi");
    RecArgs a = rec_args(l, p, workspace);
    a.bp_d = at<int32_t>(workspace, l.rho);    // rho/gamma storage is free during Viterbi
    a.bp_c = at<int32_t>(workspace, l.gamma);
    a.segtmp = at<int32_t>(workspace, l.segtmp);
    a.vit_score = score;
    a.segments = segments;
    a.nsegs = num_segments;
    launch_recurrence<MaxAcc, true>(l, a, l.B);
    finish(l, p, nullptr, workspace);
  }

  void boundary_posteriors(const Dims& dims, const Params& p, double* out, void* workspace) override {
    if (!out) throw std::invalid_argument("cuda backend: boundary_posteriors output is a null pointer");
    const Layout l = begin(dims, p, nullptr, workspace, "boundary_posteriors");
    RecArgs a = rec_args(l, p, workspace);
    launch_recurrence<LseAcc, false>(l, a, 2 * l.B);
    const long long n = static_cast<long long>(l.B) * (l.T + 1);
    boundary_kernel<<<grid_for(n, 256), 256>>>(l, p.lengths, at<double>(workspace, l.alpha),
                                               at<double>(workspace, l.gamma), at<double>(workspace, l.logz), out);
    TS_LAUNCHED("boundary_kernel");
    finish(l, p, nullptr, workspace);
  }

 private:
  int device_ = 0;
  cudaDeviceProp prop_{};
  size_t smem_limit_ = 48 * 1024;
  int lanes_override_ = 0;
  bool force_global_ring_ = false;

  static void check_dims(const Dims& d) {
    if (d.B < 1 || d.T < 1 || d.K < 1 || d.C < 1) {
      std::ostringstream os;
      os << "cuda backend: dims must be >= 1, got B=" << d.B << " T=" << d.T << " K=" << d.K << " C=" << d.C;
      throw std::invalid_argument(os.str());
    }
    // Utterances map to gridDim.y in the marginal kernel (at most 65535).
    if (d.B > 65535) {
      std::ostringstream os;
      os << "cuda backend: batch size B=" << d.B << " exceeds 65535 utterances per call; split the batch";
      throw std::invalid_argument(os.str());
    }
    // Per-utterance indices are int; batch offsets are size_t.
    if ((d.T + 1) * d.C > INT_MAX / 2 || d.C * d.C > INT_MAX / 2 || d.K * d.C > INT_MAX / 2 || d.B > INT_MAX / 2 ||
        d.B * d.T > (1LL << 50)) {
      std::ostringstream os;
      os << "cuda backend: dims too large, B=" << d.B << " T=" << d.T << " K=" << d.K << " C=" << d.C;
      throw std::invalid_argument(os.str());
    }
  }

  // Checks dims and pointers, validates every input on the device and throws
  // (before any output is written) if one is invalid.
  Layout begin(const Dims& dims, const Params& p, const int32_t* labels, void* workspace, const char* what) {
    check_dims(dims);
    auto need = [&](const void* ptr, const char* name) {
      if (!ptr) throw std::invalid_argument(std::string("cuda backend: ") + what + ": " + name + " is a null pointer");
    };
    need(p.cum_scores, "cum_scores");
    need(p.transition, "transition");
    need(p.duration_bias, "duration_bias");
    need(p.lengths, "lengths");
    need(workspace, "workspace");
    const Layout l = make_layout(dims);
    TS_CUDA(cudaSetDevice(device_));
    TS_CUDA(cudaMemsetAsync(at<char>(workspace, l.status), 0xff, sizeof(unsigned long long)));
    TS_CUDA(cudaMemsetAsync(at<char>(workspace, l.zeros), 0, sizeof(float) * l.C));
    const long long total = l.B + static_cast<long long>(l.B) * (l.T + 1) * l.C + l.C * l.C + l.K * l.C + 2 * l.C +
                            (labels ? static_cast<long long>(l.B) * l.T : 0);
    validate_kernel<<<grid_for(total, 256), 256>>>(l.B, l.T, l.K, l.C, p.cum_scores, p.transition, p.duration_bias,
                                                   p.start, p.end, p.lengths, labels,
                                                   at<unsigned long long>(workspace, l.status));
    TS_LAUNCHED("validate_kernel");
    check_status(l, p, labels, workspace);
    return l;
  }

  // Waits for the queued work and throws if a kernel flagged a problem.
  void finish(const Layout& l, const Params& p, const int32_t* labels, void* workspace) {
    check_status(l, p, labels, workspace);
  }

  static const float* s_ptr(const Params& p, void* ws, const Layout& l) {
    return p.start ? p.start : at<float>(ws, l.zeros);
  }
  static const float* e_ptr(const Params& p, void* ws, const Layout& l) {
    return p.end ? p.end : at<float>(ws, l.zeros);
  }

  RecArgs rec_args(const Layout& l, const Params& p, void* ws) const {
    RecArgs a{};
    a.B = l.B;
    a.T = l.T;
    a.K = l.K;
    a.C = l.C;
    const int widest = std::max(l.K, l.C);
    // Measured on an H200 (docs/cuda.md): 8 lanes beat 16 and 32 for C=39, K in {1,30,64}.
    a.G = lanes_override_ ? lanes_override_ : (widest <= 64 ? 8 : (widest <= 256 ? 16 : 32));
    a.cum = p.cum_scores;
    a.A = p.transition;
    a.D = p.duration_bias;
    a.s = s_ptr(p, ws, l);
    a.e = e_ptr(p, ws, l);
    a.lengths = p.lengths;
    a.alpha = at<double>(ws, l.alpha);
    a.sigma = at<double>(ws, l.sigma);
    a.rho = at<double>(ws, l.rho);
    a.gamma = at<double>(ws, l.gamma);
    a.logz = at<double>(ws, l.logz);
    a.logz_rev = at<double>(ws, l.logz_rev);
    a.status = at<unsigned long long>(ws, l.status);
    return a;
  }

  template <class Acc, bool kMax>
  void launch_recurrence(const Layout& l, RecArgs& a, int blocks) {
    const size_t R = static_cast<size_t>(l.K) + 1, C = static_cast<size_t>(l.C), K = static_cast<size_t>(l.K);
    const size_t smem_full = C * 8 + R * C * 8 + R * C * 4 + K * C * 4 + C * C * 4;
    const size_t smem_min = C * 8;
    a.use_smem = (!force_global_ring_ && smem_full <= smem_limit_) ? 1 : 0;
    const size_t smem = a.use_smem ? smem_full : smem_min;
    if (smem > smem_limit_) throw std::invalid_argument("cuda backend: C too large for shared memory");
    const auto kernel = recurrence_kernel<Acc, kMax>;
    if (smem > 48 * 1024)
      TS_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    // Groups of G lanes, one label each per round; as few rounds as the
    // thread cap allows, and the labels spread evenly over the rounds.
    const int max_groups = kMaxRecThreads / a.G;
    const int rounds = (l.C + max_groups - 1) / max_groups;
    const int groups = (l.C + rounds - 1) / rounds;
    int threads = ((groups * a.G + 31) / 32) * 32;
    threads = std::max(threads, 32);
    kernel<<<blocks, threads, smem>>>(a);
    TS_LAUNCHED("recurrence_kernel");
  }

  void launch_gold(const Layout& l, const Params& p, const int32_t* labels, double* gold_user, void* ws) {
    // The four count arrays are contiguous in the layout.
    TS_CUDA(cudaMemsetAsync(at<char>(ws, l.cnt_a), 0, l.part - l.cnt_a));
    gold_kernel<<<l.B, kGoldThreads>>>(l.T, l.K, l.C, p.cum_scores, p.transition, p.duration_bias, s_ptr(p, ws, l),
                                       e_ptr(p, ws, l), p.lengths, labels, at<int32_t>(ws, l.bound),
                                       at<int32_t>(ws, l.cnt_a), at<int32_t>(ws, l.cnt_d), at<int32_t>(ws, l.cnt_s),
                                       at<int32_t>(ws, l.cnt_e), at<double>(ws, l.gold), gold_user,
                                       at<unsigned long long>(ws, l.status));
    TS_LAUNCHED("gold_kernel");
  }

  void check_status(const Layout& l, const Params& p, const int32_t* labels, void* ws) {
    unsigned long long key = 0;
    TS_CUDA(cudaMemcpy(&key, at<char>(ws, l.status), sizeof(key), cudaMemcpyDeviceToHost));
    if (key == kNoError) return;
    const int tensor = static_cast<int>(key >> kIndexBits);
    const long long idx = static_cast<long long>(key & ((1ULL << kIndexBits) - 1));
    std::ostringstream os;
    os << "cuda backend: ";
    auto fval = [&](const float* ptr) {
      float v = 0;
      TS_CUDA(cudaMemcpy(&v, ptr + idx, sizeof(v), cudaMemcpyDeviceToHost));
      return v;
    };
    switch (tensor) {
      case kLengths: {
        int32_t v = 0;
        TS_CUDA(cudaMemcpy(&v, p.lengths + idx, sizeof(v), cudaMemcpyDeviceToHost));
        os << "lengths[" << idx << "] = " << v << " is outside [1, T=" << l.T << "]";
        throw std::invalid_argument(os.str());
      }
      case kCum: {
        const long long b = idx / ((static_cast<long long>(l.T) + 1) * l.C);
        const long long t = (idx / l.C) % (l.T + 1), c = idx % l.C;
        os << "cum_scores[" << b << "][" << t << "][" << c << "] = " << fval(p.cum_scores)
           << " is not finite (every valid row 0..lengths[b] must be finite)";
        throw std::invalid_argument(os.str());
      }
      case kTransition:
        os << "transition[" << idx / l.C << "][" << idx % l.C << "] = " << fval(p.transition)
           << " is NaN or +inf (entries must be finite, or -inf to forbid a transition)";
        throw std::invalid_argument(os.str());
      case kDuration:
        os << "duration_bias[" << idx / l.C << "][" << idx % l.C << "] = " << fval(p.duration_bias)
           << " is NaN or +inf (entries must be finite, or -inf to forbid a duration)";
        throw std::invalid_argument(os.str());
      case kStart:
        os << "start[" << idx << "] = " << fval(p.start) << " is NaN or +inf (entries must be finite or -inf)";
        throw std::invalid_argument(os.str());
      case kEnd:
        os << "end[" << idx << "] = " << fval(p.end) << " is NaN or +inf (entries must be finite or -inf)";
        throw std::invalid_argument(os.str());
      case kLabels: {
        int32_t v = 0;
        TS_CUDA(cudaMemcpy(&v, labels + idx, sizeof(v), cudaMemcpyDeviceToHost));
        os << "labels[" << idx / l.T << "][" << idx % l.T << "] = " << v << " is outside [0, C=" << l.C << ")";
        throw std::invalid_argument(os.str());
      }
      case kLogZ:
        os << "utterance " << idx << " has no segmentation of finite score (log Z = -inf): the -inf entries of "
           << "transition/duration_bias/start/end forbid every path of its length";
        throw std::runtime_error(os.str());
      case kGold:
        os << "utterance " << idx << ": the gold segmentation has score -inf (it uses a -inf entry of "
           << "transition/duration_bias/start/end), so its NLL would be +inf";
        throw std::runtime_error(os.str());
      default:
        os << "internal status code " << tensor << " at index " << idx;
        throw std::runtime_error(os.str());
    }
  }
};

}  // namespace

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the error state
    return 0;
  }
  return n;
}

std::unique_ptr<Backend> make_cuda_backend() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    std::string why;
    if (err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice || err == cudaSuccess)
      why = "no NVIDIA GPU or driver on this machine";
    else
      why = cudaGetErrorString(err);
    throw std::runtime_error("no CUDA device was found (" + why + "); use --backend cpu or reference");
  }
  return std::make_unique<CudaBackend>();
}

std::string cuda_device_name() {
  if (cuda_device_count() == 0) throw std::runtime_error("no CUDA device was found");
  int dev = 0;
  TS_CUDA(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  TS_CUDA(cudaGetDeviceProperties(&prop, dev));
  return prop.name;
}

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  if (bytes == 0) bytes = 1;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    std::ostringstream os;
    os << "cuda backend: cudaMalloc of " << bytes << " bytes failed: " << cudaGetErrorString(err);
    throw std::runtime_error(os.str());
  }
  return p;
}

void device_free(void* ptr) {
  if (ptr) cudaFree(ptr);  // never throws (called from destructors)
}

void copy_to_device(void* dst, const void* src, size_t bytes) {
  if (bytes) TS_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

void copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes) TS_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

void device_synchronize() { TS_CUDA(cudaDeviceSynchronize()); }

}  // namespace timitseg::crf
