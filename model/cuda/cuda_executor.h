// The GPU executor: the whole training step on one CUDA device (cuDNN BiLSTM
// encoder, cuBLAS input layer and projection, the cuda CRF backend or a host
// backend, L2 penalty, clipping and AdamW kernels). Compiles without CUDA
// headers; defined only in builds with CUDA.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/collectives.h"
#include "model/executor.h"

namespace timitseg::model {

// Throws std::runtime_error("no CUDA device was found (...)") without a device.
// ExecutorOptions::deterministic with rnn_algo persist_static / persist_dynamic
// throws std::invalid_argument (their determinism is not established).
std::unique_ptr<Executor> make_cuda_executor(const ModelDims& dims, const ExecutorOptions& options);

// Tests: a cuda executor that takes the several-process path of a step
// (the share, the agreed status, the gradient all-reduce) through the
// collectives given (model/cuda/device_reducer.h) even when options.world (which
// must be set) has one process; make_cuda_executor chooses by itself, and only
// for a world of several.
std::unique_ptr<Executor> make_cuda_executor_with_collectives(const ModelDims& dims, const ExecutorOptions& options,
                                                              Collectives collectives);

// Tensors the last train_step / gradients() call of a cuda executor reduced
// for its numeric checks (0 with check_numerics off: no tap work). Tests.
int cuda_numerics_slots(Executor& executor);
// Every slot of that step in tap order: layer, pass, tensor and its stats.
std::vector<NumericsHit> cuda_numerics_report(Executor& executor);

}  // namespace timitseg::model
