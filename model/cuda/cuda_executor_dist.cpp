// The GPU executor's step over several training processes (docs/multigpu.md
// "One step"; the CPU executor's share_loss_and_grad is the same sequence):
//
//   this rank's share   forward_backward with share_options (the L2 penalty on
//                       rank 0 only) and StepOptions::loss_norm, the global
//                       batch's normalization; its own gradient norm is
//                       checked there, so a non-finite gradient is named on the
//                       rank that made it. An empty share (a last batch with
//                       fewer utterances than ranks) is a zero gradient.
//   agree_on_step       every rank, once, before anything is reduced: a failed
//                       share stops every rank at this step (the failing rank
//                       rethrows its error, the others dist::PeerFailure).
//   all-reduce          grad_ <- sum over ranks (gpu::DeviceReducer: NCCL, or
//                       host-staged through MPI), then the loss sums
//                       (reduce_step_scalars).
//   global norm         of the reduced gradient, into the device scalars that
//                       train_step's gpu::clip_by_norm reads; then clip and
//                       AdamW as in one process, so every rank updates alike.
//
// The lognormal duration chain runs per rank inside forward_backward: it is
// linear in the gradient, so the sum of the ranks' chains is the chain of the
// sum (up to rounding). One process (no reducer_) never comes here.
#include "model/cuda/cuda_executor_impl.h"

#include <exception>

namespace timitseg::model::cuda_detail {

StepResult CudaExecutor::share_forward_backward(const Batch& batch, const StepOptions& o) {
  const size_t n = layout_.total();
  const double norm = step_norm(o, batch);
  StepResult res;
  std::exception_ptr err;
  try {
    if (batch.input.B > 0) {
      res = forward_backward(batch, share_options(o, world_));
    } else {
      numerics_->begin_step(o.check_numerics, o.fault, o.step, stream_);  // this step's (empty) taps
      TS_CUDA(cudaMemsetAsync(grad_.data(), 0, n * sizeof(float), stream_));
    }
  } catch (const std::exception&) {
    err = std::current_exception();
  }
  agree_on_step(*world_, err, o.step);
  const auto t0 = Clock::now();
  reducer_->allreduce_sum(grad_.as<float>(), n, stream_);
  reduce_step_scalars(*world_, res, o, norm);
  StepScalars* dsc = scalars_.as<StepScalars>();
  gpu::global_norm(grad_.as<float>(), n, &dsc->norm, norm_scratch_.data(), stream_);
  scalars_.download(host_scalars_.reserve(sizeof(StepScalars)), sizeof(StepScalars), stream_);
  TS_CUDA(cudaStreamSynchronize(stream_));
  res.grad_norm = host_scalars_.as<StepScalars>()->norm;
  res.times.optimizer += since(t0);  // the reduction, counted with the update (as the CPU executor)
  if (!std::isfinite(res.loss)) throw NonFiniteError("loss", "non-finite loss (summed over the ranks)");
  if (!std::isfinite(res.grad_norm)) throw_first_nonfinite_gradient();
  return res;
}

}  // namespace timitseg::model::cuda_detail
