// The centered cumsum on the GPU (model/cuda/cumsum.h).
#include "model/cuda/cumsum.h"

#include <algorithm>
#include <atomic>
#include <stdexcept>

#include "common/cuda_check.h"

namespace timitseg::model::gpu {
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

// The tiled kernels below: one block per utterance, thread c owns label c (C
// <= kMaxTiledC), the block loads TT frames [TT][C] of the utterance at a time
// into shared memory with all its threads (one memory latency per tile instead
// of one per kChunk frames), and thread c then runs the same float64 chain as
// the host code over the tile (the order of every sum is the host's, so the
// results are bitwise those of crf/cumsum.cpp). Used when a tile of at least
// one frame fits the shared memory (tile_frames); else the kernels above.
constexpr int kMaxTiledC = 1024;
// Shared memory the tiled kernels ask for at most (bytes): at B 32, T 200, C 39
// the backward's [T][C] float64 tile (62 KiB) is then one tile.
constexpr size_t kTiledSmemCap = 160 * 1024;

// Forward: pass 1 sums x over t ascending (the mean), pass 2 runs the centered
// sum ascending and writes cum; with one tile the second pass reads it again.
__global__ void cumsum_forward_tiled_kernel(int T, int C, int TT, const float* __restrict__ x,
                                            const int32_t* __restrict__ len, float* __restrict__ cum) {
  extern __shared__ double smem_f[];
  float* tile = reinterpret_cast<float*>(smem_f);  // [TT][C]
  const int b = blockIdx.x, c = threadIdx.x;
  const bool own = c < C;
  const int L = clamp_length(len[b], T);
  const float* xb = x + int64_t(b) * T * C;
  float* cb = cum + int64_t(b) * (T + 1) * C;
  const int ntiles = (L + TT - 1) / TT;
  int resident = -1;
  auto load = [&](int i) {
    if (resident == i) return;
    const int t0 = i * TT, n = min(TT, L - t0);
    __syncthreads();  // every thread is done with the last tile
    for (int j = threadIdx.x; j < n * C; j += blockDim.x) tile[j] = xb[int64_t(t0) * C + j];
    __syncthreads();
    resident = i;
  };
  double mean = 0.0;
  for (int i = 0; i < ntiles; ++i) {
    load(i);
    const int n = min(TT, L - i * TT);
    if (own) {
#pragma unroll 8
      for (int u = 0; u < n; ++u) mean += static_cast<double>(tile[u * C + c]);
    }
  }
  mean /= static_cast<double>(L > 0 ? L : 1);
  double run = 0.0;
  if (own) cb[c] = 0.f;
  for (int i = 0; i < ntiles; ++i) {
    load(i);
    const int t0 = i * TT, n = min(TT, L - t0);
    if (own) {
#pragma unroll 8
      for (int u = 0; u < n; ++u) {
        run += static_cast<double>(tile[u * C + c]) - mean;
        cb[int64_t(t0 + u + 1) * C + c] = static_cast<float>(run);
      }
    }
  }
  for (int64_t j = int64_t(L + 1) * C + threadIdx.x; j < int64_t(T + 1) * C; j += blockDim.x) cb[j] = 0.f;
}

// Backward: pass 1 (tiles from the last) turns the tile of dcum rows t+1 into
// g[t] = sum_{s=t+1..L} dcum[s] in place (t descending), written to the
// scratch when there is more than one tile; pass 2 sums g ascending (the
// mean); pass 3 writes dx = float(g - mean) with every thread. A tile still in
// shared memory is not read again.
__global__ void cumsum_backward_tiled_kernel(int T, int C, int TT, const float* __restrict__ dcum,
                                             const int32_t* __restrict__ len, double* __restrict__ g,
                                             float* __restrict__ dx) {
  extern __shared__ double smem_b[];
  double* tile = smem_b;            // [TT][C]
  double* means = smem_b + TT * C;  // [C]
  const int b = blockIdx.x, c = threadIdx.x;
  const bool own = c < C;
  const int L = clamp_length(len[b], T);
  const float* gb = dcum + int64_t(b) * (T + 1) * C;
  double* g_b = g + int64_t(b) * T * C;
  float* xb = dx + int64_t(b) * T * C;
  const int ntiles = (L + TT - 1) / TT;
  double run = 0.0;
  for (int i = ntiles - 1; i >= 0; --i) {
    const int t0 = i * TT, n = min(TT, L - t0);
    __syncthreads();
    for (int j = threadIdx.x; j < n * C; j += blockDim.x) tile[j] = static_cast<double>(gb[int64_t(t0 + 1) * C + j]);
    __syncthreads();
    if (own) {
#pragma unroll 8
      for (int u = n - 1; u >= 0; --u) {
        run += tile[u * C + c];
        tile[u * C + c] = run;
      }
    }
    if (ntiles > 1) {
      __syncthreads();
      for (int j = threadIdx.x; j < n * C; j += blockDim.x) g_b[int64_t(t0) * C + j] = tile[j];
    }
  }
  int resident = 0;  // pass 1 ended on tile 0
  auto load = [&](int i) {
    if (resident == i) return;
    const int t0 = i * TT, n = min(TT, L - t0);
    __syncthreads();
    for (int j = threadIdx.x; j < n * C; j += blockDim.x) tile[j] = g_b[int64_t(t0) * C + j];
    __syncthreads();
    resident = i;
  };
  double mean = 0.0;
  for (int i = 0; i < ntiles; ++i) {
    load(i);
    const int n = min(TT, L - i * TT);
    if (own) {
#pragma unroll 8
      for (int u = 0; u < n; ++u) mean += tile[u * C + c];
    }
  }
  if (own) means[c] = mean / static_cast<double>(L > 0 ? L : 1);
  __syncthreads();
  for (int i = ntiles - 1; i >= 0; --i) {  // the last tile of pass 2 first: still resident
    load(i);
    const int t0 = i * TT, n = min(TT, L - t0);
    for (int j = threadIdx.x; j < n * C; j += blockDim.x)
      xb[int64_t(t0) * C + j] = static_cast<float>(tile[j] - means[j % C]);
  }
  for (int64_t j = int64_t(L) * C + threadIdx.x; j < int64_t(T) * C; j += blockDim.x) xb[j] = 0.f;
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

// The tiled kernels' launch shape: frames per tile (0: the tiled kernel does
// not apply), threads (one per label, at least 128 to load), shared bytes.
struct Tiling {
  int frames = 0, threads = 0;
  size_t bytes = 0;
};

// The device's opt-in shared memory per block (bytes), read once per device.
size_t smem_optin() {
  constexpr int kDevices = 64;
  static std::atomic<int> cached[kDevices];  // 0: not read yet
  int dev = 0;
  TS_CUDA(cudaGetDevice(&dev));
  if (dev >= 0 && dev < kDevices && cached[dev].load(std::memory_order_relaxed) > 0)
    return static_cast<size_t>(cached[dev].load(std::memory_order_relaxed));
  int v = 0;
  TS_CUDA(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  if (dev >= 0 && dev < kDevices) cached[dev].store(v, std::memory_order_relaxed);
  return static_cast<size_t>(v);
}

// Tiles of `elem` bytes per (frame, label) plus `extra` bytes, in at most
// min(opt-in, kTiledSmemCap) bytes; frames = min(T, what fits), at least 1.
Tiling tiling(int T, int C, size_t elem, size_t extra) {
  Tiling tl;
  if (C > kMaxTiledC || T < 1) return tl;
  const size_t cap = std::min(smem_optin(), kTiledSmemCap), row = elem * static_cast<size_t>(C);
  if (cap < extra + row) return tl;
  tl.frames = static_cast<int>(std::min<size_t>(static_cast<size_t>(T), (cap - extra) / row));
  tl.threads = std::max(128, (C + 31) / 32 * 32);
  tl.bytes = extra + row * static_cast<size_t>(tl.frames);
  return tl;
}

// Lets `kernel` take `bytes` of dynamic shared memory (over the default 48 KiB).
template <class K>
void allow_smem(K kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    TS_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

}  // namespace

void centered_cumsum_forward(int B, int T, int C, const float* x, const int32_t* lengths, float* cum, void* stream) {
  if (B < 1 || T < 0 || C < 1) throw std::invalid_argument("gpu::centered_cumsum_forward: bad dims");
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const Tiling tl = tiling(T, C, sizeof(float), 0);
  if (tl.frames > 0) {
    allow_smem(cumsum_forward_tiled_kernel, tl.bytes);
    cumsum_forward_tiled_kernel<<<B, tl.threads, tl.bytes, s>>>(T, C, tl.frames, x, lengths, cum);
    TS_LAUNCHED("cumsum_forward_tiled_kernel");
    return;
  }
  const unsigned grid = grid_for(int64_t(B) * C, kCumsumThreads);
  cumsum_forward_kernel<<<grid, kCumsumThreads, 0, s>>>(B, T, C, x, lengths, cum);
  TS_LAUNCHED("cumsum_forward_kernel");
}

size_t centered_cumsum_scratch_bytes(int B, int T, int C) {
  return static_cast<size_t>(B) * static_cast<size_t>(T) * static_cast<size_t>(C) * sizeof(double);
}

void centered_cumsum_backward(int B, int T, int C, const float* grad_cum, const int32_t* lengths, void* scratch,
                              float* grad_x, void* stream) {
  if (B < 1 || T < 0 || C < 1) throw std::invalid_argument("gpu::centered_cumsum_backward: bad dims");
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const Tiling tl = tiling(T, C, sizeof(double), static_cast<size_t>(C) * sizeof(double));
  if (tl.frames > 0) {
    allow_smem(cumsum_backward_tiled_kernel, tl.bytes);
    cumsum_backward_tiled_kernel<<<B, tl.threads, tl.bytes, s>>>(T, C, tl.frames, grad_cum, lengths,
                                                                  static_cast<double*>(scratch), grad_x);
    TS_LAUNCHED("cumsum_backward_tiled_kernel");
    return;
  }
  const unsigned grid = grid_for(int64_t(B) * C, kCumsumThreads);
  cumsum_backward_kernel<<<grid, kCumsumThreads, 0, s>>>(B, T, C, grad_cum, lengths, static_cast<double*>(scratch),
                                                         grad_x);
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

}  // namespace timitseg::model::gpu
