// The encoder on a CUDA device (cuDNN BiLSTM, cuBLAS linear layers, own
// kernels for bias, dropout, padding and the zero-centered cumsum). Implements
// model::Encoder (model/encoder.h) with every pointer in device memory except
// EncoderBatch::lengths (host). Compiles without CUDA headers.
//
//   features [B][T][D] -> Linear(D, W) -> dropout -> L x (one cuDNN BiLSTM layer,
//   H = W/2 per direction; dropout between layers) -> Linear(2H, C) -> rows
//   t >= lengths[b] zeroed -> zero-centered cumsum -> cum [B][T+1][C]
//
// Activations inside are batch-major ([B][T][.], cuDNN's
// CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED), unlike the CPU executor's
// time-major rows; the results are the same up to float rounding.
//
// Dropout mask (inverted dropout with probability p, see model/cuda/ops.h):
//   u = dropout_uniform(seed, step, site, i)   (model/cuda/dropout_hash.h)
//   scale = u < p ? 0 : float(1 / (1 - p))
// site 0 is the input projection's output [B][T][W], site k + 1 the output of
// LSTM layer k [B][T][2H] (k < L - 1), i the flat batch-major index. For a
// rank's share of a global batch (EncoderBatch::share_rows) i is the index
// that the element has in the global batch [global_B][global_T][W], so a row
// gets the mask of a process holding the whole batch (docs/multigpu.md).
// Nothing is stored: backward() recomputes the mask from the same key.
//
// Work is queued on CudaEncoderOptions::stream; forward()/backward() never
// synchronize the device (only a buffer growing for a larger batch allocates,
// which cudaMalloc/cudaFree may serialize). Results are ready once the stream
// is synchronized.
#pragma once

#include <memory>
#include <string>

#include "config/config_enums.h"
#include "model/encoder.h"

namespace timitseg::model {

namespace gpu {
class DeviceNumerics;
}

struct CudaEncoderOptions {
  config::RnnAlgo rnn_algo = config::RnnAlgo::standard;  // standard | persist_static | persist_dynamic (cuDNN cudnnRNNAlgo_t) | fused
  void* stream = nullptr;             // cudaStream_t all work is queued on
  // ExecutorOptions::deterministic: the cuBLAS handle gets a fixed workspace
  // of its own (cublasSetWorkspace), so that its algorithm choice cannot vary.
  bool deterministic = false;
};

// The cuDNN encoder with two extras over model::Encoder.
class CudaEncoder : public Encoder {
 public:
  // Training mode (the default): forward() runs cuDNN in CUDNN_FWD_MODE_TRAINING
  // and keeps the reserve space that backward() needs. With set_training(false)
  // a forward() with dropout == 0 runs CUDNN_FWD_MODE_INFERENCE (no reserve
  // space) and a following backward() throws. A forward() with dropout > 0
  // always runs in training mode.
  virtual void set_training(bool training) = 0;
  virtual bool training() const = 0;
  // One line: algo, sizes, weight/work/reserve space bytes of the last forward.
  virtual std::string describe() const = 0;
  // Output of LSTM layer k of the last forward (before dropout): device
  // [B][T][2H], rows t >= lengths[b] are 0. For numeric checks.
  virtual const float* layer_output(int k) const = 0;
  // Projection output of the last forward (device [B][T][C], padding rows 0).
  virtual const float* scores() const = 0;
  // crf.onset_features: onset scores of the last forward (device [B][T][C],
  // padding rows 0, crf.onset_projection's raw output); nullptr without onset.
  virtual const float* onset_scores() const = 0;
  // The anchored heads' scores of the last forward (device [B][T][A][C], padding
  // rows 0; model/crf_params.h), before their fold into the onset input; nullptr without.
  virtual const float* head_scores() const = 0;
  // Per-layer taps (model/numerics.h, model/cuda/numerics_taps.h): forward()
  // taps input .. cumsum, backward() taps cumsum .. input, on this object,
  // which the caller owns and starts per step. nullptr (the default): no taps.
  virtual void set_numerics(gpu::DeviceNumerics* numerics) = 0;
};

// Throws std::invalid_argument for an unknown rnn_algo or bad dims, and
// std::runtime_error without a CUDA device or when cuDNN refuses the
// configuration (naming the algo and cuDNN's status string).
// (Returns the CudaEncoder subclass; it converts to std::unique_ptr<Encoder>.)
std::unique_ptr<CudaEncoder> make_cuda_encoder(const ModelDims& dims, const CudaEncoderOptions& opt);

}  // namespace timitseg::model
