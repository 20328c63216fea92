// The encoder interface: what an executor (model/cpu/, model/cuda/) computes
// between the padded features and the CRF's cumulative scores.
//
//   features [B][T][D] -> Linear(D, W) -> dropout -> BiLSTM (L layers, H = W/2
//   per direction, dropout between layers) -> projection Linear(2H, C) ->
//   zero-centered cumsum over the valid frames -> cum [B][T+1][C]
//   (crf.onset_features: also onset_projection Linear(2H, C) -> onset [B][T][C])
//
// Every pointer is in the executor's memory space (host for cpu, CUDA device
// memory for cuda), except `lengths`, which is always a host array. Parameters
// and gradients use the one flat layout of model/params.h (PyTorch names and
// row-major shapes) on every device; an executor that needs another layout
// (cuDNN's weight space) converts inside.
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "model/params.h"

namespace timitseg::model {

enum class Device { cpu, cuda };
const char* device_name(Device d);

struct EncoderBatch {
  int B = 0, T = 0;
  const float* features = nullptr;       // [B][T][D], executor memory (padding ignored)
  const float* head_features = nullptr;  // [B][T][D], executor memory: the Gaussian head's (BatchInput::head_features); nullptr = features
  const int32_t* lengths = nullptr;      // [B] host, each in [1, T]
  const int32_t* lengths_dev = nullptr;  // [B] executor memory (== lengths on the CPU)
  // A rank's share of a global batch (BatchInput::share_rows, model/batch.h):
  // row b is row share_rows[b] (host, [B]) of a global batch [global_B][global_T];
  // the dropout masks are that row's. nullptr: the batch is whole.
  const int32_t* share_rows = nullptr;
  int global_B = 0, global_T = 0;
};

// Dropout is inverted dropout with probability `dropout` on the input
// projection's output and between LSTM layers (never after the last layer).
// The mask is a pure function of (seed, step, layer, index) on the GPU and a
// draw from the executor's std::mt19937_64 on the CPU: the two devices use
// different masks, so they are compared with dropout off.
struct ForwardOptions {
  double dropout = 0.0;  // 0: evaluation (no activations kept beyond what backward needs)
  uint64_t seed = 0;              // GPU masks: a function of (seed, step, layer, index)
  uint64_t step = 0;
  std::mt19937_64* rng = nullptr;  // CPU masks: drawn from this engine in a fixed order
};

class Encoder {
 public:
  virtual ~Encoder() = default;
  virtual Device device() const = 0;
  virtual const ModelDims& dims() const = 0;

  // cum [B][T+1][C] (rows past lengths[b] are 0). Keeps the activations that
  // backward() needs until the next forward().
  virtual void forward(const float* params, const EncoderBatch& batch, const ForwardOptions& opt, float* cum) = 0;

  // From d loss / d cum [B][T+1][C] to d loss / d params: overwrites every
  // encoder.* and crf.projection.* entry of grad (flat layout) and leaves the
  // CRF parameters' entries (crf.transition, .duration_bias, .start, .end)
  // untouched. Uses the activations of the last forward().
  // dscores (optional, executor memory): d loss / d scores [B][T][C] of a
  // loss term on the projection's output itself (crf.frame_ce_weight; 0 on
  // padding rows), added to the gradient that comes through the cumsum.
  virtual void backward(const float* params, const float* dcum, float* grad, const float* dscores = nullptr) = 0;

  // crf.onset_features (ModelDims::onset): forward() that also writes the
  // onset scores onset [B][T][C] (crf.onset_projection's raw output, padding
  // frames 0; nullptr = not wanted), and backward() that also takes
  // d loss / d onset [B][T][C] (required with onset: it reaches the encoder
  // output and crf.onset_projection.*). Without onset they are forward() and
  // backward().
  virtual void forward_with_onset(const float* params, const EncoderBatch& batch, const ForwardOptions& opt,
                                  float* cum, float* onset) = 0;
  virtual void backward_with_onset(const float* params, const float* dcum, const float* donset, float* grad,
                                   const float* dscores = nullptr) = 0;
};

}  // namespace timitseg::model
