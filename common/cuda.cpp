// common/cuda.h: the CUDA runtime side (TIMITSEG_HAVE_CUDA builds) or the
// no-CUDA answers.
#include "common/cuda.h"
#include "common/cuda_async.h"

#include <sstream>
#include <stdexcept>

#ifdef TIMITSEG_HAVE_CUDA
#include "common/cuda_check.h"
#endif

namespace timitseg::cuda {

#ifdef TIMITSEG_HAVE_CUDA

void fail(cudaError_t err, const char* what, const char* file, int line) {
  (void)cudaGetLastError();  // clear a sticky-free error state where possible
  std::ostringstream os;
  os << "cuda: " << what << " failed: " << cudaGetErrorString(err) << " (" << file << ":" << line << ")";
  throw std::runtime_error(os.str());
}

namespace {
cudaStream_t S(void* s) { return static_cast<cudaStream_t>(s); }
}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

void set_device(int device) { TS_CUDA(cudaSetDevice(device)); }
int current_device() {
  int d = 0;
  TS_CUDA(cudaGetDevice(&d));
  return d;
}

std::string no_device_message() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  (void)cudaGetLastError();
  std::string why;
  if (err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice || (err == cudaSuccess && n == 0))
    why = "no NVIDIA GPU or driver on this machine";
  else
    why = cudaGetErrorString(err);
  return "no CUDA device was found (" + why + ")";
}

void require_device(const std::string& hint) {
  if (device_count() == 0) throw std::runtime_error(no_device_message() + hint);
}

std::string device_name() {
  require_device();
  int dev = 0;
  TS_CUDA(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  TS_CUDA(cudaGetDeviceProperties(&prop, dev));
  return prop.name;
}

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  if (bytes == 0) bytes = 1;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    std::ostringstream os;
    os << "cuda: cudaMalloc of " << bytes << " bytes failed: " << cudaGetErrorString(err);
    throw std::runtime_error(os.str());
  }
  return p;
}

void device_free(void* ptr) noexcept {
  if (ptr) cudaFree(ptr);
}

void* pinned_alloc(size_t bytes) {
  void* p = nullptr;
  if (bytes == 0) bytes = 1;
  const cudaError_t err = cudaMallocHost(&p, bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    std::ostringstream os;
    os << "cuda: cudaMallocHost of " << bytes << " bytes failed: " << cudaGetErrorString(err);
    throw std::runtime_error(os.str());
  }
  return p;
}

void pinned_free(void* ptr) noexcept {
  if (ptr) cudaFreeHost(ptr);
}

void copy_to_device(void* dst, const void* src, size_t bytes, void* stream) {
  if (!bytes) return;
  if (stream)
    TS_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, S(stream)));
  else
    TS_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

void copy_to_host(void* dst, const void* src, size_t bytes, void* stream) {
  if (!bytes) return;
  if (stream)
    TS_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, S(stream)));
  else
    TS_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

void copy_device_to_device(void* dst, const void* src, size_t bytes, void* stream) {
  if (!bytes) return;
  TS_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, S(stream)));
  if (!stream) TS_CUDA(cudaStreamSynchronize(nullptr));
}

void memset_device_async(void* dst, int value, size_t bytes, void* stream) {
  if (bytes) TS_CUDA(cudaMemsetAsync(dst, value, bytes, S(stream)));
}

void memset_device(void* dst, int value, size_t bytes, void* stream) {
  if (!bytes) return;
  TS_CUDA(cudaMemsetAsync(dst, value, bytes, S(stream)));
  if (!stream) TS_CUDA(cudaStreamSynchronize(nullptr));
}

int sm_count() {
  int dev = 0, n = 0;
  TS_CUDA(cudaGetDevice(&dev));
  TS_CUDA(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  return n;
}

void compute_capability(int* major, int* minor) {
  int dev = 0;
  TS_CUDA(cudaGetDevice(&dev));
  TS_CUDA(cudaDeviceGetAttribute(major, cudaDevAttrComputeCapabilityMajor, dev));
  TS_CUDA(cudaDeviceGetAttribute(minor, cudaDevAttrComputeCapabilityMinor, dev));
}

void memory_info(size_t* free_bytes, size_t* total_bytes) { TS_CUDA(cudaMemGetInfo(free_bytes, total_bytes)); }

void synchronize() { TS_CUDA(cudaDeviceSynchronize()); }
void stream_synchronize(void* stream) { TS_CUDA(cudaStreamSynchronize(S(stream))); }

#else  // no CUDA in this build

namespace {
[[noreturn]] void no_cuda() {
  throw std::runtime_error("this build of timitseg has no CUDA support (rebuild with -DTIMITSEG_CUDA=ON)");
}
}  // namespace

int device_count() { return 0; }
void set_device(int) { no_cuda(); }
int current_device() { no_cuda(); }
std::string no_device_message() {
  return "no CUDA device was found (this build of timitseg has no CUDA support; rebuild with -DTIMITSEG_CUDA=ON)";
}
void require_device(const std::string& hint) { throw std::runtime_error(no_device_message() + hint); }
std::string device_name() { no_cuda(); }
void* device_alloc(size_t) { no_cuda(); }
void device_free(void*) noexcept {}
void* pinned_alloc(size_t) { no_cuda(); }
void pinned_free(void*) noexcept {}
void copy_to_device(void*, const void*, size_t, void*) { no_cuda(); }
void copy_to_host(void*, const void*, size_t, void*) { no_cuda(); }
void copy_device_to_device(void*, const void*, size_t, void*) { no_cuda(); }
void memset_device(void*, int, size_t, void*) { no_cuda(); }
void memset_device_async(void*, int, size_t, void*) { no_cuda(); }
int sm_count() { no_cuda(); }
void compute_capability(int*, int*) { no_cuda(); }
void memory_info(size_t*, size_t*) { no_cuda(); }
void synchronize() { no_cuda(); }
void stream_synchronize(void*) { no_cuda(); }

#endif

}  // namespace timitseg::cuda
