// crf.frame_ce_weight: a frame-level cross-entropy on the projection's scores,
// added to the semi-CRF loss (docs/config.md, docs/training.md).
//
//   CE_b = sum_{t < L_b} -log softmax(x[b][t][:])[label[b][t]]
//   loss += w * (sum_b CE_b) / norm
//
// x [B][T][C] are the projection's scores BEFORE the centering and cumsum;
// norm is the CRF loss's own (crf.loss_normalization: B for `utterance`, the
// batch's valid frames for `frame`, where the term is w times the mean CE per
// valid frame), so that w weighs the CE against the CRF NLL the same way
// under both normalisations. Padding frames (t >= L_b) are never read.
//
// Used by the CPU executor (float) and the float64 finite-difference tests
// (double); model/cuda/frame_ce.cu computes the same function on the GPU with
// the same summation order (per utterance over t ascending in float64, then
// over b ascending).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace timitseg::model {

// Row (b, t) of x is at x + b * stride_b + t * stride_t (C contiguous values):
// batch-major [B][T][C] is (stride_b, stride_t) = (T*C, C), the CPU network's
// time-major scores (row t*B + b) are (C, B*C).
// ce_per_utt [B] (optional): CE_b. dx [B][T][C] batch-major (optional):
// overwritten with grad_scale * d(sum_b CE_b)/dx = grad_scale * (softmax - onehot)
// on valid frames, exactly 0 on padding frames. Labels must be in [0, C) on
// valid frames (the CRF's validation checks them first). Returns sum_b CE_b
// (float64, summed per utterance over t ascending, then over b ascending).
template <class S>
double frame_cross_entropy(int B, int T, int C, const S* x, int64_t stride_b, int64_t stride_t, const int32_t* lengths,
                           const int32_t* labels, double grad_scale, double* ce_per_utt, S* dx) {
  double total = 0.0;
  for (int b = 0; b < B; ++b) {
    const int L = lengths[b];
    double ce_b = 0.0;
    for (int t = 0; t < T; ++t) {
      S* g = dx ? dx + (static_cast<int64_t>(b) * T + t) * C : nullptr;
      if (t >= L) {
        if (g) std::fill(g, g + C, S(0));
        continue;
      }
      const S* row = x + b * stride_b + t * stride_t;
      double m = -INFINITY;
      for (int c = 0; c < C; ++c) m = std::max(m, static_cast<double>(row[c]));
      double z = 0.0;
      for (int c = 0; c < C; ++c) z += std::exp(static_cast<double>(row[c]) - m);
      const double lse = m + std::log(z);
      const int y = labels[static_cast<int64_t>(b) * T + t];
      ce_b += lse - static_cast<double>(row[y]);
      if (g)
        for (int c = 0; c < C; ++c)
          g[c] = static_cast<S>(grad_scale * (std::exp(static_cast<double>(row[c]) - lse) - (c == y ? 1.0 : 0.0)));
    }
    if (ce_per_utt) ce_per_utt[b] = ce_b;
    total += ce_b;
  }
  return total;
}

}  // namespace timitseg::model
