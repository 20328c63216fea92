// Test support: a CUDA stream (non-blocking) for a test's lifetime.
#pragma once

#include <cuda_runtime.h>

#include "common/cuda_check.h"

namespace timitseg::testsupport {

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { TS_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(s); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

}  // namespace timitseg::testsupport
