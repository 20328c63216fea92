// The model definition shared by every executor: dimensions, the flat
// parameter layout under PyTorch's names and row-major shapes (so a checkpoint
// loads into torch.nn.Linear / nn.LSTM, bidirectional, batch_first, gate order
// i, f, g, o), and the initialisation.
//   encoder.input_proj.weight [W][D], .bias [W]                 (W = hidden_dim)
//   encoder.lstm.weight_ih_l{k}[_reverse] [4H][In_k]  (In_0 = W, else 2H; H = W/2)
//   encoder.lstm.weight_hh_l{k}[_reverse] [4H][H], bias_ih/bias_hh [4H]
//   crf.projection.weight [C][W], .bias [C]     (the crf.* tensors: model/crf_params.h, ParamLayout::crf())
//   crf.onset_projection.weight [C][W], .bias [C]        (only with ModelDims::onset)
//   crf.transition [C][C], crf.duration_bias [K][C], crf.start [C], crf.end [C]
//   crf.duration_lognormal [3][C]       (only with ModelDims::duration_lognormal:
//                                        rows mu, log_sigma, offset; crf.duration_bias is then derived from it,
//                                        crf/duration.h; the layout's side below)
#pragma once

#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "crf/backend.h"
#include "model/crf_params.h"
#include "model/model_dims.h"

namespace timitseg::model {

struct ParamInfo {
  std::string name;
  std::vector<int64_t> shape;
  size_t offset = 0;
  size_t size = 0;
};

class ParamLayout {
 public:
  explicit ParamLayout(const ModelDims& d);
  const std::vector<ParamInfo>& params() const { return params_; }
  size_t total() const { return total_; }
  const ParamInfo& get(const std::string& name) const;
  const ModelDims& dims() const { return dims_; }
  // The CRF's tensors in this layout (model/crf_params.h), resolved once.
  const CrfParamView& crf() const { return crf_; }
  // Offset of crf.transition: [crf_structure_begin(), total()) holds crf.transition,
  // crf.duration_bias, crf.start and crf.end (and crf.duration_lognormal), the parameter
  // group of crf.lr_scale.
  size_t crf_structure_begin() const { return crf_structure_begin_; }

 private:
  void add(const std::string& name, std::vector<int64_t> shape);
  ModelDims dims_;
  std::vector<ParamInfo> params_;
  size_t total_ = 0;
  CrfParamView crf_;
  size_t crf_structure_begin_ = 0;  // set once in the constructor: read every optimizer step
};

// PyTorch default initialisation (uniform +-1/sqrt(fan_in) for Linear,
// +-1/sqrt(H) for LSTM). crf.transition [C][C] and crf.duration_bias [K][C]:
// zero for crf_init_scale = 0 (no random numbers drawn), else N(0, scale^2)
// (as the reference script's randn * 0.1 for scale 0.1); crf.start / crf.end
// zero. Deterministic given rng.
template <class S>
void init_params(const ParamLayout& layout, std::mt19937_64& rng, std::vector<S>& params, double crf_init_scale = 0.0);

// The prior of crf.duration_init = data: log p(d | c) for d = 1..K and labels
// c in [0, C), row-major [K][C] like crf.duration_bias, from frame label
// sequences (class indices in [0, C)). Each maximal run of one label is split
// as the loss's gold segmentation splits it (docs/crf.md: floor(r/K) pieces of
// K frames, then the remainder), and the pieces are counted, add-one smoothed:
// p(d | c) = (n[d][c] + 1) / (n[c] + K), so every entry is finite and each
// label's K probabilities sum to 1.
struct DurationPrior {
  std::vector<double> log_p;  // [K][C]
  int64_t segments = 0;       // gold segments counted
};
DurationPrior duration_log_prior(const std::vector<std::vector<int32_t>>& class_labels, int K, int C);

// Uniform double in [0,1) from 53 random bits (portable, unlike std distributions).
inline double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }
// Standard normal from two uniform01 draws (Box-Muller, cosine branch; portable).
double standard_normal(std::mt19937_64& rng);

// crf.duration_model = lognormal over the flat layout (its math: crf/duration.h).
// K for crf.reg's L2 penalty: the table's rows with the table model, 0 (transition only) with the log-normal.
int penalized_durations(const ModelDims& d);
// With ModelDims::duration_lognormal: writes the derived crf.duration_bias into
// params (the flat layout); no-op for the table model.
void derive_duration_table(const ParamLayout& layout, float* params);
// With ModelDims::duration_lognormal: d table -> d crf.duration_lognormal in grad
// (flat layout), table's gradient zeroed; no-op for the table model.
void chain_duration_gradient(const ParamLayout& layout, const float* params, float* grad);

}  // namespace timitseg::model
