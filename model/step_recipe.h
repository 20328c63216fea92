// The arithmetic of a training step's recipe, written once. The recipe itself,
// its stages in order, is one function: run_step (model/step.h) over the
// StepDevice that each executor implements (model/cpu/cpu_executor.cpp,
// model/cuda/cuda_executor_step.cpp); with several processes the same
// function adds the all-reduce stage (model/dist_step.h). The stages:
//
//   0 begin          the batch staged, the step's numeric taps begun,
//                    StepOptions::poison planted
//   1 forward        encoder: features -> scores [B][T][C] -> cum [B][T+1][C]
//                    (+ onset scores with crf.onset_features), dropout on
//   2 CRF            log Z, gold [B], d cum, d onset and d CRF parameters
//                    scaled by 1 / step_norm (so the gradient is that of the
//                    normalized loss); the frame CE (crf.frame_ce_weight) and
//                    its gradient scaled by w / step_norm
//   3 loss normalization   step_norm: StepOptions::loss_norm (the global
//                    batch's, several processes) or this batch's utterances or
//                    frames (loss_normalization, crf.loss_normalization)
//   4 backward       encoder backward of d cum (+ d frame CE, + d onset)
//   5 penalty        crf.reg's L2 penalty on transition and duration_bias
//                    (its value tapped in the forward order, its gradient
//                    added after the encoder backward); the lognormal
//                    duration chain after it
//   6 norm           the global gradient norm [several processes: the
//                    all-reduce of the gradient, the norm of the sum]
//      checks        after the step's one read-back, before anything is
//                    updated, in this order: a tap's first hit,
//                    check_crf_outputs (a non-finite log Z or gold score
//                    throws NonFiniteError naming the row; nll_sum = sum of
//                    log Z - gold), the CRF gradients, check_frame_ce, the
//                    loss (step_loss: a non-finite one throws), the gradient
//                    (a non-finite norm: check_gradient_finite names the
//                    first entry) [several processes: then agreed, the loss
//                    sums reduced, the loss and the norm of the sum checked]
//   7 clip           to train.clip_norm by the norm of stage 6
//   8 update         AdamW over step_update_ranges (model/optim.h
//                    update_ranges: crf.lr_scale's two groups, without the
//                    held parameters of held_parameters: their values and
//                    moments stay as they are), the lognormal duration table
//                    re-derived, the optimizer taps
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/batch.h"
#include "model/executor.h"
#include "model/optim.h"
#include "model/params.h"

namespace timitseg::model {

// The normalization of a loss over `utterances` utterances of `frames`
// frames: frames with frame_normalization (crf.loss_normalization = frame),
// else utterances. The step's (step_norm), the global batch's of several
// processes (StepOptions::loss_norm) and the dev loss's (train/train.cpp).
double loss_normalization(bool frame_normalization, int64_t utterances, int64_t frames);

// Stage 3: the normalization of the loss: StepOptions::loss_norm when set,
// else the batch's own (loss_normalization of its utterances and frames).
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
// their value: the Gaussian head (crf.gaussian_projection.*, set by its
// re-estimation only: model/gaussian_head.h), and crf.projection.bias, just
// before it in the layout, while crf.frame_ce_weight is 0. The
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

// Stage 8: the ranges AdamW moves in this step (update_ranges of model/optim.h
// with crf.lr_scale's groups and held_parameters left out), computed once on
// the host for both executors.
std::vector<UpdateRange> step_update_ranges(const ParamLayout& layout, const StepOptions& o);

}  // namespace timitseg::model
