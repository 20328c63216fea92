#include "common/buffer.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "common/cuda.h"

namespace timitseg {

void Buffer::reserve(size_t bytes) {
  if (bytes <= capacity_ && ptr_) return;
  release();
  if (bytes == 0) return;
  if (where_ == Memory::device) {
    ptr_ = cuda::device_alloc(bytes);
  } else {
    const size_t rounded = (bytes + 63) / 64 * 64;
    ptr_ = std::aligned_alloc(64, rounded);
    if (!ptr_) throw std::runtime_error("out of host memory allocating " + std::to_string(bytes) + " bytes");
  }
  capacity_ = bytes;
}

void Buffer::release() noexcept {
  if (!ptr_) return;
  if (where_ == Memory::device)
    cuda::device_free(ptr_);
  else
    std::free(ptr_);
  ptr_ = nullptr;
  capacity_ = 0;
}

void Buffer::upload(const void* src, size_t bytes, void* stream) {
  if (bytes == 0) return;
  reserve(bytes);
  if (where_ == Memory::device)
    cuda::copy_to_device(ptr_, src, bytes, stream);
  else
    std::memcpy(ptr_, src, bytes);
}

void Buffer::download(void* dst, size_t bytes, void* stream) const {
  if (bytes == 0) return;
  if (bytes > capacity_)
    throw std::out_of_range("Buffer::download of " + std::to_string(bytes) + " bytes from a buffer of " +
                            std::to_string(capacity_));
  if (where_ == Memory::device)
    cuda::copy_to_host(dst, ptr_, bytes, stream);
  else
    std::memcpy(dst, ptr_, bytes);
}

void Buffer::zero(size_t bytes, void* stream) {
  if (bytes == 0) return;
  reserve(bytes);
  if (where_ == Memory::device)
    cuda::memset_device(ptr_, 0, bytes, stream);
  else
    std::memset(ptr_, 0, bytes);
}

}  // namespace timitseg
