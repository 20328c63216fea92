// One RAII buffer for host or CUDA device memory, with upload/download.
//
// Host buffers are 64-byte aligned heap memory; device buffers come from
// cudaMalloc (common/cuda.h). A buffer only grows: reserve(n) keeps the
// allocation when it is already large enough, so a caller that sizes it for
// the largest batch seen allocates once (crf::Session, the model executors).
// Streams are passed as void* (a cudaStream_t) so that this header needs no
// CUDA include; nullptr is the default stream. Copies with a stream are
// asynchronous only when the host side is pinned memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace timitseg {

enum class Memory { host, device };

class Buffer {
 public:
  Buffer() = default;
  Buffer(Memory where, size_t bytes) : where_(where) { reserve(bytes); }
  ~Buffer() { release(); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept { swap(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      release();
      swap(o);
    }
    return *this;
  }

  Memory memory() const { return where_; }
  // Allocated capacity in bytes (>= what was asked for).
  size_t capacity() const { return capacity_; }
  // Grows to at least `bytes` (contents are not kept on growth); never shrinks.
  // Throws std::runtime_error naming the size when the allocation fails.
  void reserve(size_t bytes);
  // Sets the memory space (frees the allocation when it changes).
  void set_memory(Memory where) {
    if (where != where_) {
      release();
      where_ = where;
    }
  }

  void* data() { return ptr_; }
  const void* data() const { return ptr_; }
  template <class T>
  T* as() {
    return static_cast<T*>(ptr_);
  }
  template <class T>
  const T* as() const {
    return static_cast<const T*>(ptr_);
  }

  // Copies host memory into the buffer (reserving first) / the buffer's first
  // `bytes` into host memory. stream: a cudaStream_t or nullptr.
  void upload(const void* host_src, size_t bytes, void* stream = nullptr);
  void download(void* host_dst, size_t bytes, void* stream = nullptr) const;
  template <class T>
  void upload(const std::vector<T>& v, void* stream = nullptr) {
    upload(v.data(), v.size() * sizeof(T), stream);
  }
  // Sets the first `bytes` to zero (cudaMemsetAsync on the stream for device memory).
  void zero(size_t bytes, void* stream = nullptr);

 private:
  void release() noexcept;
  void swap(Buffer& o) noexcept {
    std::swap(where_, o.where_);
    std::swap(ptr_, o.ptr_);
    std::swap(capacity_, o.capacity_);
  }
  Memory where_ = Memory::host;
  void* ptr_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace timitseg
