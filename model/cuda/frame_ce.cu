// crf.frame_ce_weight on the GPU (model/cuda/frame_ce.h); the host definition
// is model/frame_ce.h. Per frame, in float64: m = max_c x, lse = m +
// log(sum_c exp(x - m)) (c ascending), CE = lse - x[label], d x = grad_scale *
// (exp(x - lse) - onehot). No fast-math; products and sums written with the
// _rn intrinsics where nvcc could otherwise contract them into an FMA.
#include "model/cuda/frame_ce.h"

#include <cuda_runtime.h>

#include "common/cuda_check.h"

namespace timitseg::model::gpu {
namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n) { return static_cast<int>(n < 1 ? 1 : (n + kThreads - 1) / kThreads); }

// One thread per frame (b, t).
__global__ void frame_ce_kernel(int B, int T, int C, const float* x, const int32_t* len, const int32_t* labels,
                                double grad_scale, double* frame_ce, float* dx) {
  const int64_t id = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (id >= int64_t(B) * T) return;
  const int b = static_cast<int>(id / T), t = static_cast<int>(id % T);
  float* g = dx + id * C;
  if (t >= len[b]) {
    for (int c = 0; c < C; ++c) g[c] = 0.f;
    frame_ce[id] = 0.0;
    return;
  }
  const float* row = x + id * C;
  double m = -INFINITY;
  for (int c = 0; c < C; ++c) m = fmax(m, static_cast<double>(row[c]));
  double z = 0.0;
  for (int c = 0; c < C; ++c) z = __dadd_rn(z, exp(__dsub_rn(static_cast<double>(row[c]), m)));
  const double lse = __dadd_rn(m, log(z));
  const int y = labels[id];
  frame_ce[id] = __dsub_rn(lse, static_cast<double>(row[y]));
  for (int c = 0; c < C; ++c) {
    const double p = exp(__dsub_rn(static_cast<double>(row[c]), lse));
    g[c] = static_cast<float>(__dmul_rn(grad_scale, __dsub_rn(p, c == y ? 1.0 : 0.0)));
  }
}

// One thread per utterance: sum of its frames' CE, t ascending.
__global__ void frame_ce_sum_kernel(int B, int T, const int32_t* len, const double* frame_ce, double* out) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= B) return;
  double s = 0.0;
  for (int t = 0; t < len[b]; ++t) s = __dadd_rn(s, frame_ce[int64_t(b) * T + t]);
  out[b] = s;
}

__global__ void add_inplace_kernel(float* y, const float* x, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = __fadd_rn(y[i], x[i]);
}

}  // namespace

void frame_cross_entropy(int B, int T, int C, const float* x, const int32_t* lengths, const int32_t* labels,
                         double grad_scale, double* frame_scratch, double* ce_per_utt, float* dx, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  frame_ce_kernel<<<blocks_for(int64_t(B) * T), kThreads, 0, s>>>(B, T, C, x, lengths, labels, grad_scale,
                                                                  frame_scratch, dx);
  TS_LAUNCHED("frame_ce_kernel");
  frame_ce_sum_kernel<<<blocks_for(B), kThreads, 0, s>>>(B, T, lengths, frame_scratch, ce_per_utt);
  TS_LAUNCHED("frame_ce_sum_kernel");
}

void add_inplace(float* y, const float* x, int64_t n, void* stream) {
  if (n <= 0) return;
  add_inplace_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(y, x, n);
  TS_LAUNCHED("add_inplace_kernel");
}

}  // namespace timitseg::model::gpu
