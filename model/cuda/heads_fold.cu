// The anchored heads' fold on the GPU (model/cuda/heads_fold.h); the host
// definition is model/heads_fold.cpp, whose additions these kernels make in the
// same order.
#include "model/cuda/heads_fold.h"

#include <cuda_runtime.h>

#include <stdexcept>

#include "common/cuda_check.h"
#include "crf/device_layers.h"

namespace timitseg::model::gpu {
namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n) { return static_cast<int>(n < 1 ? 1 : (n + kThreads - 1) / kThreads); }

// onset[bt][q] = sum over the first-frame heads a (bit a of first_mask), in increasing a.
__global__ void sum_first_frame_heads_kernel(int64_t BT, int A, int C, unsigned first_mask, const float* heads,
                                             float* onset) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= BT * C) return;
  const int64_t bt = i / C, q = i % C;
  float acc = 0.f;
  for (int a = 0; a < A; ++a)
    if (first_mask >> a & 1u) acc += heads[(bt * A + a) * C + q];
  onset[i] = acc;
}

// dheads[bt][a][q] = donset[bt][q] for a first-frame head, else 0.
__global__ void first_frame_heads_backward_kernel(int64_t BT, int A, int C, unsigned first_mask, const float* donset,
                                                  float* dheads) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= BT * A * C) return;
  const int64_t bt = i / (int64_t(A) * C), a = i / C % A, q = i % C;
  dheads[i] = (first_mask >> a & 1u) ? donset[bt * C + q] : 0.f;
}

unsigned first_frame_mask(const AnchoredHeads& h) {
  if (h.count() > 32) throw std::invalid_argument("fold_heads: at most 32 heads");
  unsigned m = 0;
  for (int a = 0; a < h.count(); ++a)
    if (h.anchors[a] == Anchor::first_frame) m |= 1u << a;
  return m;
}

}  // namespace

const float* fold_heads(const AnchoredHeads& h, int B, int T, int C, const int32_t* len, const float* heads,
                        float* cum, float* onset_out, void* stream) {
  if (h.count() == 0) return nullptr;
  if (h.fold_is_identity()) return heads;
  const int64_t BT = int64_t(B) * T;
  auto s = static_cast<cudaStream_t>(stream);
  sum_first_frame_heads_kernel<<<blocks_for(BT * C), kThreads, 0, s>>>(BT, h.count(), C, first_frame_mask(h), heads,
                                                                       onset_out);
  TS_LAUNCHED("sum_first_frame_heads_kernel (fold_heads)");
  const crf::EndFoldShape shape{B, T, C, C, int64_t(h.count()) * C};
  for (int a = 0; a < h.count(); ++a)  // the end heads, in place (crf/device_layers.h)
    if (h.anchors[a] == Anchor::last_frame)
      crf::device::fold_end_scores(shape, len, cum, onset_out, heads + int64_t(a) * C, cum, onset_out, stream);
  return onset_out;
}

const float* fold_heads_backward(const AnchoredHeads& h, int B, int T, int C, const int32_t* len, const float* dcum,
                                 const float* donset, float* dheads_out, void* stream) {
  if (h.count() == 0) return nullptr;
  if (h.fold_is_identity()) return donset;
  const int64_t BT = int64_t(B) * T;
  auto s = static_cast<cudaStream_t>(stream);
  first_frame_heads_backward_kernel<<<blocks_for(BT * h.count() * C), kThreads, 0, s>>>(
      BT, h.count(), C, first_frame_mask(h), donset, dheads_out);
  TS_LAUNCHED("first_frame_heads_backward_kernel (fold_heads_backward)");
  const crf::EndFoldShape shape{B, T, C, C, int64_t(h.count()) * C};
  for (int a = 0; a < h.count(); ++a)
    if (h.anchors[a] == Anchor::last_frame)
      crf::device::fold_end_scores_backward(shape, len, dcum, donset, dheads_out + int64_t(a) * C, stream);
  return dheads_out;
}

}  // namespace timitseg::model::gpu
