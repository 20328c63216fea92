// The CRF half of the C API (include/timitseg.h): handles, parameters and the
// calls, over crf::Session. Every entry point is a guard(): no exception leaves.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "capi/crf_batch.h"
#include "capi/crf_f64.h"
#include "capi/crf_fast.h"
#include "common/cuda.h"
#include "crf/backend_kind.h"
#include "settings/limits.h"
#include "common/version.h"
#include "crf/cumsum.h"
#include "crf/posterior.h"
#include "crf/duration.h"

using timitseg::capi::ApiError;
using timitseg::capi::Batch;
using timitseg::capi::guard;
namespace crf = timitseg::crf;
namespace limits = timitseg::limits;
namespace capi = timitseg::capi;

namespace {

void need(const void* p, const char* what) {
  if (p == nullptr) throw ApiError(TIMITSEG_ERR_ARGUMENT, std::string(what) + " is NULL");
}

bool lognormal(const timitseg_crf& h) { return h.p.duration_model == TIMITSEG_DURATION_LOGNORMAL; }

// The parameter `name` of the handle and its shape.
std::vector<float>& param(timitseg_crf& h, const std::string& name, std::vector<int64_t>& shape) {
  const int64_t C = h.p.num_labels, K = h.p.max_duration;
  if (name == "transition") return shape = {C, C}, h.transition;
  if (name == "duration_bias") return shape = {K, C}, h.duration_bias;
  if (name == "start") return shape = {C}, h.start;
  if (name == "end") return shape = {C}, h.end;
  if (name == "duration_lognormal" && lognormal(h)) return shape = {3, C}, h.duration_lognormal;
  throw ApiError(TIMITSEG_ERR_ARGUMENT, "no parameter '" + name + "' (transition, duration_bias, start, end" +
                                            (lognormal(h) ? ", duration_lognormal)" : ")"));
}

// Its double twin (crf_batch.h: the float64 path's parameters).
std::vector<double>& param64(timitseg_crf& h, const std::string& name) {
  if (name == "transition") return h.transition64;
  if (name == "duration_bias") return h.duration_bias64;
  if (name == "start") return h.start64;
  if (name == "end") return h.end64;
  return h.duration_lognormal64;
}

void derive_durations(timitseg_crf& h) {
  if (!lognormal(h)) return;
  timitseg::crf::lognormal_duration_table(h.p.max_duration, h.p.num_labels, h.duration_lognormal.data(),
                                            h.duration_bias.data());
  timitseg::crf::lognormal_duration_table(h.p.max_duration, h.p.num_labels, h.duration_lognormal64.data(),
                                            h.duration_bias64.data());
}

void create(const timitseg_crf_params& p, timitseg_crf** out) {
  need(out, "out");
  *out = nullptr;
  if (p.num_labels < 1 || p.max_duration < 1)
    throw ApiError(TIMITSEG_ERR_ARGUMENT, "num_labels (" + std::to_string(p.num_labels) + ") and max_duration (" +
                                              std::to_string(p.max_duration) + ") must be >= 1");
  if (p.duration_model != TIMITSEG_DURATION_TABLE && p.duration_model != TIMITSEG_DURATION_LOGNORMAL)
    throw ApiError(TIMITSEG_ERR_ARGUMENT, "duration_model must be TABLE (0) or LOGNORMAL (1), got " +
                                              std::to_string(p.duration_model));
  if (!(p.reg >= 0.0) || !std::isfinite(p.reg) || !limits::kPhoneBonus.contains(p.phone_bonus))
    throw ApiError(TIMITSEG_ERR_ARGUMENT,
                   "reg must be finite and >= 0, phone_bonus in " + limits::to_string(limits::kPhoneBonus));
  if (!limits::kThreads.contains(p.threads))
    throw ApiError(TIMITSEG_ERR_ARGUMENT, "threads must be in " + limits::to_string(limits::kThreads) +
                                              " (0 = all cores), got " + std::to_string(p.threads));
  crf::BackendKind kind{};
  switch (p.backend) {
    case TIMITSEG_BACKEND_AUTO:
      kind = timitseg::cuda::device_count() > 0 ? crf::BackendKind::cuda : crf::BackendKind::cpu;
      break;
    case TIMITSEG_BACKEND_REFERENCE: kind = crf::BackendKind::reference; break;
    case TIMITSEG_BACKEND_CPU: kind = crf::BackendKind::cpu; break;
    case TIMITSEG_BACKEND_CUDA: kind = crf::BackendKind::cuda; break;
    default: throw ApiError(TIMITSEG_ERR_ARGUMENT, "backend must be AUTO, REFERENCE, CPU or CUDA, got " + std::to_string(p.backend));
  }
  auto h = std::make_unique<timitseg_crf>();
  h->p = p;
  crf::BackendOptions backend_opts;
  backend_opts.threads = p.threads;
  try {
    h->backend = crf::make_backend(kind, backend_opts);
  } catch (const std::exception& e) {
    throw ApiError(kind == crf::BackendKind::cuda ? TIMITSEG_ERR_DEVICE : TIMITSEG_ERR_ARGUMENT, e.what());
  }
  h->cuda = h->backend->on_device();
  if (h->cuda) h->cuda_device = timitseg::cuda::current_device();  // where the backend was made
  h->backend_name = h->backend->name();
  h->session = std::make_unique<crf::Session>(*h->backend);
  const size_t C = static_cast<size_t>(p.num_labels), K = static_cast<size_t>(p.max_duration);
  h->transition.assign(C * C, 0.0f);
  h->duration_bias.assign(K * C, 0.0f);
  h->start.assign(C, 0.0f);
  h->end.assign(C, 0.0f);
  if (lognormal(*h)) h->duration_lognormal.assign(3 * C, 0.0f);
  h->transition64.assign(C * C, 0.0);
  h->duration_bias64.assign(K * C, 0.0);
  h->start64.assign(C, 0.0);
  h->end64.assign(C, 0.0);
  if (lognormal(*h)) h->duration_lognormal64.assign(3 * C, 0.0);
  derive_durations(*h);
  capi::upload_params(*h);
  *out = h.release();
}

// Ends a binding (timitseg_crf_bind_params): the bound values become the handle's own.
void unbind(timitseg_crf& h) {
  if (!h.bound) return;
  capi::refresh_bound(h, nullptr);
  h.bound = false;
  capi::upload_params(h);
}

void bind_params(timitseg_crf& h, const timitseg_tensor* t[4]) {
  static const char* const names[4] = {"transition", "duration_bias", "start", "end"};
  const int given = (t[0] != nullptr) + (t[1] != nullptr) + (t[2] != nullptr) + (t[3] != nullptr);
  if (given == 0) {
    capi::drop_begun(h);
    unbind(h);
    return;
  }
  if (given != 4)
    throw ApiError(TIMITSEG_ERR_ARGUMENT, "bind_params takes all four of transition, duration_bias, start, end "
                                          "(or none, to end the binding)");
  if (lognormal(h))
    throw ApiError(TIMITSEG_ERR_ARGUMENT, "bind_params: duration_model LOGNORMAL derives duration_bias from "
                                          "duration_lognormal; set the parameters with set_param");
  const int device = h.cuda ? TIMITSEG_DEVICE_CUDA : TIMITSEG_DEVICE_CPU;
  for (int i = 0; i < 4; ++i) {
    std::vector<int64_t> shape;
    param(h, names[i], shape);
    const std::string what = std::string("parameter ") + names[i];
    if (t[i]->data == nullptr) throw ApiError(TIMITSEG_ERR_ARGUMENT, what + " has no data (NULL)");
    if (t[i]->dtype != TIMITSEG_F32)
      throw ApiError(TIMITSEG_ERR_DTYPE, what + ": bound parameters must be F32 (set_param converts other dtypes)");
    capi::check_shape(*t[i], what.c_str(), shape);
    if (t[i]->device != device)
      throw ApiError(TIMITSEG_ERR_DEVICE, what + " is " + (t[i]->device == TIMITSEG_DEVICE_CUDA ? "CUDA" : "host") +
                                              " memory; the " + h.backend_name + " backend binds " +
                                              (h.cuda ? "CUDA" : "host") + " memory");
    capi::check_device(*t[i], what.c_str(), device, h.cuda_device);  // the handle's CUDA device
    if (!capi::is_contiguous(*t[i]))
      throw ApiError(TIMITSEG_ERR_SHAPE, what + ": bound parameters must be contiguous");
  }
  capi::drop_begun(h);  // a begun nll read the old parameters' addresses
  for (int i = 0; i < 4; ++i) h.bound_params[i] = *t[i];
  h.bound = true;
}

void set_param(timitseg_crf& h, const char* name, const timitseg_tensor* v) {
  need(name, "name");
  need(v, "value");
  std::vector<int64_t> shape;
  std::vector<float>& dst = param(h, name, shape);
  if (lognormal(h) && std::string(name) == "duration_bias")
    throw ApiError(TIMITSEG_ERR_ARGUMENT, "duration_bias is derived from duration_lognormal (duration_model "
                                          "LOGNORMAL); set duration_lognormal");
  const std::string what = std::string("parameter ") + name;
  capi::check_float(*v, what.c_str());
  capi::check_shape(*v, what.c_str(), shape);
  capi::check_device(*v, what.c_str(), h.cuda ? v->device : TIMITSEG_DEVICE_CPU, h.cuda_device);
  const std::vector<double> x = capi::read_f64(*v);
  const bool lognormal_rows = std::string(name) == "duration_lognormal";
  for (size_t i = 0; i < x.size(); ++i)
    if (std::isnan(x[i]) || x[i] == std::numeric_limits<double>::infinity() || (lognormal_rows && !std::isfinite(x[i])))
      throw ApiError(TIMITSEG_ERR_ARGUMENT, what + "[" + std::to_string(i) + "] = " + std::to_string(x[i]) +
                                                (lognormal_rows ? " is not finite" : " is NaN or +inf (entries must be finite, or -inf to forbid)"));
  unbind(h);  // the value is taken: the other bound values become the handle's own (a refused one changes nothing)
  for (size_t i = 0; i < x.size(); ++i) dst[i] = static_cast<float>(x[i]);
  param64(h, name) = x;  // exactly (the float64 path's value; an F32 tensor's values are floats anyway)
  if (lognormal_rows) derive_durations(h);
  capi::upload_params(h);
}

void get_param(const timitseg_crf& h, const char* name, timitseg_tensor* out) {
  need(name, "name");
  need(out, "out");
  capi::refresh_bound(const_cast<timitseg_crf&>(h), nullptr);  // the values change, the handle's state does not
  std::vector<int64_t> shape;
  const std::vector<float>& src = param(const_cast<timitseg_crf&>(h), name, shape);
  const std::string what = std::string("out (parameter ") + name + ")";
  capi::check_float(*out, what.c_str());
  capi::check_shape(*out, what.c_str(), shape);
  capi::check_device(*out, what.c_str(), h.cuda ? out->device : TIMITSEG_DEVICE_CPU, h.cuda_device);
  if (out->dtype == TIMITSEG_F64)  // the values as set (F64: unrounded), those the float64 path computes with
    capi::write_f64(*out, param64(const_cast<timitseg_crf&>(h), name), nullptr);
  else
    capi::write_f64(*out, std::vector<double>(src.begin(), src.end()), nullptr);
}

}  // namespace

namespace timitseg::capi {

OnHandleDevice::OnHandleDevice(const timitseg_crf* h) {
  if (h == nullptr || !h->cuda) return;
  const int now = timitseg::cuda::current_device();
  if (now == h->cuda_device) return;
  timitseg::cuda::set_device(h->cuda_device);
  restore_ = now;
}

OnHandleDevice::~OnHandleDevice() {
  if (restore_ < 0) return;
  try {
    timitseg::cuda::set_device(restore_);
  } catch (...) {  // a destructor does not throw; the call's own status stands
  }
}

}  // namespace timitseg::capi

extern "C" {

int timitseg_api_version(void) { return TIMITSEG_API_VERSION; }
const char* timitseg_version_string(void) {
  static const std::string v = std::string(timitseg::version()) + (timitseg_has_cuda() ? " (cuda)" : " (cpu only)");
  return v.c_str();
}
int timitseg_has_cuda(void) {
  const auto names = crf::backend_names();
  return std::find(names.begin(), names.end(), "cuda") != names.end() ? 1 : 0;
}

const char* timitseg_status_name(int status) {
  static const char* const names[] = {"TIMITSEG_OK", "TIMITSEG_ERR_ARGUMENT", "TIMITSEG_ERR_SHAPE",
                                      "TIMITSEG_ERR_DTYPE", "TIMITSEG_ERR_DEVICE", "TIMITSEG_ERR_LENGTH",
                                      "TIMITSEG_ERR_RUNTIME", "TIMITSEG_ERR_MEMORY"};
  return status >= 0 && status <= 7 ? names[status] : "an unknown status";
}

timitseg_crf_params timitseg_crf_default_params(void) {
  timitseg_crf_params p;
  std::memset(&p, 0, sizeof p);
  p.backend = TIMITSEG_BACKEND_AUTO;
  p.duration_model = TIMITSEG_DURATION_TABLE;
  return p;
}

int timitseg_crf_create(const timitseg_crf_params* params, timitseg_crf** out) {
  return guard("timitseg_crf_create", [&] {
    need(params, "params");
    create(*params, out);
  });
}

void timitseg_crf_free(timitseg_crf* crf) {
  if (crf == nullptr) return;
  try {
    const capi::OnHandleDevice on(crf);
    capi::settle(*crf);  // the last zero-copy call's kernels use the handle's buffers
  } catch (...) {
  }
  delete crf;
}

const char* timitseg_crf_backend_name(const timitseg_crf* crf) {
  return crf == nullptr ? "" : crf->backend_name.c_str();
}

int timitseg_crf_set_param(timitseg_crf* crf, const char* name, const timitseg_tensor* value) {
  return guard("timitseg_crf_set_param", [&] {
    need(crf, "crf");
    const capi::OnHandleDevice on(crf);
    set_param(*crf, name, value);
  });
}

int timitseg_crf_bind_params(timitseg_crf* crf, const timitseg_tensor* transition,
                             const timitseg_tensor* duration_bias, const timitseg_tensor* start,
                             const timitseg_tensor* end) {
  return guard("timitseg_crf_bind_params", [&] {
    need(crf, "crf");
    const capi::OnHandleDevice on(crf);
    const timitseg_tensor* t[4] = {transition, duration_bias, start, end};
    bind_params(*crf, t);
  });
}

int timitseg_crf_get_param(const timitseg_crf* crf, const char* name, timitseg_tensor* out) {
  return guard("timitseg_crf_get_param", [&] {
    need(crf, "crf");
    const capi::OnHandleDevice on(crf);
    get_param(*crf, name, out);
  });
}

int timitseg_crf_penalty(const timitseg_crf* crf, double* out) {
  return guard("timitseg_crf_penalty", [&] {
    need(crf, "crf");
    const capi::OnHandleDevice on(crf);
    need(out, "out");
    capi::refresh_bound(const_cast<timitseg_crf&>(*crf), nullptr);  // as get_param
    const int Kp = lognormal(*crf) ? 0 : crf->p.max_duration;
    // in double from the values as set (F64: unrounded; F32: the same value as from the floats)
    *out = crf::l2_penalty<double>(crf->p.reg, crf->p.num_labels, Kp, crf->transition64.data(),
                                   crf->duration_bias64.data(), nullptr, nullptr);
  });
}

int timitseg_crf_marginals_backward(timitseg_crf* crf, const timitseg_crf_batch* batch,
                                    const timitseg_tensor* grad_boundaries, const timitseg_tensor* grad_frames,
                                    const timitseg_tensor* grad_segments, const timitseg_crf_grads* grads) {
  return guard("timitseg_crf_marginals_backward", [&] {
    const capi::OnHandleDevice on(crf);
    need(crf, "crf");
    need(batch, "batch");
    need(grads, "grads");
    capi::marginals_backward(*crf, *batch, grad_boundaries, grad_frames, grad_segments, *grads);
  });
}

}  // extern "C"
