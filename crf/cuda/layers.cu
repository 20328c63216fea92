// The CRF's layers around the backend on the GPU (crf/device_layers.h): the
// centered cumsum (forward, backward), copy_cumulative, difference_rows, the
// L2 penalty, the log-normal duration table and the end-score fold. The arithmetic follows the host
// code (crf/cumsum.cpp, crf/duration.cpp) operation by operation; products that
// the host does not fuse are written with the _rn intrinsics so that nvcc
// cannot contract them into an FMA (different rounding). No fast-math.
#include "crf/device_layers.h"

#include <stdexcept>

#include "common/cuda_check.h"
#include "common/cuda_reduce.cuh"
#include "crf/duration.h"

namespace timitseg::crf::device {
namespace {

constexpr int kThreads = 256;
// The cumsum kernels have one thread per (b, c) (B * C: 1248 at B 32, C 39), each
// latency-bound: small blocks spread them over more multiprocessors.
constexpr int kCumsumThreads = 64;

unsigned grid_for(int64_t n, int threads = kThreads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : b);
}

// Frames per chunk of the kernels below: each thread issues kChunk independent
// loads, then adds them in order (the float64 order of the host code is kept;
// only the loads overlap: a thread's loop is otherwise one global-memory
// latency per frame, ~0.1 ms at T = 200). kChunk for float loads, kChunkD for
// the float64 scratch. Measured on one H100 at B 32, T 200, C 39 (torch.profiler,
// bench/python_op_overhead.py --profile): chunks of 16 gave the forward 15 us
// and the backward 26 us; chunks of 64 (float) and 32 (float64) were slower,
// 27-32 us and 31 us.
constexpr int kChunk = 16;
constexpr int kChunkD = 16;

// A length as the kernels use it: clamped to [0, T] (a length outside it is an
// error the caller reports; the kernels must not read outside the rows).
__device__ __forceinline__ int clamp_length(int32_t L, int T) { return L < 0 ? 0 : (L > T ? T : L); }

// crf::centered_cumsum_forward, one thread per (b, c), same float64 order:
//   mean = (sum_{t<L} x[t]) / L;  run += x[t] - mean;  cum[t+1] = float(run);  rows > L: 0
__global__ void cumsum_forward_kernel(int B, int T, int C, const float* __restrict__ x,
                                      const int32_t* __restrict__ len, float* __restrict__ cum) {
  const int64_t id = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (id >= int64_t(B) * C) return;
  const int b = static_cast<int>(id / C), c = static_cast<int>(id % C);
  const int L = clamp_length(len[b], T);
  const float* xb = x + int64_t(b) * T * C + c;  // xb[t * C]: frame t of label c
  float* cb = cum + int64_t(b) * (T + 1) * C + c;
  double mean = 0.0;
  for (int t0 = 0; t0 < L; t0 += kChunk) {
    float v[kChunk];
#pragma unroll
    for (int u = 0; u < kChunk; ++u) v[u] = t0 + u < L ? xb[int64_t(t0 + u) * C] : 0.f;
#pragma unroll
    for (int u = 0; u < kChunk; ++u)
      if (t0 + u < L) mean += static_cast<double>(v[u]);
  }
  mean /= static_cast<double>(L > 0 ? L : 1);
  double run = 0.0;
  cb[0] = 0.f;
  for (int t0 = 0; t0 < L; t0 += kChunk) {
    float v[kChunk];
#pragma unroll
    for (int u = 0; u < kChunk; ++u) v[u] = t0 + u < L ? xb[int64_t(t0 + u) * C] : 0.f;
#pragma unroll
    for (int u = 0; u < kChunk; ++u)
      if (t0 + u < L) {
        run += static_cast<double>(v[u]) - mean;
        cb[int64_t(t0 + u + 1) * C] = static_cast<float>(run);
      }
  }
  for (int t = L + 1; t <= T; ++t) cb[int64_t(t) * C] = 0.f;
}

// crf::centered_cumsum_forward with one block per utterance: tiles of rows
// read whole (coalesced, 16 loads in flight per thread: an earlier tiled
// kernel with one load at a time was slower than the kernel above) into shared memory, each column's two float64 sums
// (the mean, then the running sum) on one thread in frame order, as the host
// code and the kernel above (the same bits); the tile of cum rows written back
// whole. Columns C <= kTileThreads. An utterance of at most kTileRows(C) rows
// is read once.
constexpr int kTileThreads = 256;
constexpr int kTileFloats = 8192;  // 32 KiB
__global__ void __launch_bounds__(kTileThreads)
    cumsum_forward_tiled_kernel(int T, int C, const float* __restrict__ x, const int32_t* __restrict__ len,
                                float* __restrict__ cum) {
  __shared__ float tile[kTileFloats];
  const int b = blockIdx.x, c = threadIdx.x;
  const int L = clamp_length(len[b], T);
  const int rows = kTileFloats / C;  // rows per tile (>= 32: C <= 256)
  const float* xb = x + int64_t(b) * T * C;
  float* cb = cum + int64_t(b) * (T + 1) * C;
  constexpr int kU = 8;
  // one tile: rows [t0, t0 + n) of x into tile[0, n * C)
  auto load = [&](int t0, int n) {  // kLoads loads in flight per thread, then their stores
    constexpr int kLoads = 16;
    const float* src = xb + int64_t(t0) * C;
    const int m = n * C;
    for (int i0 = threadIdx.x; i0 < m; i0 += kTileThreads * kLoads) {
      float v[kLoads];
#pragma unroll
      for (int u = 0; u < kLoads; ++u) v[u] = i0 + u * kTileThreads < m ? src[i0 + u * kTileThreads] : 0.f;
#pragma unroll
      for (int u = 0; u < kLoads; ++u)
        if (i0 + u * kTileThreads < m) tile[i0 + u * kTileThreads] = v[u];
    }
  };
  double mean = 0.0;
  for (int t0 = 0; t0 < L; t0 += rows) {
    const int n = min(rows, L - t0);
    if (t0 > 0) __syncthreads();  // the last tile's reads are done
    load(t0, n);
    __syncthreads();
    if (c < C) {  // full chunks without conditions (the kU loads issue together), then the rest
      int r = 0;
      for (; r + kU <= n; r += kU) {
        double v[kU];
#pragma unroll
        for (int u = 0; u < kU; ++u) v[u] = static_cast<double>(tile[(r + u) * C + c]);
#pragma unroll
        for (int u = 0; u < kU; ++u) mean += v[u];
      }
      for (; r < n; ++r) mean += static_cast<double>(tile[r * C + c]);
    }
  }
  mean /= static_cast<double>(L > 0 ? L : 1);
  double run = 0.0;
  for (int t0 = 0; t0 < L; t0 += rows) {
    const int n = min(rows, L - t0);
    __syncthreads();  // the last pass's reads of the tile are done
    if (t0 > 0 || L > rows) {  // one tile: still there from the mean
      load(t0, n);
      __syncthreads();
    }
    if (c < C) {
      int r = 0;
      for (; r + kU <= n; r += kU) {
        double v[kU];
#pragma unroll
        for (int u = 0; u < kU; ++u) v[u] = static_cast<double>(tile[(r + u) * C + c]) - mean;
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          run += v[u];
          tile[(r + u) * C + c] = static_cast<float>(run);
        }
      }
      for (; r < n; ++r) {
        run += static_cast<double>(tile[r * C + c]) - mean;
        tile[r * C + c] = static_cast<float>(run);
      }
    }
    __syncthreads();
    float* dst = cb + int64_t(t0 + 1) * C;  // cum row t + 1 holds frame t
    for (int i = threadIdx.x; i < n * C; i += kTileThreads) dst[i] = tile[i];
  }
  for (int i = threadIdx.x; i < C; i += kTileThreads) cb[i] = 0.f;
  for (int64_t i = int64_t(L + 1) * C + threadIdx.x; i < int64_t(T + 1) * C; i += kTileThreads) cb[i] = 0.f;
}

// crf::centered_cumsum_backward, one thread per (b, c), same float64 order:
//   g[t] = sum_{s=t+1..L} dcum[s] (t descending);  mean = (sum_{t<L} g[t]) / L (t ascending)
//   dx[t] = float(g[t] - mean) for t < L, 0 for padding.  g: scratch [B][T][C] double.
__global__ void cumsum_backward_kernel(int B, int T, int C, const float* __restrict__ dcum,
                                       const int32_t* __restrict__ len, double* __restrict__ g,
                                       float* __restrict__ dx) {
  const int64_t id = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (id >= int64_t(B) * C) return;
  const int b = static_cast<int>(id / C), c = static_cast<int>(id % C);
  const int L = clamp_length(len[b], T);
  const float* gb = dcum + int64_t(b) * (T + 1) * C + c;
  double* g_b = g + int64_t(b) * T * C + c;
  float* xb = dx + int64_t(b) * T * C + c;
  double run = 0.0;
  for (int t0 = L - 1; t0 >= 0; t0 -= kChunk) {  // frames t0, t0-1, ..., t0-kChunk+1 (those >= 0)
    float v[kChunk];
#pragma unroll
    for (int u = 0; u < kChunk; ++u) v[u] = t0 - u >= 0 ? gb[int64_t(t0 - u + 1) * C] : 0.f;
#pragma unroll
    for (int u = 0; u < kChunk; ++u)
      if (t0 - u >= 0) {
        run += static_cast<double>(v[u]);
        g_b[int64_t(t0 - u) * C] = run;
      }
  }
  double mean = 0.0;
  for (int t0 = 0; t0 < L; t0 += kChunkD) {
    double v[kChunkD];
#pragma unroll
    for (int u = 0; u < kChunkD; ++u) v[u] = t0 + u < L ? g_b[int64_t(t0 + u) * C] : 0.0;
#pragma unroll
    for (int u = 0; u < kChunkD; ++u)
      if (t0 + u < L) mean += v[u];
  }
  mean /= static_cast<double>(L > 0 ? L : 1);
  for (int t0 = 0; t0 < L; t0 += kChunkD) {
    double v[kChunkD];
#pragma unroll
    for (int u = 0; u < kChunkD; ++u) v[u] = t0 + u < L ? g_b[int64_t(t0 + u) * C] : 0.0;
#pragma unroll
    for (int u = 0; u < kChunkD; ++u)
      if (t0 + u < L) xb[int64_t(t0 + u) * C] = static_cast<float>(v[u] - mean);
  }
  for (int t = L; t < T; ++t) xb[int64_t(t) * C] = 0.f;
}

__global__ void copy_cumulative_kernel(int64_t n, int64_t row, int C, const float* cum, const int32_t* len,
                                       float* out) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int64_t t = (i % row) / C;
  out[i] = t == 0 || t > len[i / row] ? 0.f : cum[i];  // any length: only row i is read
}

__global__ void difference_kernel(int B, const double* a, const double* b_, void* out, bool f64) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= B) return;
  const double v = b_ ? a[i] - b_[i] : a[i];
  if (f64)
    static_cast<double*>(out)[i] = v;
  else
    static_cast<float*>(out)[i] = static_cast<float>(v);
}

// One block. Sum of squares of the finite-or-+inf entries of transition [C*C]
// then duration_bias [K*C] (each strided over the block, then a tree), and
// the gradient update of crf::l2_penalty:
//   grad = float(double(grad) + 2 * reg * x), -inf entries skipped.
__global__ void l2_penalty_kernel(double reg, int64_t nA, int64_t nD, const float* A, const float* D, float* gA,
                                  float* gD, double* penalty) {
  __shared__ double shared[kThreads];
  double part[2] = {0.0, 0.0};
  const double two_reg = 2.0 * reg;
  for (int which = 0; which < 2; ++which) {
    const int64_t n = which == 0 ? nA : nD;
    const float* v = which == 0 ? A : D;
    float* g = which == 0 ? gA : gD;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const double x = static_cast<double>(v[i]);
      if (isinf(x) && x < 0) continue;  // -inf: a constant (forbidden), as on the host
      part[which] = __dadd_rn(part[which], __dmul_rn(x, x));
      if (g) g[i] = static_cast<float>(__dadd_rn(static_cast<double>(g[i]), __dmul_rn(two_reg, x)));
    }
  }
  // as on the host: reg * (sum_A + sum_D)
  const double sA = ::timitseg::cuda::block_sum(part[0], shared);
  __syncthreads();
  const double sD = ::timitseg::cuda::block_sum(part[1], shared);
  if (threadIdx.x == 0) *penalty = __dmul_rn(reg, __dadd_rn(sA, sD));
}

// one thread per (k, c): table[k][c] = offset_c - log d - ls_c - (log d - mu_c)^2 / (2 sigma_c^2), d = k + 1
__global__ void lognormal_table_kernel(int K, int C, const float* ln, float* table) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= K * C) return;
  const int k = i / C, c = i % C;
  const double ls = fmin(fmax(static_cast<double>(ln[C + c]), kMinLogSigma), kMaxLogSigma);
  const double inv_var = exp(-2.0 * ls);
  const double log_d = log(static_cast<double>(k + 1));
  const double z = log_d - static_cast<double>(ln[c]);
  table[i] = static_cast<float>(static_cast<double>(ln[2 * C + c]) - log_d - ls - 0.5 * z * z * inv_var);
}

// one thread per label c, k in order (the host loop's order): deterministic
__global__ void lognormal_backward_kernel(int K, int C, const float* ln, float* grad_table, float* grad_ln) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const double raw = static_cast<double>(ln[C + c]);
  const bool inside = raw > kMinLogSigma && raw < kMaxLogSigma;
  const double ls = fmin(fmax(raw, kMinLogSigma), kMaxLogSigma);
  const double inv_var = exp(-2.0 * ls);
  double g_mu = 0, g_ls = 0, g_off = 0;
  for (int k = 0; k < K; ++k) {
    float* gt = grad_table + static_cast<size_t>(k) * C + c;
    const double g = static_cast<double>(*gt);
    const double z = log(static_cast<double>(k + 1)) - static_cast<double>(ln[c]);
    g_mu += g * z * inv_var;
    g_ls += g * (z * z * inv_var - 1.0);
    g_off += g;
    *gt = 0.f;
  }
  grad_ln[c] = static_cast<float>(g_mu);
  grad_ln[C + c] = inside ? static_cast<float>(g_ls) : 0.f;
  grad_ln[2 * C + c] = static_cast<float>(g_off);
}

// crf::fold_end_scores, one thread per (b, t, c) of cum [B][T+1][C] (also
// writing onset_out [B][T][C] for t < T): the host's float32 adds.
__global__ void fold_end_kernel(int64_t B, int64_t T, int64_t C, int64_t os, int64_t es, const int32_t* len,
                                const float* cum, const float* onset, const float* end, float* cum_out,
                                float* onset_out) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= B * (T + 1) * C) return;
  const int64_t c = i % C, t = (i / C) % (T + 1), b = i / ((T + 1) * C);
  const int64_t L = clamp_length(len[b], static_cast<int>(T));
  const bool inside = t >= 1 && t <= L;
  const float q = inside ? end[(b * T + t - 1) * es + c] : 0.0f;
  const float x = cum[i];
  cum_out[i] = inside ? x + q : x;
  if (t == T) return;
  const float o = onset && t < L ? onset[(b * T + t) * os + c] : 0.0f;
  onset_out[(b * T + t) * C + c] = t == 0 ? o : (t < L ? o + q : 0.0f);
}

// crf::fold_end_scores_backward, one thread per (b, t, c) of g_end's [B][T][C] entries.
__global__ void fold_end_backward_kernel(int64_t B, int64_t T, int64_t C, int64_t es, const int32_t* len,
                                         const float* __restrict__ g_cum, const float* __restrict__ g_onset,
                                         float* __restrict__ g_end) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= B * T * C) return;
  const int64_t c = i % C, t = (i / C) % T, b = i / (T * C);
  const int64_t L = clamp_length(len[b], static_cast<int>(T));
  float g = 0.0f;
  if (t < L) {
    g = g_cum[(b * (T + 1) + t + 1) * C + c];
    if (g_onset && t + 1 < L) g = g + g_onset[(b * T + t + 1) * C + c];
  }
  g_end[(b * T + t) * es + c] = g;
}
}  // namespace

void centered_cumsum_forward(int B, int T, int C, const float* x, const int32_t* lengths, float* cum, void* stream) {
  if (B < 1 || T < 0 || C < 1) throw std::invalid_argument("crf::device::centered_cumsum_forward: bad dims");
  if (C <= kTileThreads) {  // one block per utterance (measured on one H100 at B 32 T 200 C 39: docs/python.md)
    cumsum_forward_tiled_kernel<<<B, kTileThreads, 0, static_cast<cudaStream_t>(stream)>>>(T, C, x, lengths, cum);
    TS_LAUNCHED("cumsum_forward_tiled_kernel");
    return;
  }
  const unsigned grid = grid_for(int64_t(B) * C, kCumsumThreads);
  cumsum_forward_kernel<<<grid, kCumsumThreads, 0, static_cast<cudaStream_t>(stream)>>>(B, T, C, x, lengths, cum);
  TS_LAUNCHED("cumsum_forward_kernel");
}

size_t centered_cumsum_scratch_bytes(int B, int T, int C) {
  return static_cast<size_t>(B) * static_cast<size_t>(T) * static_cast<size_t>(C) * sizeof(double);
}

void centered_cumsum_backward(int B, int T, int C, const float* grad_cum, const int32_t* lengths, void* scratch,
                              float* grad_x, void* stream) {
  if (B < 1 || T < 0 || C < 1) throw std::invalid_argument("crf::device::centered_cumsum_backward: bad dims");
  const unsigned grid = grid_for(int64_t(B) * C, kCumsumThreads);
  cumsum_backward_kernel<<<grid, kCumsumThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      B, T, C, grad_cum, lengths, static_cast<double*>(scratch), grad_x);
  TS_LAUNCHED("cumsum_backward_kernel");
}

void copy_cumulative(int B, int T, int C, const float* cum, const int32_t* lengths, float* out, void* stream) {
  const int64_t row = int64_t(T + 1) * C, n = int64_t(B) * row;
  if (n == 0) return;
  copy_cumulative_kernel<<<grid_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(n, row, C, cum, lengths,
                                                                                                   out);
  TS_LAUNCHED("copy_cumulative_kernel");
}

void difference_rows(int B, const double* a, const double* b_, void* out, bool f64, void* stream) {
  if (B < 1) return;
  difference_kernel<<<grid_for(B), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(B, a, b_, out, f64);
  TS_LAUNCHED("difference_kernel");
}

void l2_penalty(double reg, int C, int K, const float* transition, const float* duration_bias,
                float* grad_transition, float* grad_duration_bias, double* penalty, void* stream) {
  if (C < 1 || K < 0) throw std::invalid_argument("crf::device::l2_penalty: C must be >= 1 and K >= 0");
  l2_penalty_kernel<<<1, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      reg, int64_t(C) * C, int64_t(K) * C, transition, duration_bias, grad_transition, grad_duration_bias, penalty);
  TS_LAUNCHED("l2_penalty_kernel");
}

void lognormal_duration_table(int K, int C, const float* ln, float* table, void* stream) {
  if (C < 1 || K < 1) throw std::invalid_argument("crf::device::lognormal_duration_table: C and K must be >= 1");
  const int n = K * C;
  lognormal_table_kernel<<<(n + 255) / 256, 256, 0, static_cast<cudaStream_t>(stream)>>>(K, C, ln, table);
  TS_LAUNCHED("lognormal_table_kernel");
}

void lognormal_duration_backward(int K, int C, const float* ln, float* grad_table, float* grad_ln, void* stream) {
  if (C < 1 || K < 1) throw std::invalid_argument("crf::device::lognormal_duration_backward: C and K must be >= 1");
  lognormal_backward_kernel<<<(C + 127) / 128, 128, 0, static_cast<cudaStream_t>(stream)>>>(K, C, ln, grad_table, grad_ln);
  TS_LAUNCHED("lognormal_backward_kernel");
}

void fold_end_scores(const EndFoldShape& s, const int32_t* lengths, const float* cum, const float* onset,
                     const float* end, float* cum_out, float* onset_out, void* stream) {
  if (s.B < 1 || s.T < 1 || s.C < 1 || s.onset_stride < s.C || s.end_stride < s.C)
    throw std::invalid_argument("crf::device::fold_end_scores: dims must be >= 1 and strides >= C");
  const int64_t n = s.B * (s.T + 1) * s.C;
  fold_end_kernel<<<grid_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      s.B, s.T, s.C, s.onset_stride, s.end_stride, lengths, cum, onset, end, cum_out, onset_out);
  TS_LAUNCHED("fold_end_kernel");
}

void fold_end_scores_backward(const EndFoldShape& s, const int32_t* lengths, const float* g_cum_out,
                              const float* g_onset_out, float* g_end, void* stream) {
  if (s.B < 1 || s.T < 1 || s.C < 1 || s.end_stride < s.C)
    throw std::invalid_argument("crf::device::fold_end_scores_backward: dims must be >= 1 and end_stride >= C");
  const int64_t n = s.B * s.T * s.C;
  fold_end_backward_kernel<<<grid_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      s.B, s.T, s.C, s.end_stride, lengths, g_cum_out, g_onset_out, g_end);
  TS_LAUNCHED("fold_end_backward_kernel");
}

}  // namespace timitseg::crf::device
