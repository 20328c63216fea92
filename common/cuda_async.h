// common/cuda.h's memset without its wait on the default stream: queued on
// `stream` (a cudaStream_t as void*, nullptr = the legacy default stream) and
// never waited for, so that it can be captured in a CUDA graph and a caller
// on torch's default stream does not wait (the C API's
// timitseg_crf_penalty_grads). Throws in a build without CUDA.
#pragma once

#include <cstddef>

namespace timitseg::cuda {

void memset_device_async(void* device_dst, int value, size_t bytes, void* stream);

}  // namespace timitseg::cuda
