// The zero-copy path of the C API's CRF calls (docs/python.md "Zero-copy"):
// contiguous float32 scores [B][T][C] (or cumulative [B][T+1][C]; no onset)
// in the backend's memory space (CUDA
// device memory and the caller's stream for the cuda backend, host memory for
// reference/cpu), int32 lengths (every one >= 1) and labels, outputs float32
// (float64 for the per-utterance values) contiguous in the same space. The
// caller's pointers go straight to the backend: the centered cumsum runs into
// the handle's workspace (on the device for cuda, crf/device_layers.h), the
// gradients are written into the caller's tensors, and the only host
// synchronizations are the backend's own status checks (the lengths are
// checked there, on the device, not read back). Results are bitwise those of
// the general path (crf_batch.h) on the same backend. A call that does not
// qualify (or, cuda, whose inputs the backend's device check rejects: a row
// of length 0, a bad length, label or score) returns false having written no
// output; the general path then runs (and reports any error). fast_nll with
// defer (the cuda backend's nll, capi/crf_deferred.cpp) returns true once the
// call is queued; the device check's rejection is found at its check, which
// then runs the general path (the queued tail may have written the outputs).
#pragma once

#include "capi/crf_batch.h"

namespace timitseg::capi {

// The handle's device copies of its parameters (cuda backend), refreshed from
// its host vectors; a no-op for host backends. Called whenever they change.
void upload_params(timitseg_crf& h);

// The parameters a call reads (transition, duration_bias, start, end): the
// bound tensors (timitseg_crf_bind_params), else the device copies (cuda) or
// the host vectors.
struct ParamPtrs {
  const float* transition;
  const float* duration_bias;
  const float* start;
  const float* end;
};
ParamPtrs param_ptrs(const timitseg_crf& h);
// The bound parameters' values into the host vectors (a copy and a wait on
// `stream`, or, NULL, after settle()); nothing when none are bound. Before
// any use of the parameters on the host; the binding stays.
void refresh_bound(timitseg_crf& h, void* stream);

// Waits for the last zero-copy call's stream when its work may still be
// queued (before the workspaces or the parameters are used another way).
// Resolves a deferred call first (resolve_deferred).
void settle(timitseg_crf& h);

// Deferred NLL calls (capi/crf_deferred.cpp): reads the status word of
// h.deferred (a wait) and keeps its outcome in h.resolved unless it is plain
// success; nothing when no call is deferred.
void resolve_deferred(timitseg_crf& h);
// The C API's nll on the general path (capi/crf_ops.cpp; no zero-copy try).
void nll_general(timitseg_crf* h, const timitseg_crf_batch* in, const timitseg_crf_gold* gold, double scale,
                 timitseg_tensor* out, const timitseg_crf_grads* grads);
// timitseg_crf_nll_deferred's work: returns the call's ticket (cuda zero-copy
// path: queued, h.deferred set; otherwise done, errors thrown here).
uint64_t nll_deferred(timitseg_crf& h, const timitseg_crf_batch& in, const timitseg_crf_gold& gold, double scale,
                      timitseg_tensor& out, const timitseg_crf_grads* grads);
// timitseg_crf_check's work: waits for the call `ticket` and throws its error
// (the message timitseg_crf_nll gives); returns true when the general path
// re-ran it here (the device check rejected the batch, e.g. a row of length 0).
bool check_nll(timitseg_crf& h, uint64_t ticket);
// timitseg_crf_check_again: the last checked deferred call's status word read again (true: re-run on the general path).
bool check_again(timitseg_crf& h);

// timitseg_crf_nll_begin / _end (capi/crf_deferred.cpp): begin keeps the
// inputs in h.begun (queued on the device where the zero-copy path takes
// them and gradients are wanted) and returns the call's ticket; end takes the
// outputs and returns the ticket for check_nll (the whole call run anew when
// the begun work could not serve them). drop_begun finishes a begun call's
// device work without outputs (its status read and dropped); resolve_deferred
// runs it first, so every other call on the handle drops a begun one.
uint64_t nll_begin(timitseg_crf& h, const timitseg_crf_batch& in, const timitseg_crf_gold& gold, double scale,
                   bool with_grads);
uint64_t nll_end(timitseg_crf& h, uint64_t ticket, timitseg_tensor& out, const timitseg_crf_grads* grads);
void drop_begun(timitseg_crf& h);
// The zero-copy halves: fast_nll_begin queues the backend's backward_begin
// (false: this call does not qualify, nothing queued); fast_nll_end its
// backward_finish into the outputs, the cumsum backward where the backend did
// not fuse it, the penalty and the NLL (false: the outputs do not qualify, the
// begun work dropped). defer as in fast_nll.
bool fast_nll_begin(timitseg_crf& h, BegunNll& bn);
// A queued begin's backward_finish without outputs on its stream (status read and ignored).
void finish_dropped(timitseg_crf& h, void* stream);
bool fast_nll_end(timitseg_crf& h, BegunNll& bn, const timitseg_tensor& out, const timitseg_crf_grads* grads,
                  bool defer);

bool fast_log_partition(timitseg_crf& h, const timitseg_crf_batch& in, const timitseg_tensor& log_z);
// defer (cuda): the backend's status word is left unread (crf::Backend::set_defer_status);
// the caller records the call in h.deferred before anything else runs on h.
bool fast_nll(timitseg_crf& h, const timitseg_crf_batch& in, const timitseg_crf_gold& gold, double scale,
              const timitseg_tensor& out, const timitseg_crf_grads* grads, bool defer = false);
// Viterbi on the cuda backend with device outputs (score F32/F64 [B], segments
// I32 [B][T][3], num_segments I32 [B], contiguous): the decode stays on the
// device, on the caller's stream (the general path copies the scores to the
// host, centers them there and copies them back). Host backends: false.
bool fast_viterbi(timitseg_crf& h, const timitseg_crf_batch& in, const timitseg_tensor& score,
                  const timitseg_tensor& segments, const timitseg_tensor& num_segments);

}  // namespace timitseg::capi
