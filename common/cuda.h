// CUDA runtime helpers, declared once for the whole project: device queries,
// device memory, copies, pinned host memory. Every CUDA error becomes a
// std::runtime_error naming the call and CUDA's message.
//
// The declarations compile everywhere; the definitions exist only in builds
// with CUDA (TIMITSEG_HAVE_CUDA). In a build without CUDA, device_count()
// returns 0 and the others throw "this build of timitseg has no CUDA support",
// so host code needs no #ifdef to ask whether a GPU is there.
// Code that launches kernels includes common/cuda_check.h for TS_CUDA /
// TS_LAUNCHED.
#pragma once

#include <cstddef>
#include <string>

namespace timitseg::cuda {

// Number of CUDA devices; 0 when there is none, no driver, or no CUDA in this
// build. Never throws.
int device_count();
// cudaSetDevice for this host thread and the threads it starts afterwards (a rank's GPU, train/distributed.h).
void set_device(int device);
// cudaGetDevice: the device this host thread's CUDA calls go to.
int current_device();
// The one-line error every GPU path gives without a device:
// "no CUDA device was found (<why>)".
std::string no_device_message();
// Throws std::runtime_error(no_device_message() + hint) unless a device exists.
void require_device(const std::string& hint = "");
// Name of the current device ("NVIDIA H100 80GB HBM3").
std::string device_name();

void* device_alloc(size_t bytes);  // cudaMalloc; bytes == 0 allocates 1 byte
void device_free(void* ptr) noexcept;
void* pinned_alloc(size_t bytes);  // cudaMallocHost
void pinned_free(void* ptr) noexcept;

// Copies; stream is a cudaStream_t (nullptr: the default stream). Without a
// stream the copy is synchronous.
void copy_to_device(void* device_dst, const void* host_src, size_t bytes, void* stream = nullptr);
void copy_to_host(void* host_dst, const void* device_src, size_t bytes, void* stream = nullptr);
void copy_device_to_device(void* dst, const void* src, size_t bytes, void* stream = nullptr);
void memset_device(void* device_dst, int value, size_t bytes, void* stream = nullptr);

// Streaming multiprocessors of the current device (cudaDevAttrMultiProcessorCount).
int sm_count();
// Compute capability of the current device (9.0 for an H100: major 9, minor 0).
void compute_capability(int* major, int* minor);
// Free and total memory of the current device in bytes (cudaMemGetInfo).
void memory_info(size_t* free_bytes, size_t* total_bytes);

void synchronize();                    // cudaDeviceSynchronize
void stream_synchronize(void* stream);  // cudaStreamSynchronize

}  // namespace timitseg::cuda
