// The error boundary and caller-owned tensors of the C API (api_detail.h).
#include "capi/api_detail.h"

#include <cstring>

#include "common/cuda.h"

namespace timitseg::capi {
namespace {

thread_local std::string t_last_error;

const char* dtype_name(int d) {
  switch (d) {
    case TIMITSEG_F32: return "F32";
    case TIMITSEG_F64: return "F64";
    case TIMITSEG_I32: return "I32";
    case TIMITSEG_I64: return "I64";
    default: return "an unknown dtype";
  }
}

size_t elem_size(int d) { return d == TIMITSEG_F32 || d == TIMITSEG_I32 ? 4 : 8; }

int64_t numel(const timitseg_tensor& t) {
  int64_t n = 1;
  for (int i = 0; i < t.ndim; ++i) n *= t.shape[i];
  return n;
}

bool contiguous(const timitseg_tensor& t) {
  int64_t stride = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    if (t.shape[i] != 1 && t.strides[i] != stride) return false;
    stride *= t.shape[i];
  }
  return true;
}

// Element offsets (in elements) of the row-major index order.
template <class Fn>
void for_each_offset(const timitseg_tensor& t, Fn fn) {
  const int64_t n = numel(t);
  if (n == 0) return;
  if (t.device == TIMITSEG_DEVICE_CUDA || contiguous(t)) {  // the common case: offset = index
    for (int64_t k = 0; k < n; ++k) fn(k, k);
    return;
  }
  int64_t idx[TIMITSEG_MAX_DIMS] = {0, 0, 0, 0};
  for (int64_t k = 0; k < n; ++k) {
    int64_t off = 0;
    for (int i = 0; i < t.ndim; ++i) off += idx[i] * t.strides[i];
    fn(k, off);
    for (int i = t.ndim - 1; i >= 0; --i) {
      if (++idx[i] < t.shape[i]) break;
      idx[i] = 0;
    }
  }
}

// The bytes of t's storage span, copied to the host when t is on CUDA
// (contiguous: check_device), or t's own pointer.
const char* host_bytes(const timitseg_tensor& t, std::vector<char>& copy, void* stream) {
  if (t.device != TIMITSEG_DEVICE_CUDA) return static_cast<const char*>(t.data);
  copy.resize(static_cast<size_t>(numel(t)) * elem_size(t.dtype));
  if (!copy.empty()) {
    cuda::copy_to_host(copy.data(), t.data, copy.size(), stream);
    cuda::stream_synchronize(stream);
  }
  return copy.data();
}

template <class Out>
std::vector<Out> read_as(const timitseg_tensor& t, void* stream) {
  std::vector<char> copy;
  const char* base = host_bytes(t, copy, stream);
  const bool dev = t.device == TIMITSEG_DEVICE_CUDA;
  std::vector<Out> v(static_cast<size_t>(numel(t)));
  for_each_offset(t, [&](int64_t k, int64_t off) {
    const int64_t o = dev ? k : off;
    switch (t.dtype) {
      case TIMITSEG_F32: v[k] = static_cast<Out>(reinterpret_cast<const float*>(base)[o]); break;
      case TIMITSEG_F64: v[k] = static_cast<Out>(reinterpret_cast<const double*>(base)[o]); break;
      case TIMITSEG_I32: v[k] = static_cast<Out>(reinterpret_cast<const int32_t*>(base)[o]); break;
      default: v[k] = static_cast<Out>(reinterpret_cast<const int64_t*>(base)[o]); break;
    }
  });
  return v;
}

template <class In>
void write_from(const timitseg_tensor& t, const std::vector<In>& v, void* stream) {
  const bool dev = t.device == TIMITSEG_DEVICE_CUDA;
  std::vector<char> staging;
  char* base = static_cast<char*>(t.data);
  if (dev) {
    staging.resize(static_cast<size_t>(numel(t)) * elem_size(t.dtype));
    base = staging.data();
  }
  for_each_offset(t, [&](int64_t k, int64_t off) {
    const int64_t o = dev ? k : off;
    switch (t.dtype) {
      case TIMITSEG_F32: reinterpret_cast<float*>(base)[o] = static_cast<float>(v[k]); break;
      case TIMITSEG_F64: reinterpret_cast<double*>(base)[o] = static_cast<double>(v[k]); break;
      case TIMITSEG_I32: reinterpret_cast<int32_t*>(base)[o] = static_cast<int32_t>(v[k]); break;
      default: reinterpret_cast<int64_t*>(base)[o] = static_cast<int64_t>(v[k]); break;
    }
  });
  if (dev && !staging.empty()) {
    cuda::copy_to_device(t.data, staging.data(), staging.size(), stream);
    cuda::stream_synchronize(stream);  // staging is pageable host memory that dies here
  }
}

}  // namespace

int fail(int status, const std::string& message) {
  t_last_error = message;
  return status;
}
void clear_error() { t_last_error.clear(); }
const char* last_error() { return t_last_error.c_str(); }

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + (s[i] < 0 ? std::string("*") : std::to_string(s[i]));
  return out + "]";
}

bool is_contiguous(const timitseg_tensor& t) { return contiguous(t); }

bool present(const timitseg_tensor* t) { return t != nullptr && t->data != nullptr; }

std::vector<int64_t> check_shape(const timitseg_tensor& t, const char* name, const std::vector<int64_t>& shape) {
  if (t.ndim < 0 || t.ndim > TIMITSEG_MAX_DIMS)
    throw ApiError(TIMITSEG_ERR_SHAPE, std::string(name) + " has " + std::to_string(t.ndim) + " dimensions");
  const std::vector<int64_t> got(t.shape, t.shape + t.ndim);
  bool ok = got.size() == shape.size();
  for (size_t i = 0; ok && i < shape.size(); ++i) ok = got[i] >= 0 && (shape[i] < 0 || got[i] == shape[i]);
  if (!ok)
    throw ApiError(TIMITSEG_ERR_SHAPE, std::string(name) + " has shape " + shape_str(got) + ", expected " +
                                           shape_str(shape));
  if (t.data == nullptr && numel(t) > 0) throw ApiError(TIMITSEG_ERR_ARGUMENT, std::string(name) + " has no data");
  return got;
}

void check_float(const timitseg_tensor& t, const char* name) {
  if (t.dtype != TIMITSEG_F32 && t.dtype != TIMITSEG_F64)
    throw ApiError(TIMITSEG_ERR_DTYPE, std::string(name) + " has dtype " + dtype_name(t.dtype) + ", expected F32 or F64");
}

void check_int(const timitseg_tensor& t, const char* name) {
  if (t.dtype != TIMITSEG_I32 && t.dtype != TIMITSEG_I64)
    throw ApiError(TIMITSEG_ERR_DTYPE, std::string(name) + " has dtype " + dtype_name(t.dtype) + ", expected I32 or I64");
}

void check_device(const timitseg_tensor& t, const char* name, int device, int cuda_index) {
  auto dev = [](int d) { return d == TIMITSEG_DEVICE_CPU ? "the CPU" : d == TIMITSEG_DEVICE_CUDA ? "CUDA" : "an unknown device"; };
  if (t.device != TIMITSEG_DEVICE_CPU && t.device != TIMITSEG_DEVICE_CUDA)
    throw ApiError(TIMITSEG_ERR_DEVICE, std::string(name) + " is on an unknown device (" + std::to_string(t.device) + ")");
  if (t.device != device)
    throw ApiError(TIMITSEG_ERR_DEVICE, std::string(name) + " is on " + dev(t.device) + ", the other tensors on " +
                                            dev(device));
  if (t.device == TIMITSEG_DEVICE_CUDA && cuda_index >= 0 && t.device_index != cuda_index)
    throw ApiError(TIMITSEG_ERR_DEVICE, std::string(name) + " is on CUDA device " + std::to_string(t.device_index) +
                                            ", the handle's cuda backend runs on CUDA device " +
                                            std::to_string(cuda_index) + " (the device current when it was created)");
  if (t.device == TIMITSEG_DEVICE_CUDA && !contiguous(t))
    throw ApiError(TIMITSEG_ERR_SHAPE, std::string(name) + " is a strided CUDA tensor; pass a contiguous one");
}

std::vector<double> read_f64(const timitseg_tensor& t, void* stream) { return read_as<double>(t, stream); }
std::vector<int64_t> read_i64(const timitseg_tensor& t, void* stream) { return read_as<int64_t>(t, stream); }
void write_f64(const timitseg_tensor& t, const std::vector<double>& v, void* stream) { write_from(t, v, stream); }
void write_i32(const timitseg_tensor& t, const std::vector<int32_t>& v, void* stream) { write_from(t, v, stream); }

}  // namespace timitseg::capi
