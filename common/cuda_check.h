// Error checking for CUDA code (.cu files and host code that calls the CUDA
// runtime directly): every call through TS_CUDA, every launch followed by
// TS_LAUNCHED. Include only in CUDA builds.
#pragma once

#include <cuda_runtime.h>

namespace timitseg::cuda {
// Throws std::runtime_error("<what> failed: <CUDA message> (file:line)").
[[noreturn]] void fail(cudaError_t err, const char* what, const char* file, int line);
}  // namespace timitseg::cuda

#define TS_CUDA(call)                                                                     \
  do {                                                                                    \
    cudaError_t ts_err_ = (call);                                                         \
    if (ts_err_ != cudaSuccess) ::timitseg::cuda::fail(ts_err_, #call, __FILE__, __LINE__); \
  } while (0)
#define TS_LAUNCHED(name)                                                                               \
  do {                                                                                                  \
    cudaError_t ts_err_ = cudaGetLastError();                                                           \
    if (ts_err_ != cudaSuccess) ::timitseg::cuda::fail(ts_err_, "launch of " name, __FILE__, __LINE__); \
  } while (0)
