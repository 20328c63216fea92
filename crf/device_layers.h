// The CRF's layers around the backend on CUDA device memory: the zero-centered
// cumsum (crf/cumsum.h semantics, bitwise its host results), the L2 penalty
// (crf::l2_penalty's value and gradient), the log-normal duration table and
// its gradient (crf/duration.h's host functions), the end-score fold and its
// backward (crf/end_scores.h's host functions, bitwise), and per-utterance
// differences. Used by the GPU executor (model/cuda/) and by the C API's
// zero-copy path (capi/crf_fast.cpp, capi/crf_penalty.cpp). Kernels in
// crf/cuda/layers.cu; in a build without CUDA every call throws
// std::runtime_error (crf/device_layers.cpp). Compiles without CUDA headers.
// Pointers are device memory, `stream` a cudaStream_t as void* (nullptr: the
// default stream); nothing synchronizes. A failed launch throws
// std::runtime_error naming the kernel.
#pragma once

#include <cstddef>
#include <cstdint>

#include "crf/end_scores.h"

namespace timitseg::crf::device {

// x [B][T][C] -> cum [B][T+1][C]; lengths [B] (device) in [0, T]: rows t > L
// of cum are 0 (a row of length 0 is all 0). A length outside [0, T] is read
// as its nearest end (no access outside the rows; the caller reports it).
void centered_cumsum_forward(int B, int T, int C, const float* x, const int32_t* lengths, float* cum, void* stream);

// grad_cum [B][T+1][C] -> grad_x [B][T][C] (overwritten, padding frames 0).
// scratch: device memory of centered_cumsum_scratch_bytes(B, T, C) bytes.
size_t centered_cumsum_scratch_bytes(int B, int T, int C);
void centered_cumsum_backward(int B, int T, int C, const float* grad_cum, const int32_t* lengths, void* scratch,
                              float* grad_x, void* stream);

// cum [B][T+1][C] of a caller -> out, the same with row 0 of every utterance set to 0
// and rows t > lengths[b] set to 0, as the general path of the C API copies them.
void copy_cumulative(int B, int T, int C, const float* cum, const int32_t* lengths, float* out, void* stream);

// out[b] = a[b] - b_[b] (b_ nullptr: a[b]) in float64, stored as float32 (f64 = false) or float64.
void difference_rows(int B, const double* a, const double* b_, void* out, bool f64, void* stream);

// value reg*(sum A^2 + sum D^2) -> *penalty (device double[1]); ADDS 2*reg*A, 2*reg*D to the grads.
// -inf entries are skipped exactly as crf::l2_penalty does. transition [C][C],
// duration_bias [K][C] (K = 0: transition only); the grads may be nullptr (value only).
void l2_penalty(double reg, int C, int K, const float* transition, const float* duration_bias,
                float* grad_transition, float* grad_duration_bias, double* penalty, void* stream);

// crf.duration_model = lognormal (crf/duration.h, the host functions these reproduce):
// ln [3][C] (mu, log_sigma, offset) -> table [K][C]; and grad_table [K][C] -> grad_ln [3][C]
// (overwritten; per label a sequential sum over k in double), grad_table zeroed.
void lognormal_duration_table(int K, int C, const float* ln, float* table, void* stream);
void lognormal_duration_backward(int K, int C, const float* ln, float* grad_table, float* grad_ln, void* stream);

// End scores folded into cum_scores and onset (crf/end_scores.h, the host
// functions these reproduce bitwise: the same float32 adds). Shapes and
// strides as there; lengths [B] is DEVICE memory, each read clamped to
// [0, T] (no access outside the rows; the caller checks the lengths on the
// host, e.g. with check_end_fold_shape). cum_out may be cum; onset_out may be
// onset when onset_stride == C. Throws std::invalid_argument for bad dims or
// strides.
void fold_end_scores(const EndFoldShape& shape, const int32_t* lengths, const float* cum, const float* onset,
                     const float* end, float* cum_out, float* onset_out, void* stream);
void fold_end_scores_backward(const EndFoldShape& shape, const int32_t* lengths, const float* g_cum_out,
                              const float* g_onset_out, float* g_end, void* stream);

}  // namespace timitseg::crf::device
