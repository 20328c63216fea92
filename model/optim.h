// AdamW (decoupled weight decay, as torch.optim.AdamW), global-norm gradient
// clipping (as torch.nn.utils.clip_grad_norm_) and the learning-rate schedule.
// State is float32 like the parameters; norms are accumulated in float64.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/config_enums.h"

namespace timitseg::model {

struct AdamW {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-5;
  int64_t step = 0;           // number of updates done
  std::vector<float> m, v;    // exp_avg, exp_avg_sq (same layout as the parameters)

  void reset(size_t n) {
    m.assign(n, 0.f);
    v.assign(n, 0.f);
    step = 0;
  }
  // One update: elements [0, scaled_begin) with learning rate lr, elements
  // [scaled_begin, n) with lr * lr_scale (crf.lr_scale). The groups follow
  // torch's AdamW parameter groups: a group's lr scales both its step and its
  // decoupled weight decay; step, beta1, beta2, eps are shared. With
  // lr_scale == 1 (or scaled_begin >= n) this is one group, as before.
  void update(std::vector<float>& params, const std::vector<float>& grad, double lr,
              size_t scaled_begin = static_cast<size_t>(-1), double lr_scale = 1.0) {
    ++step;
    const size_t n = params.size();
    const size_t split = lr_scale == 1.0 ? n : std::min(scaled_begin, n);
    update_range(params, grad, 0, split, lr);
    update_range(params, grad, split, n, lr * lr_scale);
  }

 private:
  // elements [begin, end) with this step's learning rate lr (step already advanced)
  void update_range(std::vector<float>& params, const std::vector<float>& grad, size_t begin, size_t end, double lr) {
    if (begin >= end) return;
    const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(step));
    const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(step));
    const double step_size = lr / bc1;
    const double sqrt_bc2 = std::sqrt(bc2);
    const float b1 = static_cast<float>(beta1), b2 = static_cast<float>(beta2);
    const float decay = static_cast<float>(1.0 - lr * weight_decay);
    for (size_t i = begin; i < end; ++i) {
      const float g = grad[i];
      params[i] *= decay;
      m[i] = b1 * m[i] + (1.f - b1) * g;
      v[i] = b2 * v[i] + (1.f - b2) * g * g;
      const double denom = std::sqrt(static_cast<double>(v[i])) / sqrt_bc2 + eps;
      params[i] -= static_cast<float>(step_size * static_cast<double>(m[i]) / denom);
    }
  }
};

// L2 norm of the whole gradient (float64 accumulation, fixed order).
inline double global_norm(const std::vector<float>& grad) {
  double s = 0;
  for (float g : grad) s += static_cast<double>(g) * g;
  return std::sqrt(s);
}

// Scales grad so that its global norm is at most max_norm (torch's rule:
// factor max_norm / (norm + 1e-6) when below 1). Returns the norm before clipping.
inline double clip_global_norm(std::vector<float>& grad, double max_norm) {
  const double norm = global_norm(grad);
  if (max_norm > 0 && std::isfinite(norm)) {
    const double f = max_norm / (norm + 1e-6);
    if (f < 1.0)
      for (float& g : grad) g = static_cast<float>(g * f);
  }
  return norm;
}

// Learning rate at update `step` (0-based) of `total` updates:
//   cosine        torch's CosineAnnealingLR with T_max = total stepped once per
//                 update, so update 0 uses lr and min_lr is reached after the
//                 last update (every update counts);
//   cosine_epoch  CosineAnnealingLR with T_max = epochs stepped once per epoch
//                 (the reference script): every update of epoch e (0-based,
//                 e = step / steps_per_epoch, epochs = total / steps_per_epoch)
//                 uses min_lr + (lr - min_lr) (1 + cos(pi e / epochs)) / 2;
//   constant      lr.
inline double scheduled_lr(LrSchedule schedule, double lr, double min_lr, int64_t step, int64_t total,
                           int64_t steps_per_epoch = 0) {
  if (schedule == LrSchedule::constant || total <= 0) return lr;
  const double pi = 3.14159265358979323846;
  if (schedule == LrSchedule::cosine_epoch) {
    if (steps_per_epoch <= 0 || total % steps_per_epoch != 0)
      throw std::invalid_argument("lr_schedule cosine_epoch: total updates " + std::to_string(total) +
                                  " are not a whole number of epochs of " + std::to_string(steps_per_epoch) +
                                  " updates");
    const int64_t epochs = total / steps_per_epoch;
    const int64_t e = std::min(step / steps_per_epoch, epochs);
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(pi * static_cast<double>(e) / static_cast<double>(epochs)));
  }
  const double progress = std::min(1.0, static_cast<double>(step) / static_cast<double>(total));
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(pi * progress));
}

}  // namespace timitseg::model
