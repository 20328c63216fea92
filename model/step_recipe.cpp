// The arithmetic of a step's recipe shared by both executors (model/step_recipe.h).
#include "model/step_recipe.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace timitseg::model {

double step_norm(const StepOptions& o, const Batch& batch) {
  if (o.loss_norm > 0) return o.loss_norm;
  return o.frame_normalization ? static_cast<double>(batch.frames) : static_cast<double>(batch.input.B);
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
  if (o.frame_ce_weight > 0.0) return {};
  const ParamInfo& bias = layout.get("crf.projection.bias");
  return {bias.offset, bias.offset + bias.size};
}

void update_holding(AdamW& opt, std::vector<float>& params, const std::vector<float>& grad, double lr,
                    size_t scaled_begin, double lr_scale, HeldRange held) {
  if (held.empty()) {
    opt.update(params, grad, lr, scaled_begin, lr_scale);
    return;
  }
  const auto span = [&](const std::vector<float>& v) {
    return std::vector<float>(v.begin() + held.begin, v.begin() + held.end);
  };
  const std::vector<float> p = span(params), m = span(opt.m), v = span(opt.v);
  opt.update(params, grad, lr, scaled_begin, lr_scale);
  std::copy(p.begin(), p.end(), params.begin() + held.begin);
  std::copy(m.begin(), m.end(), opt.m.begin() + held.begin);
  std::copy(v.begin(), v.end(), opt.v.begin() + held.begin);
}

}  // namespace timitseg::model
