// The CUDA semi-CRF backend (crf/cuda/semicrf_cuda.cu) and the device-memory
// helpers that the host runner (crf/backends.cpp) and the tests use.
//
// These declarations match the ones crf/semicrf.h carries under
// #ifdef TIMITSEG_HAVE_CUDA; repeating a declaration is harmless, so code may
// include either header. The extra functions at the end (device_synchronize,
// cuda_device_count, cuda_device_name) are used by benchmarks and tests.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "crf/semicrf.h"

namespace timitseg::crf {

// The cuda backend on the current CUDA device. Throws std::runtime_error with
// the one line "no CUDA device was found (...)" when the machine has none.
std::unique_ptr<Backend> make_cuda_backend();

// Device memory (cudaMalloc / cudaFree) and synchronous copies. Every CUDA
// error becomes a std::runtime_error naming the call and the CUDA message.
void* device_alloc(size_t bytes);
void device_free(void* ptr);
void copy_to_device(void* dst_device, const void* src_host, size_t bytes);
void copy_to_host(void* dst_host, const void* src_device, size_t bytes);

// Waits for all queued device work (cudaDeviceSynchronize), checking errors.
void device_synchronize();
// Number of CUDA devices, 0 when there is none or no driver (never throws).
int cuda_device_count();
// Name of the current device ("NVIDIA H100 80GB HBM3"); throws without one.
std::string cuda_device_name();

}  // namespace timitseg::crf
