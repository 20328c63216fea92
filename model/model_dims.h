// The model's dimensions: what the parameter layout (model/params.h) and the
// CRF's tensor table (model/crf_params.h) are built from.
#pragma once

#include <cstdint>

#include "crf/backend.h"

namespace timitseg::model {

struct ModelDims {
  int input_dim = 39;   // D
  int hidden_dim = 256; // W = 2H
  int num_layers = 3;
  int num_classes = 39; // C
  int max_duration = 30;  // K
  bool onset = false;     // crf.onset_features: crf.onset_projection.weight [C][W], .bias [C]
  bool end = false;       // crf.end_features: crf.end_projection.weight [C][W], .bias [C]
  bool duration_lognormal = false;  // crf.duration_model = lognormal: crf.duration_lognormal [3][C]
  // crf.gaussian_head: crf.gaussian_projection.weight [C][2D], .bias [C], the Gaussian head
  // (model/gaussian_head.h): frame scores += W [x^2; x] + b, re-estimated each epoch, never a gradient step
  bool gaussian = false;
  int per_direction() const { return hidden_dim / 2; }
  // The CRF gets an onset input [B][T][C] (crf::Params::onset), folded from the
  // anchored heads (model/crf_params.h AnchoredHeads, model/heads_fold.h).
  bool onset_input() const { return onset || end; }
  // The CRF's dimensions {B, T, K, C} for a batch of B sequences of T frames.
  crf::Dims crf_dims(int64_t B, int64_t T) const { return crf::Dims{B, T, max_duration, num_classes}; }
};

}  // namespace timitseg::model
