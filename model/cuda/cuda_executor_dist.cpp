// The GPU executor's step over several training processes (docs/multigpu.md
// "One step"; the CPU executor's share_loss_and_grad computes the same sums):
//
//   this rank's share   queue_forward_backward with share_options (the L2
//                       penalty on rank 0 only) and StepOptions::loss_norm, the
//                       global batch's normalization, up to its read-back: no
//                       synchronization yet. An empty share (a last batch with
//                       fewer utterances than ranks) is a zero gradient.
//   all-reduce          grad_sum_ <- the sum over the ranks of grad_
//                       (gpu::DeviceReducer: NCCL, or host-staged through MPI),
//                       queued right behind the backward, then the norm of the
//                       sum; the step's one synchronization waits for both.
//                       Every rank joins the all-reduce, one whose share threw
//                       too, so no peer waits for it; the sum of a failed step
//                       is never used.
//   agree_on_step       the share's own checks (taps, non-finite log Z, gold,
//                       loss, the norm of its own gradient, still in grad_) on
//                       every rank, then agreed: a failed share stops every
//                       rank at this step, before anything is updated (the
//                       failing rank rethrows its error, the others
//                       dist::PeerFailure); then the loss sums (reduce_step_scalars).
//   update              train_step clips grad_sum_ by the reduced norm and
//                       applies AdamW as in one process, so every rank updates alike.
//
// One synchronization and two small MPI reductions a step; measured against
// the former order (sync, agree, all-reduce, sync) in docs/multigpu.md. The
// lognormal duration chain runs per rank inside the share: it is linear in
// the gradient, so the sum of the ranks' chains is the chain of the sum (up to
// rounding). One process (no reducer_) never comes here.
#include "model/cuda/cuda_executor_impl.h"

#include <algorithm>
#include <cmath>

#include "common/cuda.h"
#include "common/cuda_check.h"
#include "crf/posterior.h"
#include "model/cuda/ops.h"
#include "model/dist_step.h"

#include <exception>

namespace timitseg::model::cuda_detail {

StepResult CudaExecutor::share_forward_backward(const Batch& batch, const StepOptions& o) {
  const size_t n = layout_.total();
  const double norm = step_norm(o, batch);
  const StepOptions so = share_options(o, world_);
  StepResult res;
  QueuedStep q;
  bool queued = false;
  std::exception_ptr err;
  try {
    if (batch.input.B > 0) {
      q = queue_forward_backward(batch, so);
      queued = true;
    } else {
      numerics_->begin_step(o.check_numerics, o.fault, o.step, stream_);  // this step's (empty) taps
      TS_CUDA(cudaMemsetAsync(grad_.data(), 0, n * sizeof(float), stream_));
    }
  } catch (const std::exception&) {
    err = std::current_exception();
  }
  const auto t0 = Clock::now();
  StepScalars* dsc = scalars_.as<StepScalars>();
  reducer_->enqueue_sum(grad_.as<float>(), grad_sum_.as<float>(), n, stream_);
  gpu::global_norm(grad_sum_.as<float>(), n, &dsc->reduced_norm, norm_scratch_.data(), stream_);
  scalars_.download(host_scalars_.reserve(sizeof(StepScalars)), sizeof(StepScalars), stream_);
  reducer_->wait(stream_);
  if (!err && queued) {
    try {
      res = finish_forward_backward(q, so);
    } catch (const std::exception&) {
      err = std::current_exception();
    }
  }
  agree_on_step(*world_, err, o.step);
  reduce_step_scalars(*world_, res, o, norm);
  res.grad_norm = host_scalars_.as<StepScalars>()->reduced_norm;
  res.times.optimizer += since(t0);  // the reduction, counted with the update (as the CPU executor)
  if (!std::isfinite(res.loss)) throw NonFiniteError("loss", "non-finite loss (summed over the ranks)");
  if (!std::isfinite(res.grad_norm)) throw_first_nonfinite_gradient(grad_sum_);
  return res;
}

}  // namespace timitseg::model::cuda_detail
