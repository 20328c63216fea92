// model/crf_device.h: forwards to model/cuda/ when this build has CUDA.
#include "model/crf_device.h"

#include <stdexcept>

#ifdef TIMITSEG_HAVE_CUDA
#include "model/cuda/cumsum.h"
#include "model/cuda/ops.h"
#endif

namespace timitseg::model::device {

#ifdef TIMITSEG_HAVE_CUDA
void centered_cumsum_forward(int B, int T, int C, const float* x, const int32_t* lengths, float* cum, void* stream) {
  gpu::centered_cumsum_forward(B, T, C, x, lengths, cum, stream);
}
size_t centered_cumsum_scratch_bytes(int B, int T, int C) { return gpu::centered_cumsum_scratch_bytes(B, T, C); }
void centered_cumsum_backward(int B, int T, int C, const float* grad_cum, const int32_t* lengths, void* scratch,
                              float* grad_x, void* stream) {
  gpu::centered_cumsum_backward(B, T, C, grad_cum, lengths, scratch, grad_x, stream);
}
void copy_cumulative(int B, int T, int C, const float* cum, const int32_t* lengths, float* out, void* stream) {
  gpu::copy_cumulative(B, T, C, cum, lengths, out, stream);
}
void l2_penalty(double reg, int C, int K, const float* transition, const float* duration_bias,
                float* grad_transition, float* grad_duration_bias, double* penalty, void* stream) {
  gpu::l2_penalty(reg, C, K, transition, duration_bias, grad_transition, grad_duration_bias, penalty, stream);
}
void difference_rows(int B, const double* a, const double* b_, void* out, bool f64, void* stream) {
  gpu::difference_rows(B, a, b_, out, f64, stream);
}
#else
namespace {
[[noreturn]] void no_cuda() { throw std::runtime_error("model/crf_device.h: this build has no CUDA"); }
}  // namespace
void centered_cumsum_forward(int, int, int, const float*, const int32_t*, float*, void*) { no_cuda(); }
size_t centered_cumsum_scratch_bytes(int, int, int) { no_cuda(); }
void centered_cumsum_backward(int, int, int, const float*, const int32_t*, void*, float*, void*) { no_cuda(); }
void copy_cumulative(int, int, int, const float*, const int32_t*, float*, void*) { no_cuda(); }
void l2_penalty(double, int, int, const float*, const float*, float*, float*, double*, void*) { no_cuda(); }
void difference_rows(int, const double*, const double*, void*, bool, void*) { no_cuda(); }
#endif

}  // namespace timitseg::model::device
