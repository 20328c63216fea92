// crf.frame_ce_weight on the GPU: the frame cross-entropy of model/frame_ce.h
// (the host version and its definition), with the same float64 arithmetic and
// summation order. Compiles without CUDA headers; every pointer is device
// memory, `stream` a cudaStream_t as void*. Nothing synchronizes. No float
// atomics: one thread per frame computes its log-softmax, one thread per
// utterance sums its frames in t order.
#pragma once

#include <cstdint>

namespace timitseg::model::gpu {

// x [B][T][C] (batch-major scores), lengths [B], labels [B][T] (valid frames
// in [0, C)). Writes frame_scratch [B][T] (double: the CE of each frame, 0 on
// padding), ce_per_utt [B] (double: sum over t < L_b, t ascending) and dx
// [B][T][C] = float(grad_scale * (softmax - onehot)) on valid frames, 0 on
// padding. Throws std::runtime_error naming the kernel on a failed launch.
void frame_cross_entropy(int B, int T, int C, const float* x, const int32_t* lengths, const int32_t* labels,
                         double grad_scale, double* frame_scratch, double* ce_per_utt, float* dx, void* stream);

// y[i] += x[i], i < n (float32): the frame CE's gradient added to the cumsum's
// d scores in the encoder's backward (Encoder::backward's dscores).
void add_inplace(float* y, const float* x, int64_t n, void* stream);

}  // namespace timitseg::model::gpu
