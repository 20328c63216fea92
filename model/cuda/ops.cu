// GPU kernels of a training step (see ops.h). The arithmetic follows the host
// code it replaces (model/optim.h) operation by
// operation; products that the host does not fuse are written with the _rn
// intrinsics so that nvcc cannot contract them into an FMA (different
// rounding). No fast-math.
#include "model/cuda/ops.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "common/cuda_check.h"
#include "common/cuda_reduce.cuh"
#include "model/cuda/dropout_hash.h"

namespace timitseg::model::gpu {
namespace {

constexpr int kThreads = 256;        // threads per block of every kernel here (a power of two)
constexpr size_t kMaxNormBlocks = 1024;  // blocks of global_norm's first pass

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

int blocks_for(size_t n, size_t max_blocks = 65535 * 16) {
  size_t b = (n + kThreads - 1) / kThreads;
  if (b < 1) b = 1;
  if (b > max_blocks) b = max_blocks;
  return static_cast<int>(b);
}

// Pass 1: block j sums squares of the contiguous chunk [j*chunk, min(n, (j+1)*chunk)).
__global__ void sumsq_partial_kernel(const float* x, size_t n, size_t chunk, double* partial) {
  __shared__ double shared[kThreads];
  const size_t begin = blockIdx.x * chunk;
  size_t end = begin + chunk;
  if (end > n) end = n;
  double s = 0.0;
  for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const double v = static_cast<double>(x[i]);
    s = __dadd_rn(s, __dmul_rn(v, v));
  }
  const double total = ::timitseg::cuda::block_sum(s, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

// Pass 2: one block sums the partials (strided, then a tree) and takes the square root.
__global__ void sumsq_final_kernel(const double* partial, int count, double* norm) {
  __shared__ double shared[kThreads];
  double s = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) s = __dadd_rn(s, partial[i]);
  const double total = ::timitseg::cuda::block_sum(s, shared);
  if (threadIdx.x == 0) *norm = sqrt(total);
}

__global__ void clip_kernel(float* g, size_t n, const double* norm, double max_norm) {
  const double nv = *norm;
  if (!(max_norm > 0) || !isfinite(nv)) return;
  const double f = max_norm / __dadd_rn(nv, 1e-6);
  if (!(f < 1.0)) return;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    g[i] = static_cast<float>(__dmul_rn(static_cast<double>(g[i]), f));
}

// AdamW::update, element i (constants precomputed on the host exactly as there).
__global__ void adamw_kernel(float* p, float* m, float* v, const float* grad, size_t n, float decay, float b1,
                             float b2, float one_minus_b1, float one_minus_b2, double step_size, double sqrt_bc2,
                             double eps) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float g = grad[i];
    float pi = __fmul_rn(p[i], decay);
    const float mi = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(one_minus_b1, g));
    const float vi = __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(__fmul_rn(one_minus_b2, g), g));
    const double denom = __dadd_rn(__ddiv_rn(sqrt(static_cast<double>(vi)), sqrt_bc2), eps);
    pi = __fsub_rn(pi, static_cast<float>(__ddiv_rn(__dmul_rn(step_size, static_cast<double>(mi)), denom)));
    m[i] = mi;
    v[i] = vi;
    p[i] = pi;
  }
}

__global__ void count_nonfinite_kernel(const float* x, size_t n, unsigned long long* count) {
  __shared__ unsigned long long shared[kThreads];
  unsigned long long c = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    c += isfinite(x[i]) ? 0ull : 1ull;
  shared[threadIdx.x] = c;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0 && shared[0] != 0) atomicAdd(count, shared[0]);  // integer: order does not matter
}

// ---- numeric checks ----------------------------------------------------------------

struct StatsTable {
  StatsEntry e[kStatsMaxEntries];
};

__device__ void stats_identity(StatsSlot& s) {
  s.nan = s.inf = s.finite = 0;
  s.min = INFINITY;
  s.max = -INFINITY;
}
__device__ void stats_add_value(StatsSlot& s, double v) {
  if (isnan(v)) {
    ++s.nan;
  } else if (isinf(v)) {
    ++s.inf;
  } else {
    ++s.finite;
    s.min = fmin(s.min, v);
    s.max = fmax(s.max, v);
  }
}
__device__ void stats_merge(StatsSlot& a, const StatsSlot& b) {
  a.nan += b.nan;
  a.inf += b.inf;
  a.finite += b.finite;
  a.min = fmin(a.min, b.min);  // both finite or +-inf: never NaN
  a.max = fmax(a.max, b.max);
}
// In-block tree over shared[blockDim.x] (a power of two); the result in shared[0].
__device__ void stats_block_reduce(StatsSlot* shared) {
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) stats_merge(shared[threadIdx.x], shared[threadIdx.x + s]);
    __syncthreads();
  }
}

// Elements [begin, end) of entry en, strided over the block. A strided entry
// walks (row, column) incrementally: one division per thread, not per element.
template <class T>
__device__ void stats_range(const T* x, const StatsEntry& en, int64_t begin, int64_t end, StatsSlot& s) {
  int64_t i = begin + threadIdx.x;
  if (en.stride == en.cols) {
    for (; i < end; i += blockDim.x) stats_add_value(s, static_cast<double>(x[i]));
    return;
  }
  const int64_t step_r = blockDim.x / en.cols, step_c = blockDim.x % en.cols;
  int64_t r = i / en.cols, c = i % en.cols;
  for (; i < end; i += blockDim.x) {
    stats_add_value(s, static_cast<double>(x[r * en.stride + c]));
    r += step_r;
    c += step_c;
    if (c >= en.cols) {
      c -= en.cols;
      ++r;
    }
  }
}

// grid (kStatsChunks, count): block (j, e) reduces chunk j of entry e. The
// chunk size depends on the entry's size only; chunks past the end write the identity.
__global__ void stats_partials_kernel(StatsTable table, StatsSlot* partials) {
  __shared__ StatsSlot shared[kThreads];
  const StatsEntry& en = table.e[blockIdx.y];
  const int64_t n = en.rows * en.cols;
  const int64_t chunk = (n + kStatsChunks - 1) / kStatsChunks;
  const int64_t begin = int64_t(blockIdx.x) * chunk;
  const int64_t end = begin + chunk < n ? begin + chunk : n;
  StatsSlot s;
  stats_identity(s);
  if (en.is_double)
    stats_range(static_cast<const double*>(en.data), en, begin, end, s);
  else
    stats_range(static_cast<const float*>(en.data), en, begin, end, s);
  shared[threadIdx.x] = s;
  stats_block_reduce(shared);
  if (threadIdx.x == 0) partials[int64_t(en.slot) * kStatsChunks + blockIdx.x] = shared[0];
}

// grid (last - first): block s reduces the kStatsChunks partials of slot first + s.
__global__ void stats_final_kernel(const StatsSlot* partials, int first, StatsSlot* slots) {
  __shared__ StatsSlot shared[kStatsChunks];
  const int slot = first + static_cast<int>(blockIdx.x);
  shared[threadIdx.x] = partials[int64_t(slot) * kStatsChunks + threadIdx.x];
  stats_block_reduce(shared);
  if (threadIdx.x == 0) slots[slot] = shared[0];
}

__global__ void dropout_scale_kernel(uint64_t key, double p, float keep, size_t n, float* scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    scale[i] = dropout_uniform_keyed(key, i) < p ? 0.f : keep;
}

}  // namespace

namespace {
// The first pass's grid: a function of n only (so the summation order is too).
size_t norm_blocks(size_t n, size_t* chunk) {
  // chunks of at least 4 elements per thread, at most kMaxNormBlocks blocks
  size_t per_block = size_t(kThreads) * 4;
  size_t blocks = (n + per_block - 1) / per_block;
  if (blocks < 1) blocks = 1;
  if (blocks > kMaxNormBlocks) blocks = kMaxNormBlocks;
  *chunk = (n + blocks - 1) / blocks;
  if (*chunk < 1) *chunk = 1;
  return blocks;
}
}  // namespace

size_t global_norm_scratch_bytes(size_t n) {
  size_t chunk = 0;
  return norm_blocks(n, &chunk) * sizeof(double);
}

void global_norm(const float* grad, size_t n, double* norm, void* scratch, void* stream) {
  size_t chunk = 0;
  const size_t blocks = norm_blocks(n, &chunk);
  double* partial = static_cast<double*>(scratch);
  sumsq_partial_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, as_stream(stream)>>>(grad, n, chunk, partial);
  TS_LAUNCHED("sumsq_partial_kernel (global_norm)");
  sumsq_final_kernel<<<1, kThreads, 0, as_stream(stream)>>>(partial, static_cast<int>(blocks), norm);
  TS_LAUNCHED("sumsq_final_kernel (global_norm)");
}

void clip_by_norm(float* grad, size_t n, const double* norm, double max_norm, void* stream) {
  if (n == 0) return;
  clip_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(grad, n, norm, max_norm);
  TS_LAUNCHED("clip_kernel (clip_by_norm)");
}

void adamw_update(float* params, float* exp_avg, float* exp_avg_sq, const float* grad, size_t n, double lr,
                  double beta1, double beta2, double eps, double weight_decay, int64_t step, void* stream) {
  if (step < 1) throw std::invalid_argument("gpu::adamw_update: step must be >= 1, got " + std::to_string(step));
  if (n == 0) return;
  // exactly as AdamW::update (model/optim.h)
  const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(step));
  const double step_size = lr / bc1;
  const double sqrt_bc2 = std::sqrt(bc2);
  const float b1 = static_cast<float>(beta1), b2 = static_cast<float>(beta2);
  const float decay = static_cast<float>(1.0 - lr * weight_decay);
  adamw_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(params, exp_avg, exp_avg_sq, grad, n, decay, b1,
                                                                   b2, 1.f - b1, 1.f - b2, step_size, sqrt_bc2, eps);
  TS_LAUNCHED("adamw_kernel (adamw_update)");
}

void count_nonfinite(const float* x, size_t n, unsigned long long* count, void* stream) {
  TS_CUDA(cudaMemsetAsync(count, 0, sizeof(unsigned long long), as_stream(stream)));
  if (n == 0) return;
  count_nonfinite_kernel<<<blocks_for(n, 4096), kThreads, 0, as_stream(stream)>>>(x, n, count);
  TS_LAUNCHED("count_nonfinite_kernel");
}

void stats_partials(const StatsEntry* entries, int count, StatsSlot* partials, void* stream) {
  if (count < 1 || count > kStatsMaxEntries)
    throw std::invalid_argument("gpu::stats_partials: " + std::to_string(count) + " tensors in one launch (1.." +
                                std::to_string(kStatsMaxEntries) + ")");
  StatsTable table{};
  for (int i = 0; i < count; ++i) {
    const StatsEntry& e = entries[i];
    if (!e.data || e.rows < 1 || e.cols < 1 || e.stride < e.cols || e.slot < 0)
      throw std::invalid_argument("gpu::stats_partials: bad tensor " + std::to_string(i) + " (rows " +
                                  std::to_string(e.rows) + ", cols " + std::to_string(e.cols) + ", stride " +
                                  std::to_string(e.stride) + ")");
    table.e[i] = e;
  }
  static_assert(kThreads >= 1 && (kThreads & (kThreads - 1)) == 0, "kThreads: a power of two");
  const dim3 grid(kStatsChunks, static_cast<unsigned>(count));
  stats_partials_kernel<<<grid, kThreads, 0, as_stream(stream)>>>(table, partials);
  TS_LAUNCHED("stats_partials_kernel");
}

void stats_final(const StatsSlot* partials, int first, int last, StatsSlot* slots, void* stream) {
  if (first < 0 || last < first) throw std::invalid_argument("gpu::stats_final: bad slot range");
  if (last == first) return;
  static_assert((kStatsChunks & (kStatsChunks - 1)) == 0, "kStatsChunks: a power of two");
  stats_final_kernel<<<static_cast<unsigned>(last - first), kStatsChunks, 0, as_stream(stream)>>>(partials, first,
                                                                                                 slots);
  TS_LAUNCHED("stats_final_kernel");
}

void dropout_scale(uint64_t seed, uint64_t step, uint64_t site, double p, size_t n, float* scale, void* stream) {
  if (!(p >= 0.0 && p < 1.0)) throw std::invalid_argument("gpu::dropout_scale: p must be in [0, 1)");
  if (n == 0) return;
  dropout_scale_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(
      dropout_key(seed, step, site), p, static_cast<float>(1.0 / (1.0 - p)), n, scale);
  TS_LAUNCHED("dropout_scale_kernel");
}

}  // namespace timitseg::model::gpu
