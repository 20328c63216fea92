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

#include "config/config_enums.h"

namespace timitseg::model {

// A range [begin, end) of the flat parameters that one AdamW update moves with
// learning rate lr.
struct UpdateRange {
  size_t begin = 0, end = 0;
  double lr = 0;
};

// The ranges of one update of n parameters, written once for both executors
// (the GPU's kernels run one per range, in this order): the groups follow
// torch's AdamW parameter groups, [0, scaled_begin) with lr and
// [scaled_begin, n) with lr * lr_scale (crf.lr_scale; a group's lr scales
// both its step and its decoupled weight decay; step, beta1, beta2, eps are
// shared; with lr_scale == 1 one group), each without the held range
// [held_begin, held_end) (model/step_recipe.h held_parameters; empty when
// held_begin >= held_end). Empty ranges are left out.
inline std::vector<UpdateRange> update_ranges(size_t n, double lr, size_t scaled_begin, double lr_scale,
                                              size_t held_begin = 0, size_t held_end = 0) {
  const size_t split = lr_scale == 1.0 ? n : std::min(scaled_begin, n);
  std::vector<UpdateRange> out;
  const auto group = [&](size_t begin, size_t end, double group_lr) {
    const bool holds = held_begin < held_end && held_end > begin && held_begin < end;
    const size_t first_end = holds ? std::max(begin, held_begin) : end;
    if (begin < first_end) out.push_back({begin, first_end, group_lr});
    if (holds && held_end < end) out.push_back({held_end, end, group_lr});
  };
  group(0, split, lr);
  group(split, n, lr * lr_scale);
  return out;
}

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
  // [scaled_begin, n) with lr * lr_scale (crf.lr_scale): update_ranges' groups.
  void update(std::vector<float>& params, const std::vector<float>& grad, double lr,
              size_t scaled_begin = static_cast<size_t>(-1), double lr_scale = 1.0) {
    update(params, grad, update_ranges(params.size(), lr, scaled_begin, lr_scale));
  }
  // One update of the entries of `ranges` (update_ranges), each with its
  // learning rate; the entries outside them (a held range) keep their value
  // and moments.
  void update(std::vector<float>& params, const std::vector<float>& grad, const std::vector<UpdateRange>& ranges) {
    ++step;
    for (const UpdateRange& r : ranges) update_range(params, grad, r.begin, r.end, r.lr);
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

// Scales grad, whose global norm is `norm`, so that its norm is at most
// max_norm (torch's rule: factor max_norm / (norm + 1e-6) when below 1; a
// non-finite norm or max_norm <= 0 leaves it alone).
inline void clip_to_norm(std::vector<float>& grad, double norm, double max_norm) {
  if (max_norm > 0 && std::isfinite(norm)) {
    const double f = max_norm / (norm + 1e-6);
    if (f < 1.0)
      for (float& g : grad) g = static_cast<float>(g * f);
  }
}

// clip_to_norm with the gradient's own global norm; returns the norm before clipping.
inline double clip_global_norm(std::vector<float>& grad, double max_norm) {
  const double norm = global_norm(grad);
  clip_to_norm(grad, norm, max_norm);
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
inline double scheduled_lr(config::LrSchedule schedule, double lr, double min_lr, int64_t step, int64_t total,
                           int64_t steps_per_epoch = 0) {
  if (schedule == config::LrSchedule::constant || total <= 0) return lr;
  const double pi = 3.14159265358979323846;
  if (schedule == config::LrSchedule::cosine_epoch) {
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
