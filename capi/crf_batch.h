// The CRF handle of the C API and one prepared batch (host arrays in the
// layout of crf/backend.h, utterances of length 0 left out).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "capi/api_detail.h"
#include "common/buffer.h"
#include "crf/backend.h"
#include "crf/session.h"

namespace timitseg::capi {
// A deferred NLL call (timitseg_crf_nll_deferred, capi/crf_deferred.cpp): its
// arguments (the caller's descriptors, by value), kept so that its check can
// re-run it on the general path when the device check rejected the batch.
struct DeferredNll {
  uint64_t ticket = 0;
  timitseg_crf_batch batch{};
  timitseg_crf_gold gold{};
  double scale = 1.0;
  timitseg_tensor out{};
  timitseg_crf_grads grads{};
  bool has_grads = false;
  // Once resolved (its status word read) by a later call, before its check:
  bool rejected = false;     // the device check rejected an input: the check re-runs the general path
  int status = TIMITSEG_OK;  // else its error: status and message (without the call's prefix)
  std::string message;
};
// A begun nll (timitseg_crf_nll_begin): its inputs (the caller's descriptors,
// by value) and, when `queued`, the zero-copy work queued so far (the
// backend's backward_begin ran; dims and the cum path's choice kept for the end).
struct BegunNll {
  uint64_t ticket = 0;
  timitseg_crf_batch batch{};
  timitseg_crf_gold gold{};
  double scale = 1.0;
  bool with_grads = false;
  bool queued = false;
  bool frames = false;  // the backend writes the frame scores' gradient itself (Backend::fuses_frame_grads)
  crf::Dims dims;
};
}  // namespace timitseg::capi

struct timitseg_crf {
  timitseg_crf_params p{};
  std::unique_ptr<timitseg::crf::Backend> backend;
  std::unique_ptr<timitseg::crf::Session> session;
  std::vector<float> transition, duration_bias, start, end, duration_lognormal;
  // The same parameters in double for the float64 path (capi/crf_f64.cpp): the values set_param took,
  // exactly (an F64 tensor's are not rounded here), bound values as they are; kept beside the floats by
  // every writer (create, set_param, refresh_bound).
  std::vector<double> transition64, duration_bias64, start64, end64, duration_lognormal64;
  // The device of the tensors this handle takes: CUDA tensors only with the cuda backend, on
  // cuda_device (the device current when the handle was created: its buffers and streams are there).
  bool cuda = false;
  int cuda_device = -1;
  std::string backend_name;  // timitseg_crf_backend_name
  // The zero-copy path (capi/crf_fast.h): the parameters' device copies
  // (cuda: transition, duration_bias, start, end back to back) and the
  // workspaces it keeps across calls (the backend's memory space).
  timitseg::Buffer dev_params;
  timitseg::Buffer dev_bonus;  // cuda: transition + phone_bonus off the diagonal (viterbi's), when the bonus is not 0
  timitseg::Buffer fast_cum, fast_gcum, fast_scratch, fast_lz, fast_gold, fast_penalty;
  std::vector<int32_t> fast_lengths;  // the lengths' host copy
  uint64_t fast_calls = 0;            // calls the zero-copy path served (tests read it)
  // The stream of the last zero-copy call while its last kernels may still
  // run (they use the workspaces and dev_params): settle() waits for it.
  void* fast_stream = nullptr;
  bool fast_pending = false;
  // Deferred NLL calls: the one whose status word the backend has not read
  // yet, and those a later call resolved whose check has not run and whose
  // outcome is not plain success (a check of any other issued ticket: OK).
  std::optional<timitseg::capi::DeferredNll> deferred;
  std::map<uint64_t, timitseg::capi::DeferredNll> resolved;
  // The last deferred call whose status word was read (timitseg_crf_check_again reads it again).
  std::optional<timitseg::capi::DeferredNll> last_checked;
  uint64_t last_ticket = 0;  // tickets are 1, 2, ... per handle
  // The nll begun and not ended (timitseg_crf_nll_begin); any other call drops it (capi::drop_begun).
  std::optional<timitseg::capi::BegunNll> begun;
  // Parameters bound to the caller's memory (timitseg_crf_bind_params): transition, duration_bias,
  // start, end (float32, contiguous, in the handle's space), read in place by every call; the host
  // vectors above and dev_params are then stale until capi::refresh_bound copies the bound values.
  bool bound = false;
  timitseg_tensor bound_params[4]{};
};

namespace timitseg::capi {

// For one C call on a cuda handle: the thread's current CUDA device set to the
// handle's (its buffers are allocated and its kernels launched there) and the
// caller's restored after the call. Nothing for host handles or NULL.
class OnHandleDevice {
 public:
  explicit OnHandleDevice(const timitseg_crf* h);
  ~OnHandleDevice();
  OnHandleDevice(const OnHandleDevice&) = delete;
  OnHandleDevice& operator=(const OnHandleDevice&) = delete;

 private:
  int restore_ = -1;
};

struct Batch {
  int64_t B = 0, T = 0, C = 0, K = 0;  // the caller's batch (B rows, padded T)
  int device = TIMITSEG_DEVICE_CPU;
  int device_index = -1;  // the CUDA device every CUDA tensor of the call must be on (-1: host handle)
  void* stream = nullptr;
  bool cumulative = false;
  bool f64 = false;                   // scores are F64 (the centering runs in double)
  std::vector<double> cum64;          // f64: [B'][T+1][C] in double (the float64 path, capi/crf_f64.cpp)
  std::vector<double> onset64;        // f64 with onset: [B'][T][C]
  std::vector<int32_t> lengths;       // [B]
  std::vector<int64_t> rows;          // the caller's row of each kept utterance (length >= 1)
  crf::Dims dims;                     // the kept utterances: B' rows, same T, K, C
  std::vector<float> cum;             // [B'][T+1][C]
  std::vector<float> onset;           // [B'][T][C] or empty
  std::vector<int32_t> len;           // [B']
  crf::Params params(const timitseg_crf& h, const float* transition = nullptr) const;
  // Kept rows of an int tensor [B][...] of `inner` values per row, as int32.
  std::vector<int32_t> gather_rows(const std::vector<int64_t>& all, int64_t inner) const;
};

// Runs f (a backend call on the kept utterances); when utterances of length 0
// were left out, a backend's message, which counts kept utterances only, gets
// the map to the caller's rows.
template <class F>
auto on_kept(const Batch& b, F f) -> decltype(f()) {
  if (static_cast<int64_t>(b.rows.size()) == b.B) return f();
  std::string map;
  for (size_t k = 0; k < b.rows.size() && k < 16; ++k) map += (k ? ", " : "") + std::to_string(b.rows[k]);
  const std::string note = " (the batch without its utterances of length 0: utterance k there is the caller's row [" +
                           map + (b.rows.size() > 16 ? ", ...]" : "]") + "[k])";
  try {
    return f();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(e.what() + note);
  } catch (const ApiError&) {
    throw;
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(e.what() + note);
  }
}

// Checks and converts a batch (shapes, dtypes, device, lengths, finite scores). A cuda handle
// refuses F64 scores (TIMITSEG_ERR_DTYPE: the float64 path runs on the host backends only).
Batch prepare(const timitseg_crf& h, const timitseg_crf_batch& in);

// d loss / d cum [B'][T+1][C] -> the caller's grads.scores (through the
// centering unless cumulative), rows of length 0 written 0.
void write_score_grad(const Batch& b, const std::vector<float>& grad_cum, const timitseg_tensor& out);
// Values per kept row [B'][inner] -> the caller's [B][inner] tensor (0 for rows of length 0).
void write_rows(const Batch& b, const std::vector<double>& kept, int64_t inner, const timitseg_tensor& out,
                const char* name, const std::vector<int64_t>& shape);

}  // namespace timitseg::capi
