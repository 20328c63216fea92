// The arithmetic of a step's recipe shared by both executors (model/step_recipe.h).
#include "model/step_recipe.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace timitseg::model {

double loss_normalization(bool frame_normalization, int64_t utterances, int64_t frames) {
  return frame_normalization ? static_cast<double>(frames) : static_cast<double>(utterances);
}

double step_norm(const StepOptions& o, const Batch& batch) {
  if (o.loss_norm > 0) return o.loss_norm;
  return loss_normalization(o.frame_normalization, batch.input.B, batch.frames);
}

double check_crf_outputs(const double* log_z, const double* gold, int B) {
  double nll_sum = 0.0;
  for (int b = 0; b < B; ++b) {
    if (!std::isfinite(log_z[b]))
      throw NonFiniteError("log_partition", "non-finite log partition for batch row " + std::to_string(b));
    if (!std::isfinite(gold[b]))
      throw NonFiniteError("gold_score", "non-finite gold score for batch row " + std::to_string(b));
    nll_sum += log_z[b] - gold[b];
  }
  return nll_sum;
}

double check_frame_ce(double sum) {
  if (!std::isfinite(sum)) throw NonFiniteError("frame_ce", "non-finite frame cross-entropy (crf.frame_ce_weight)");
  return sum;
}

double step_loss(const StepResult& r, const StepOptions& o, double norm) {
  double loss = r.nll_sum / norm + r.penalty;
  if (o.frame_ce_weight > 0.0) loss += o.frame_ce_weight * r.frame_ce_sum / norm;
  return loss;
}

void check_gradient_finite(const ParamLayout& layout, const float* grad) {
  for (const ParamInfo& p : layout.params())
    for (size_t i = 0; i < p.size; ++i)
      if (!std::isfinite(grad[p.offset + i]))
        throw NonFiniteError("gradient of " + p.name,
                             "non-finite gradient of " + p.name + " at flat index " + std::to_string(i));
}

HeldRange held_parameters(const ParamLayout& layout, const StepOptions& o) {
  const CrfParamView& crf = layout.crf();
  const CrfTensor& bias = crf.projection_bias;
  HeldRange held;
  if (o.frame_ce_weight <= 0.0) held = {bias.offset, bias.offset + bias.size};
  if (crf.gaussian_weight.present) {  // right after crf.projection.bias in the layout (model/crf_params.cpp)
    const size_t end = crf.gaussian_bias.offset + crf.gaussian_bias.size;
    if (held.empty()) held.begin = crf.gaussian_weight.offset;
    else if (held.end != crf.gaussian_weight.offset)
      throw std::logic_error("model: crf.gaussian_projection does not follow crf.projection.bias in the layout");
    held.end = end;
  }
  return held;
}

std::vector<UpdateRange> step_update_ranges(const ParamLayout& layout, const StepOptions& o) {
  const HeldRange held = held_parameters(layout, o);
  return update_ranges(layout.total(), o.lr, layout.crf_structure_begin(), o.crf_lr_scale, held.begin, held.end);
}

}  // namespace timitseg::model
