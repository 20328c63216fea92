// The CRF's layers around the backend on CUDA device memory, for callers
// outside model/ (the C API's zero-copy path, capi/crf_fast.cpp): the
// zero-centered cumsum (crf/cumsum.h semantics, bitwise its host results),
// the L2 penalty's gradient (crf::l2_penalty's), and per-utterance
// differences. Forwards to model/cuda/ (private to model/); in a build
// without CUDA every call throws std::runtime_error. Pointers are device
// memory, `stream` a cudaStream_t as void* (nullptr: the default stream);
// nothing synchronizes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace timitseg::model::device {

// x [B][T][C] -> cum [B][T+1][C]; lengths [B] in [0, T] (rows t > L are 0).
void centered_cumsum_forward(int B, int T, int C, const float* x, const int32_t* lengths, float* cum, void* stream);
// grad_cum [B][T+1][C] -> grad_x [B][T][C]; scratch of centered_cumsum_scratch_bytes bytes.
size_t centered_cumsum_scratch_bytes(int B, int T, int C);
void centered_cumsum_backward(int B, int T, int C, const float* grad_cum, const int32_t* lengths, void* scratch,
                              float* grad_x, void* stream);
// cum [B][T+1][C] -> out, row 0 and rows t > lengths[b] of every utterance set to 0.
void copy_cumulative(int B, int T, int C, const float* cum, const int32_t* lengths, float* out, void* stream);
// ADDS 2*reg*A / 2*reg*D to the grads (nullptr: skipped), -inf entries left out;
// the penalty's value -> *penalty (device double[1]). K = 0: transition only.
void l2_penalty(double reg, int C, int K, const float* transition, const float* duration_bias,
                float* grad_transition, float* grad_duration_bias, double* penalty, void* stream);
// out[b] = a[b] - b_[b] (b_ nullptr: a[b]) in float64, stored as float32 or (f64) float64.
void difference_rows(int B, const double* a, const double* b_, void* out, bool f64, void* stream);

}  // namespace timitseg::model::device
