// The float64 path of the C API's CRF calls (docs/python.md "float64"): F64
// scores on a reference or cpu handle are centered and summed in double
// (Batch::cum64, capi::prepare) and run through the reference backend's
// float64 recurrences (crf/reference/reference.h) with the parameters' double
// values (set_param's F64 values unrounded: timitseg_crf::transition64 ...);
// log Z, NLL, gold score, marginals, the penalty's and every gradient stay in
// double until they are written into the caller's tensors. F32 scores never
// come here (their results are unchanged, bit for bit); a cuda handle refuses
// F64 scores in capi::prepare.
#pragma once

#include <vector>

#include "capi/crf_batch.h"

namespace timitseg::capi {

// Each writes the caller's outputs as the float32 path of the same call does
// (rows of length 0: 0); outputs are checked by the caller (crf_ops.cpp).
void log_partition_f64(const timitseg_crf& h, const Batch& b, const timitseg_tensor& log_z);
// Gold as frame labels of the kept rows ([B'][T], labels != nullptr) or as segments per kept row; neither:
// log Z in `out` and the gradients of scale * sum log Z, without the penalty (timitseg_crf_log_partition_grads).
void nll_f64(const timitseg_crf& h, const Batch& b, const std::vector<int32_t>* labels,
             const std::vector<std::vector<crf::Segment>>* segs, double scale, const timitseg_tensor& out,
             const timitseg_crf_grads* grads);
// timitseg_crf_transcript_nll / _graph_nll in float64 (ref::transcript_backward_f64): phones [B'][N],
// num_phones [B'], optional [B'][N] or empty, links [B'][N] or empty (the phone graph), of the kept rows;
// nll = log Z - log Z_c; the gradients with the penalty.
void transcript_f64(const timitseg_crf& h, const Batch& b, int64_t N, const std::vector<int32_t>& phones,
                    const std::vector<int32_t>& num_phones, const std::vector<int32_t>& optional,
                    const std::vector<int32_t>& links, double scale, const timitseg_tensor& out,
                    const timitseg_crf_grads* grads);
void marginals_f64(const timitseg_crf& h, const Batch& b, const timitseg_tensor* boundaries,
                   const timitseg_tensor* frames);
// timitseg_crf_marginals_backward (docs/crf.md "Gradient of the marginals"): on every handle, on the
// host in float64 (ref::marginals_backward_f64): F64 scores from cum64 and the double parameters, F32
// scores from their float32 values widened (a cuda handle's CUDA tensors through host copies; F64
// scores there are refused by prepare). The upstream gradients may each be NULL or data NULL (zero).
void marginals_backward(timitseg_crf& h, const timitseg_crf_batch& in, const timitseg_tensor* grad_boundaries,
                        const timitseg_tensor* grad_frames, const timitseg_tensor* grad_segments,
                        const timitseg_crf_grads& grads);
// Segment posteriors [B'][T][K][C] of the kept rows: from cum64 and the double parameters for an F64
// batch, else from the float32 cum and parameters (the values this call always computed with).
std::vector<double> segment_posteriors_kept(const timitseg_crf& h, const Batch& b);

}  // namespace timitseg::capi
