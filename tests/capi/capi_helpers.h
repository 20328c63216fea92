// Helpers of the C API tests: tensors over std::vector and problems.
#pragma once

#include <cstdint>
#include <vector>

#include "timitseg.h"

namespace timitseg::capi::testing {

inline timitseg_tensor tensor(void* data, int dtype, std::vector<int64_t> shape) {
  timitseg_tensor t{};
  t.data = data;
  t.dtype = dtype;
  t.device = TIMITSEG_DEVICE_CPU;
  t.ndim = static_cast<int32_t>(shape.size());
  int64_t stride = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    t.shape[i] = shape[i];
    t.strides[i] = stride;
    stride *= shape[i];
  }
  return t;
}
inline timitseg_tensor f32(std::vector<float>& v, std::vector<int64_t> shape) { return tensor(v.data(), TIMITSEG_F32, shape); }
inline timitseg_tensor f64(std::vector<double>& v, std::vector<int64_t> shape) { return tensor(v.data(), TIMITSEG_F64, shape); }
inline timitseg_tensor i32(std::vector<int32_t>& v, std::vector<int64_t> shape) { return tensor(v.data(), TIMITSEG_I32, shape); }
inline timitseg_tensor i64(std::vector<int64_t>& v, std::vector<int64_t> shape) { return tensor(v.data(), TIMITSEG_I64, shape); }

// A handle with the given backend; parameters set from the vectors (s, e may be empty = zeros).
inline timitseg_crf* make_crf(int backend, int C, int K, std::vector<float> A, std::vector<float> D,
                              std::vector<float> s = {}, std::vector<float> e = {}) {
  timitseg_crf_params p = timitseg_crf_default_params();
  p.num_labels = C;
  p.max_duration = K;
  p.backend = backend;
  p.threads = 1;
  timitseg_crf* h = nullptr;
  if (timitseg_crf_create(&p, &h) != TIMITSEG_OK) return nullptr;
  timitseg_tensor tA = f32(A, {C, C}), tD = f32(D, {K, C});
  timitseg_crf_set_param(h, "transition", &tA);
  timitseg_crf_set_param(h, "duration_bias", &tD);
  if (!s.empty()) {
    timitseg_tensor ts = f32(s, {C});
    timitseg_crf_set_param(h, "start", &ts);
  }
  if (!e.empty()) {
    timitseg_tensor te = f32(e, {C});
    timitseg_crf_set_param(h, "end", &te);
  }
  return h;
}

}  // namespace timitseg::capi::testing
