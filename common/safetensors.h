// Safetensors read/write (https://huggingface.co/docs/safetensors format):
//   8 bytes little-endian u64 N | N bytes JSON header | raw data
// Header: {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//          "__metadata__": {"key": "string value"}}
// Offsets are relative to the start of the data section. Writes are atomic
// (temporary file in the same folder + rename). Every error names the file.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace timitseg::st {

enum class DType { F32, F64, I32, I64, U8 };

const char* dtype_name(DType d);
size_t dtype_size(DType d);

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::F32; }
template <> constexpr DType dtype_of<double>() { return DType::F64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::I32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::I64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::U8; }

struct Tensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // little-endian, row-major

  int64_t numel() const;
  std::string shape_str() const;  // "[2, 3]"

  template <class T>
  static Tensor from(const std::vector<int64_t>& shape, const T* data) {
    Tensor t;
    t.dtype = dtype_of<T>();
    t.shape = shape;
    t.bytes.resize(static_cast<size_t>(t.numel()) * sizeof(T));
    if (!t.bytes.empty()) std::memcpy(t.bytes.data(), data, t.bytes.size());
    return t;
  }
  template <class T>
  static Tensor from(const std::vector<int64_t>& shape, const std::vector<T>& data) {
    Tensor t = from<T>(shape, data.data());
    if (static_cast<size_t>(t.numel()) != data.size())
      throw std::invalid_argument("safetensors: tensor data size does not match shape " + t.shape_str());
    return t;
  }
  // Copy out as T; the dtype must be exactly T.
  template <class T>
  std::vector<T> to() const {
    if (dtype != dtype_of<T>())
      throw std::runtime_error(std::string("tensor has dtype ") + dtype_name(dtype) + ", expected " +
                               dtype_name(dtype_of<T>()));
    std::vector<T> out(static_cast<size_t>(numel()));
    if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
  }
  // Integer tensors (I32 or I64) as int64.
  std::vector<int64_t> to_int64() const;
  // Float tensors (F32 or F64) as double.
  std::vector<double> to_double() const;
};

struct File {
  std::map<std::string, std::string> metadata;
  std::map<std::string, Tensor> tensors;

  bool has(const std::string& name) const { return tensors.count(name) != 0; }
  // Throws std::runtime_error "FILE: no tensor 'name'" (path as loaded).
  const Tensor& get(const std::string& name) const;
  // get() plus dtype and shape checks; an entry of -1 in shape matches any size.
  const Tensor& get(const std::string& name, DType dtype, const std::vector<int64_t>& shape) const;
  std::string path;  // set by load(), used in error messages
};

// Throws std::runtime_error("PATH: <problem>") for a missing, truncated or
// corrupt file (header length past the end, bad JSON, unknown dtype, offsets
// outside the data or overlapping, size != shape * dtype, duplicate names).
File load(const std::string& path);
// Atomic: writes PATH.tmp.<pid> then renames; on failure nothing is left.
void save(const std::string& path, const File& file);

}  // namespace timitseg::st
