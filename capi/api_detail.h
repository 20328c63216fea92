// Internals of the C API (include/timitseg.h): the error boundary and the
// caller-owned tensors. C++ only; nothing here is exported.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "timitseg.h"

namespace timitseg::capi {

// An error with the status the C API returns for it.
struct ApiError : std::runtime_error {
  int status;
  ApiError(int s, const std::string& msg) : std::runtime_error(msg), status(s) {}
};

// Records the message of this thread's failed call; returns status.
int fail(int status, const std::string& message);
void clear_error();

// Runs f (returning void) and turns every exception into a status and the
// thread's message: ApiError keeps its status, std::invalid_argument is
// TIMITSEG_ERR_ARGUMENT, std::bad_alloc TIMITSEG_ERR_MEMORY, anything else
// TIMITSEG_ERR_RUNTIME. `where` prefixes the message ("timitseg_crf_nll: ...").
template <class F>
int guard(const char* where, F&& f) noexcept {
  try {
    clear_error();
    f();
    return TIMITSEG_OK;
  } catch (const ApiError& e) {
    return fail(e.status, std::string(where) + ": " + e.what());
  } catch (const std::invalid_argument& e) {
    return fail(TIMITSEG_ERR_ARGUMENT, std::string(where) + ": " + e.what());
  } catch (const std::bad_alloc&) {
    return fail(TIMITSEG_ERR_MEMORY, std::string(where) + ": out of memory");
  } catch (const std::exception& e) {
    return fail(TIMITSEG_ERR_RUNTIME, std::string(where) + ": " + e.what());
  } catch (...) {
    return fail(TIMITSEG_ERR_RUNTIME, std::string(where) + ": unknown error");
  }
}

// A tensor argument checked against what a call expects. `name` is the
// argument's name in messages ("scores", "grads.transition").
struct TensorSpec {
  const char* name;
  std::vector<int64_t> shape;  // -1 = any size (read back with dim())
};

// Throws ApiError (TIMITSEG_ERR_SHAPE) unless t has the rank and the fixed sizes
// of `shape`; returns t's shape.
std::vector<int64_t> check_shape(const timitseg_tensor& t, const char* name, const std::vector<int64_t>& shape);
// Throws TIMITSEG_ERR_DTYPE unless t's dtype is one of the floats (F32/F64) / ints (I32/I64).
void check_float(const timitseg_tensor& t, const char* name);
void check_int(const timitseg_tensor& t, const char* name);
// Throws TIMITSEG_ERR_DEVICE when t is on a device other than `device` (CPU or
// CUDA), or, with cuda_index >= 0, a CUDA tensor on another CUDA device than
// cuda_index, naming both; CUDA tensors must be contiguous (TIMITSEG_ERR_SHAPE).
void check_device(const timitseg_tensor& t, const char* name, int device, int cuda_index = -1);
bool present(const timitseg_tensor* t);
// Row-major contiguous (sizes-1 dimensions may have any stride).
bool is_contiguous(const timitseg_tensor& t);
std::string shape_str(const std::vector<int64_t>& s);

// Contiguous host copies of a tensor's values (any dtype of its kind, any
// strides, CPU or CUDA; a CUDA tensor is copied on `stream`, a cudaStream_t).
std::vector<double> read_f64(const timitseg_tensor& t, void* stream = nullptr);
std::vector<int64_t> read_i64(const timitseg_tensor& t, void* stream = nullptr);
// Writes contiguous host values into the tensor (converted to its dtype, its
// strides; copied to the device for CUDA). Sizes must match (checked by the caller).
void write_f64(const timitseg_tensor& t, const std::vector<double>& v, void* stream);
void write_i32(const timitseg_tensor& t, const std::vector<int32_t>& v, void* stream);

}  // namespace timitseg::capi
