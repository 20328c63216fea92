// GPU executor (model/cuda/cuda_executor.h). Per training step the host
// stages the batch in pinned memory and queues on one stream:
//   H2D features [B][T][D], lengths [B], labels [B][T]
//   encoder forward -> cum [B][T+1][C]              (model/cuda/cudnn_encoder)
//   CRF backward -> log Z, gold, d cum, d CRF params (crf cuda backend; or a
//                                                     host backend through copies)
//   L2 penalty, encoder backward -> grad             (model/cuda/ops, encoder)
//   global gradient norm -> read back with log Z, gold, penalty (one sync)
//   [several processes, ExecutorOptions::world: the gradient all-reduce
//    (model/cuda/device_reducer.h) and the norm of the sum queued before the
//    sync, which then covers them; the agreed step status and the loss sums
//    after it: cuda_executor_dist.cpp]
//   clip + AdamW on the device
// Numeric checks (StepOptions::check_numerics, model/numerics.h): the encoder
// and this executor tap every layer into a gpu::DeviceNumerics
// (model/cuda/numerics_taps.h); the slots are read back with the scalars at
// the one sync point above (and, for the `optimizer` taps, once more after
// the update). The first bad slot in tap order throws NumericsError before
// any parameter changes. With check off and no fault planned: no tap work.
//
// Determinism (ExecutorOptions::deterministic, docs/debugging.md): every
// reduction here, in the encoder's own kernels and in the cuda CRF backend
// runs in a fixed order; there are no float atomics (the only atomics are
// integer counts, exact in any order). cuDNN's standard LSTM algorithm
// (CUDNN_RNN_ALGO_STANDARD, FMA math, no TF32) runs a fixed sequence of GEMMs
// and pointwise kernels chosen from the sizes alone; the fused kernel
// (model/cuda/lstm_fused.cu) has no atomics and sums in a fixed order; the
// linear layers and the fused path's weight gradients are cuBLAS GEMMs,
// whose algorithm cannot vary once the handle has a workspace of its own
// (cublasSetWorkspace, set when deterministic). Dropout masks are a hash of
// (seed, step, site, index). Two runs with one seed give bitwise identical
// parameters and moments (tests/cuda/test_cuda_numerics.cpp checks it).
// The persistent cuDNN algorithms are refused under deterministic: their
// determinism has not been established (and cuDNN 9.14 refuses them at our
// sizes anyway).
// Parameters, gradients and the AdamW moments stay on the GPU from
// set_state() to get_state(). Nothing is allocated after the first batch of
// the largest size seen (every buffer is a Buffer grown with reserve()).
#include "model/cuda/cuda_executor_impl.h"

namespace timitseg::model {

std::unique_ptr<Executor> make_cuda_executor(const ModelDims& dims, const ExecutorOptions& options) {
  return std::make_unique<cuda_detail::CudaExecutor>(dims, options);
}

std::unique_ptr<Executor> make_cuda_executor_with_collectives(const ModelDims& dims, const ExecutorOptions& options,
                                                              const std::string& collectives) {
  if (!options.world) throw std::invalid_argument("make_cuda_executor_with_collectives: options.world must be set");
  if (collectives != "nccl" && collectives != "mpi")
    throw std::invalid_argument("make_cuda_executor_with_collectives: collectives must be 'nccl' or 'mpi', got '" +
                                collectives + "'");
  return std::make_unique<cuda_detail::CudaExecutor>(dims, options, collectives);
}

int cuda_numerics_slots(Executor& executor) {
  auto* e = dynamic_cast<cuda_detail::CudaExecutor*>(&executor);
  if (!e) throw std::invalid_argument("cuda_numerics_slots: not a cuda executor");
  return e->numerics_slots();
}

}  // namespace timitseg::model

namespace timitseg::model {
std::vector<NumericsHit> cuda_numerics_report(Executor& executor) {
  auto* e = dynamic_cast<cuda_detail::CudaExecutor*>(&executor);
  if (!e) throw std::invalid_argument("cuda_numerics_report: not a cuda executor");
  return e->numerics_report();
}
}  // namespace timitseg::model
