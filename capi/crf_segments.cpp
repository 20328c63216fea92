// timitseg_crf_segment_posteriors: P(a segment of label c and duration d ends
// at frame t) [B][T][K][C] for every backend, computed on the host in float64
// from the forward (alpha) and backward (beta) tables of the reference
// recurrences (crf/reference/reference.h, the oracle every backend agrees
// with), over the batch the general path prepares (the centered cumsum of the
// scores, the handle's parameters; CUDA tensors read through host copies).
#include <string>
#include <vector>

#include "capi/crf_batch.h"
#include "capi/crf_f64.h"
#include "capi/crf_fast.h"

namespace crf = timitseg::crf;
namespace capi = timitseg::capi;

namespace {

void segment_posteriors(timitseg_crf* h, const timitseg_crf_batch* in, timitseg_tensor* out) {
  if (h == nullptr) throw capi::ApiError(TIMITSEG_ERR_ARGUMENT, "crf is NULL");
  if (in == nullptr) throw capi::ApiError(TIMITSEG_ERR_ARGUMENT, "batch is NULL");
  if (out == nullptr) throw capi::ApiError(TIMITSEG_ERR_ARGUMENT, "segments is NULL");
  capi::settle(*h);                   // the general path shares the session's buffers with the zero-copy path
  capi::refresh_bound(*h, in->stream);  // the parameters are read on the host, as the call's bound arrays hold them
  const capi::Batch b = capi::prepare(*h, *in);
  const int64_t B = b.B, T = b.T, K = b.K, C = b.C;
  // The size check first, in doubles (B, T, K, C are each < 2^31: their product may overflow int64).
  const double entries = static_cast<double>(B) * static_cast<double>(T) * static_cast<double>(K) * static_cast<double>(C);
  if (entries > static_cast<double>(TIMITSEG_SEGMENT_POSTERIORS_MAX_ENTRIES))
    throw capi::ApiError(TIMITSEG_ERR_SHAPE,
                         "segments [B][T][K][C] = [" + std::to_string(B) + "][" + std::to_string(T) + "][" +
                             std::to_string(K) + "][" + std::to_string(C) + "] would hold " +
                             std::to_string(static_cast<long long>(entries)) + " entries, over the limit of " +
                             std::to_string(TIMITSEG_SEGMENT_POSTERIORS_MAX_ENTRIES) +
                             " (2 GiB as float64); pass fewer or shorter utterances");
  capi::check_float(*out, "segments");
  capi::check_shape(*out, "segments", {B, T, K, C});
  capi::check_device(*out, "segments", b.device, b.device_index);
  const int64_t inner = T * K * C;
  const std::vector<double> kept = capi::segment_posteriors_kept(*h, b);  // F64 scores: in double throughout
  capi::write_rows(b, kept, inner, *out, "segments", {B, T, K, C});
}

}  // namespace

extern "C" {

int timitseg_crf_segment_posteriors(timitseg_crf* crf, const timitseg_crf_batch* batch, timitseg_tensor* segments) {
  return capi::guard("timitseg_crf_segment_posteriors", [&] {
    const capi::OnHandleDevice on(crf);
    segment_posteriors(crf, batch, segments);
  });
}

}  // extern "C"
