// The GPU executor: the whole training step on one CUDA device (cuDNN BiLSTM
// encoder, cuBLAS input layer and projection, the cuda CRF backend or a host
// backend, L2 penalty, clipping and AdamW kernels). Compiles without CUDA
// headers; defined only in builds with CUDA.
#pragma once

#include <memory>
#include <vector>

#include "model/executor.h"

namespace timitseg::model {

// Throws std::runtime_error("no CUDA device was found (...)") without a device.
// ExecutorOptions::deterministic with rnn_algo persist_static / persist_dynamic
// throws std::invalid_argument (their determinism is not established).
std::unique_ptr<Executor> make_cuda_executor(const ModelDims& dims, const ExecutorOptions& options);

// Tensors the last train_step / gradients() call of a cuda executor reduced
// for its numeric checks (0 with check_numerics off: no tap work). Tests.
int cuda_numerics_slots(Executor& executor);
// Every slot of that step in tap order: layer, pass, tensor and its stats.
std::vector<NumericsHit> cuda_numerics_report(Executor& executor);

}  // namespace timitseg::model
