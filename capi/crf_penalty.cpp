// timitseg_crf_penalty_grads: crf.reg's L2 penalty of caller tensors, value
// and gradient, for a binding whose parameters live outside the handle (the
// Python package's SemiCRF.penalty). On a cuda handle with F32 contiguous
// device tensors it is queued on the caller's stream (crf/device_layers.h's
// kernel, no host wait); otherwise on the host (F64 tensors in double).
#include <cmath>
#include <string>
#include <vector>

#include "capi/crf_batch.h"
#include "common/cuda_async.h"
#include "crf/cumsum.h"
#include "crf/device_layers.h"

namespace capi = timitseg::capi;
using capi::ApiError;

namespace {

bool device_f32(const timitseg_crf& h, const timitseg_tensor* t) {
  return t == nullptr || t->data == nullptr ||
         (t->dtype == TIMITSEG_F32 && t->device == TIMITSEG_DEVICE_CUDA && t->device_index == h.cuda_device &&
          capi::is_contiguous(*t));
}

void penalty_grads(const timitseg_crf& h, double reg, const timitseg_tensor* A, const timitseg_tensor* D, timitseg_tensor* value,
                   timitseg_tensor* gA, timitseg_tensor* gD, void* stream) {
  if (A == nullptr || value == nullptr) throw ApiError(TIMITSEG_ERR_ARGUMENT, "transition and value must not be NULL");
  const int64_t C = h.p.num_labels, K = h.p.duration_model == TIMITSEG_DURATION_LOGNORMAL ? 0 : h.p.max_duration;
  if (K > 0 && D == nullptr)
    throw ApiError(TIMITSEG_ERR_ARGUMENT, "duration_bias is NULL: the table model's penalty covers it");
  const int device = h.cuda ? TIMITSEG_DEVICE_CUDA : TIMITSEG_DEVICE_CPU;
  struct Arg {
    const timitseg_tensor* t;
    const char* name;
    std::vector<int64_t> shape;
  };
  std::vector<Arg> args = {{A, "transition", {C, C}}, {value, "value", {1}}};
  if (K > 0) args.push_back({D, "duration_bias", {K, C}});
  if (gA != nullptr && gA->data != nullptr) args.push_back({gA, "grad_transition", {C, C}});
  if (K > 0 && gD != nullptr && gD->data != nullptr) args.push_back({gD, "grad_duration_bias", {K, C}});
  for (const Arg& a : args) {
    capi::check_float(*a.t, a.name);
    capi::check_shape(*a.t, a.name, a.shape);
    capi::check_device(*a.t, a.name, h.cuda ? a.t->device : TIMITSEG_DEVICE_CPU, h.cuda ? h.cuda_device : -1);
  }
  bool on_device = h.cuda;
  for (const Arg& a : args) on_device = on_device && (a.t == value || device_f32(h, a.t));
  on_device = on_device && value->dtype == TIMITSEG_F64 && value->device == device && capi::is_contiguous(*value);
  if (on_device) {  // queued on the caller's stream: the kernel sets the value and ADDS to the gradients
    float* ga = gA && gA->data ? static_cast<float*>(gA->data) : nullptr;
    float* gd = K > 0 && gD && gD->data ? static_cast<float*>(gD->data) : nullptr;
    if (ga) timitseg::cuda::memset_device_async(ga, 0, sizeof(float) * C * C, stream);
    if (gd) timitseg::cuda::memset_device_async(gd, 0, sizeof(float) * K * C, stream);
    timitseg::crf::device::l2_penalty(reg, static_cast<int>(C), static_cast<int>(K),
                                        static_cast<const float*>(A->data),
                                        K > 0 ? static_cast<const float*>(D->data) : nullptr, ga, gd,
                                        static_cast<double*>(value->data), stream);
    return;
  }
  const std::vector<double> a = capi::read_f64(*A, stream), d = K > 0 ? capi::read_f64(*D, stream) : std::vector<double>();
  std::vector<double> ga(a.size(), 0.0), gd(d.size(), 0.0);
  for (size_t i = 0; i < a.size(); ++i)
    if (std::isnan(a[i]) || a[i] == INFINITY)
      throw ApiError(TIMITSEG_ERR_ARGUMENT, "transition[" + std::to_string(i) + "] is NaN or +inf");
  for (size_t i = 0; i < d.size(); ++i)
    if (std::isnan(d[i]) || d[i] == INFINITY)
      throw ApiError(TIMITSEG_ERR_ARGUMENT, "duration_bias[" + std::to_string(i) + "] is NaN or +inf");
  const double v = timitseg::crf::l2_penalty<double>(reg, C, K, a.data(), d.data(), ga.data(), gd.data());
  capi::write_f64(*value, {v}, stream);
  if (gA && gA->data) capi::write_f64(*gA, ga, stream);
  if (K > 0 && gD && gD->data) capi::write_f64(*gD, gd, stream);
}

}  // namespace

extern "C" int timitseg_crf_penalty_grads(const timitseg_crf* crf, double reg, const timitseg_tensor* transition,
                                          const timitseg_tensor* duration_bias, timitseg_tensor* value,
                                          timitseg_tensor* grad_transition, timitseg_tensor* grad_duration_bias,
                                          void* stream) {
  return capi::guard("timitseg_crf_penalty_grads", [&] {
    if (crf == nullptr) throw ApiError(TIMITSEG_ERR_ARGUMENT, "crf is NULL");
    const capi::OnHandleDevice on(crf);
    if (!(reg >= 0.0) || !std::isfinite(reg)) throw ApiError(TIMITSEG_ERR_ARGUMENT, "reg must be finite and >= 0");
    penalty_grads(*crf, reg, transition, duration_bias, value, grad_transition, grad_duration_bias, stream);
  });
}
