// crf/device_layers.h in a build without CUDA: every call throws (the kernels,
// crf/cuda/layers.cu, are built only with CUDA).
#include "crf/device_layers.h"

#include <stdexcept>

namespace timitseg::crf::device {

#ifndef TIMITSEG_HAVE_CUDA
namespace {
[[noreturn]] void no_cuda() { throw std::runtime_error("crf/device_layers.h: this build has no CUDA"); }
}  // namespace
void centered_cumsum_forward(int, int, int, const float*, const int32_t*, float*, void*) { no_cuda(); }
size_t centered_cumsum_scratch_bytes(int, int, int) { no_cuda(); }
void centered_cumsum_backward(int, int, int, const float*, const int32_t*, void*, float*, void*) { no_cuda(); }
void copy_cumulative(int, int, int, const float*, const int32_t*, float*, void*) { no_cuda(); }
void difference_rows(int, const double*, const double*, void*, bool, void*) { no_cuda(); }
void l2_penalty(double, int, int, const float*, const float*, float*, float*, double*, void*) { no_cuda(); }
void lognormal_duration_table(int, int, const float*, float*, void*) { no_cuda(); }
void lognormal_duration_backward(int, int, const float*, float*, float*, void*) { no_cuda(); }
void fold_end_scores(const EndFoldShape&, const int32_t*, const float*, const float*, const float*, float*, float*,
                     void*) {
  no_cuda();
}
void fold_end_scores_backward(const EndFoldShape&, const int32_t*, const float*, const float*, float*, void*) {
  no_cuda();
}
#endif

}  // namespace timitseg::crf::device
