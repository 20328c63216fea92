// The recipe of one training step, written once. Both executors
// (model/cpu/cpu_executor.cpp, model/cuda/cuda_executor.cpp) and the step on
// several processes (model/dist_step.h) follow these stages in this order;
// the arithmetic they share is the functions below, so there is one copy of it.
//
//   1 forward        encoder: features -> scores [B][T][C] -> cum [B][T+1][C]
//                    (+ onset scores with crf.onset_features), dropout on
//   2 CRF            log Z, gold [B], d cum, d onset and d CRF parameters
//                    scaled by 1 / step_norm (so the gradient is that of the
//                    normalized loss); the frame CE (crf.frame_ce_weight) and
//                    its gradient scaled by w / step_norm
//   3 loss normalization   step_norm: StepOptions::loss_norm (the global
//                    batch's, several processes) or this batch's utterances or
//                    frames (crf.loss_normalization)
//   4 output checks  check_crf_outputs: a non-finite log Z or gold score
//                    throws NonFiniteError naming the row; nll_sum = sum of
//                    log Z - gold (then the CRF gradients and the frame CE sum)
//   5 penalty        crf.reg's L2 penalty on transition and duration_bias
//                    (value, and its gradient added after the encoder
//                    backward); the lognormal duration chain after it
//   6 backward       encoder backward of d cum (+ d frame CE, + d onset)
//   7 clip           global gradient norm, clipped to train.clip_norm
//                    (after the all-reduce with several processes)
//   8 update         AdamW (model/optim.h; crf.lr_scale's two groups), but
//                    for the held parameters (held_parameters: their values
//                    and moments stay as they are), the lognormal duration
//                    table re-derived
//
// The loss of a step is step_loss (nll / norm + penalty + w * CE / norm); a
// non-finite loss or gradient throws NonFiniteError before anything is
// updated (check_gradient_finite names the first entry).
#pragma once

#include <cstddef>
#include <vector>

#include "model/batch.h"
#include "model/executor.h"
#include "model/optim.h"
#include "model/params.h"

namespace timitseg::model {

// Stage 3: the normalization of the loss: StepOptions::loss_norm when set,
// else the batch's own (utterances, or frames with frame_normalization).
double step_norm(const StepOptions& o, const Batch& batch);

// Stage 4: the sum over b < B of log_z[b] - gold[b]; throws NonFiniteError
// ("log_partition" / "gold_score", naming the batch row) at the first
// non-finite entry, in row order.
double check_crf_outputs(const double* log_z, const double* gold, int B);

// The frame CE sum (crf.frame_ce_weight) checked: throws NonFiniteError
// ("frame_ce") when it is not finite; returns it.
double check_frame_ce(double sum);

// The loss of a step from its sums: nll_sum / norm + penalty, + w *
// frame_ce_sum / norm when crf.frame_ce_weight w > 0.
double step_loss(const StepResult& r, const StepOptions& o, double norm);

// Throws NonFiniteError("gradient of NAME") at the first non-finite entry of
// grad (flat layout), in layout order; returns when every entry is finite.
void check_gradient_finite(const ParamLayout& layout, const float* grad);

// Stage 8: the flat range [begin, end) of parameters that a step holds at
// their value: crf.projection.bias while crf.frame_ce_weight is 0. The
// centered cumsum removes any per-class constant of the scores, so without
// the frame CE its gradient is zero in exact arithmetic and its float
// gradient is rounding noise, which AdamW would turn into steps of about lr
// (docs/crf.md "Parameters that are not trained"). Empty (begin == end)
// when nothing is held.
struct HeldRange {
  size_t begin = 0, end = 0;
  bool empty() const { return begin >= end; }
};
HeldRange held_parameters(const ParamLayout& layout, const StepOptions& o);

// Stage 8 on the host: opt.update(params, grad, lr, scaled_begin, lr_scale)
// with the held range's parameters and moments as they were (AdamW's update
// is elementwise, so this is the update of the other entries alone).
void update_holding(AdamW& opt, std::vector<float>& params, const std::vector<float>& grad, double lr,
                    size_t scaled_begin, double lr_scale, HeldRange held);

}  // namespace timitseg::model
