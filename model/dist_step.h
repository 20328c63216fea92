// One optimizer step over several training processes (docs/multigpu.md "One
// step"): the pieces run_step (model/step.h) adds around the gradient's
// all-reduce, the same on both executors. Each rank computes its share's data
// gradient with the global loss normalization (StepOptions::loss_norm); rank
// 0 alone adds the L2 penalty; every rank joins the gradient's all-reduce
// (one whose share failed too: the sum of a failed step is discarded), then
// the ranks agree on the step's status before any update, and sum the loss
// sums, so every rank applies the same update.
#pragma once

#include <exception>

#include "common/dist.h"
#include "model/executor.h"
#include "model/step_recipe.h"  // step_loss: the recipe of a step

namespace timitseg::model {

// The options of this rank's share: the penalty only on rank 0 (it depends on
// the parameters alone, which every rank holds; summed it must count once).
StepOptions share_options(const StepOptions& o, const dist::Communicator* world);

// Agrees on the outcome of every rank's share (err: this rank's failure, null
// when it succeeded): returns when every share succeeded; otherwise the lowest
// failing rank rethrows err (dist::failure_agreed() is then true) and every
// other rank throws dist::PeerFailure. Nothing is updated on any rank then.
void agree_on_step(dist::Communicator& world, std::exception_ptr err, int64_t step);

// Sums nll_sum, frame_ce_sum and penalty over the ranks and recomputes loss
// from them with the global norm (every rank then reports the same loss).
void reduce_step_scalars(dist::Communicator& world, StepResult& r, const StepOptions& o, double norm);

}  // namespace timitseg::model
