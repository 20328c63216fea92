// The CPU network's cached activations (model/cpu/network.h: layouts,
// slice-blocked time-major rows), kept from the forward for the backward.
#pragma once

#include <Eigen/Dense>

#include <cstdint>
#include <vector>

namespace timitseg::model {

// Per-layer cached activations for the backward pass.
template <class S>
struct Activations {
  using Mat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  int B = 0, T = 0;
  std::vector<int32_t> lengths;
  Mat x0;           // [T*B][D]  input (slice-blocked rows, padding rows 0)
  Mat drop0;        // [T*B][W]  dropout scale (0 or 1/(1-p)); empty when off
  std::vector<Mat> layer_in;     // [L] input of layer k ([T*B][In_k], after dropout)
  std::vector<Mat> layer_out;    // [L] raw output of layer k ([T*B][2H], before dropout)
  std::vector<Mat> drop;         // [L-1] dropout scale between layers; empty when off
  std::vector<Mat> gates[2];     // [L] per direction: [T*B][4H] activated i,f,g,o
  std::vector<Mat> cell[2];      // [L] per direction: [T*B][H] c_t
  std::vector<Mat> tcell[2];     // [L] per direction: [T*B][H] tanh(c_t)
  Mat scores;       // [T*B][C]  projection output (before centering), TIME-MAJOR row t*B + b
  bool head_reads_features = true;  // the Gaussian head read x0's features (not BatchInput::head_features)
  std::vector<S> cum;            // [B][T+1][C] zero-centered cumulative scores
  std::vector<S> heads;          // [B][T][A][C] the anchored heads' scores (model/crf_params.h; padding 0); empty without
  std::vector<S> onset;          // [B][T][C] crf::Params::onset, folded from heads (model/heads_fold.h); empty without
};

}  // namespace timitseg::model
