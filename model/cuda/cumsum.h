// The zero-centered cumsum of crf/cumsum.h on the GPU (its forward and
// backward, the same float64 order as crf::centered_cumsum_forward/backward,
// so the results are bitwise those of the host code), used by the cuDNN
// encoder's head and, through model/crf_device.h, by the C API's zero-copy path. Compiles
// without CUDA headers; pointers are device memory, `stream` a cudaStream_t as
// void* (nullptr: the default stream). Nothing synchronizes. A failed launch
// throws std::runtime_error naming the kernel.
#pragma once

#include <cstddef>
#include <cstdint>

namespace timitseg::model::gpu {

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

}  // namespace timitseg::model::gpu
