// Internals of the CPU network (model/cpu/network.cpp, network_forward.cpp,
// network_backward.cpp): the slice partition, dropout masks, and the named
// stages of Network::forward and Network::backward, each one parallel_for
// (tasks never write the same element). network.cpp holds the two drivers;
// the stages are defined, for float and double, in network_forward.cpp and
// network_backward.cpp. Layouts and the fixed task partition: network.h.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "model/batch.h"
#include "model/cpu/activations.h"
#include "model/cpu/probe.h"
#include "model/params.h"

namespace timitseg::model::cpu_detail {

// One slice of the batch: utterances [b0, b0 + nb), rows [row0, row0 + T*nb)
// of every slice-blocked [T*B][.] matrix; only its first `rows` = Tmax*nb rows
// (frames t < Tmax, the slice's longest utterance) are ever non-zero.
struct Slice {
  int b0 = 0, nb = 0, Tmax = 0;
  int64_t row0 = 0, rows = 0;
};

inline std::vector<Slice> make_slices(const std::vector<int32_t>& lengths, int T, int per_slice) {
  const int B = static_cast<int>(lengths.size());
  std::vector<Slice> v;
  for (int b0 = 0; b0 < B; b0 += per_slice) {
    Slice s;
    s.b0 = b0;
    s.nb = std::min(per_slice, B - b0);
    for (int j = 0; j < s.nb; ++j) s.Tmax = std::max<int>(s.Tmax, lengths[b0 + j]);
    s.row0 = int64_t(b0) * T;
    s.rows = int64_t(s.Tmax) * s.nb;
    v.push_back(s);
  }
  return v;
}

// Row of frame t of utterance b (b in slice s).
inline int64_t row_of(const Slice& s, int b, int t) { return s.row0 + int64_t(t) * s.nb + (b - s.b0); }

// Inverted dropout scale: 0 with probability p, else 1/(1-p), drawn in
// time-major (t, b, unit) order and stored at the slice-blocked rows.
// A rank's share of a global batch (in.share_rows, model/batch.h): the draws
// are those of the whole global batch [global_T][global_B][unit], in the same
// order, and only the share's rows are kept, so every rank's engine advances
// as one process's does and each row gets the mask it would get there.
template <class Mat, class S>
void dropout_mask(Mat& mask, const std::vector<Slice>& slices, int T, int64_t cols, double p, std::mt19937_64& rng,
                  const BatchInput<S>& in) {
  using M = typename Mat::Scalar;
  const M keep = static_cast<M>(1.0 / (1.0 - p));
  if (in.share_rows.empty()) {
    for (int t = 0; t < T; ++t)
      for (const Slice& s : slices)
        for (int j = 0; j < s.nb; ++j) {
          M* m = mask.data() + row_of(s, s.b0 + j, t) * cols;
          for (int64_t c = 0; c < cols; ++c) m[c] = uniform01(rng) < p ? M(0) : keep;
        }
    return;
  }
  std::vector<int> local(static_cast<size_t>(in.global_B), -1), slice_of;  // global row -> local row; local row -> slice
  for (size_t b = 0; b < in.share_rows.size(); ++b) local.at(static_cast<size_t>(in.share_rows[b])) = static_cast<int>(b);
  for (size_t si = 0; si < slices.size(); ++si) slice_of.insert(slice_of.end(), slices[si].nb, static_cast<int>(si));
  for (int t = 0; t < in.global_T; ++t)
    for (int gb = 0; gb < in.global_B; ++gb) {
      const int b = local[gb];
      if (b < 0 || t >= T) {  // another rank's row, or padding past this share's length: drawn, not kept
        rng.discard(static_cast<unsigned long long>(cols));  // uniform01 takes one draw each
        continue;
      }
      M* m = mask.data() + row_of(slices[slice_of[b]], b, t) * cols;
      for (int64_t c = 0; c < cols; ++c) m[c] = uniform01(rng) < p ? M(0) : keep;
    }
}

inline std::string lstm_suffix(int k, int dir) { return "_l" + std::to_string(k) + (dir ? "_reverse" : ""); }

// What every forward stage reads and writes.
template <class S>
struct ForwardContext {
  using Mat = typename Activations<S>::Mat;
  using Vec = Eigen::Matrix<S, Eigen::Dynamic, 1>;
  const ParamLayout& layout;
  const std::vector<S>& params;
  const BatchInput<S>& in;
  double dropout;
  std::mt19937_64* rng;
  Activations<S>& act;
  Probe* pr;  // null: taps cost nothing
  int nthreads;
  std::vector<Slice> slices;
  bool train;  // dropout > 0
  const S* P(const std::string& name) const { return params.data() + layout.get(name).offset; }
  const S* P(const CrfTensor& t) const { return t.in(params); }
};

// Forward stages, in order (network_forward.cpp).
// act sized for the batch: [T*B] rows, dropout masks when training, empty cum/onset.
template <class S>
void reset_activations(ForwardContext<S>& c);
// features -> x0 -> z0 (= layer_in[0] before dropout); draws drop0 beside it.
template <class S>
void forward_input(ForwardContext<S>& c);
// BiLSTM layer k: its input (with dropout), both directions' recurrences per
// slice; draws drop[k] beside them when another layer follows.
template <class S>
void forward_lstm_layer(ForwardContext<S>& c, int k);
// Projection (time-major scores), the anchored heads, the zero-centered cumsum,
// the heads folded into the CRF's inputs (act.onset, act.cum).
template <class S>
void forward_scores(ForwardContext<S>& c);

// What every backward stage reads and writes.
template <class S>
struct BackwardContext {
  using Mat = typename Activations<S>::Mat;
  using Vec = Eigen::Matrix<S, Eigen::Dynamic, 1>;
  const ParamLayout& layout;
  const std::vector<S>& params;
  const Activations<S>& act;
  std::vector<S>& grad;
  Probe* pr;  // null: taps cost nothing
  int nthreads;
  std::vector<Slice> slices;
  bool train;  // the forward drew dropout masks
  const S* P(const std::string& name) const { return params.data() + layout.get(name).offset; }
  S* G(const std::string& name) const { return grad.data() + layout.get(name).offset; }
  const S* P(const CrfTensor& t) const { return t.in(params); }
  S* G(const CrfTensor& t) const { return t.in(grad); }
  // zero the rows of slice s past its longest utterance (never written by the stages)
  void zero_tail(Mat& m, const Slice& s) const {
    m.middleRows(s.row0 + s.rows, int64_t(act.T) * s.nb - s.rows).setZero();
  }
  void tap_grad(const std::string& layer, const std::string& name) const {
    const ParamInfo& p = layout.get(name);
    pr->tap(layer, config::Pass::backward, "d_" + name, grad.data() + p.offset, p.size);
  }
  void tap_grad(const std::string& layer, const CrfTensor& t) const {
    pr->tap(layer, config::Pass::backward, std::string("d_") + t.name, t.in(grad), t.size);
  }
};

// Backward stages, in order (network_backward.cpp).
// cumsum backward (+ dscores) -> dS [T*B][C] slice-blocked.
template <class S>
typename Activations<S>::Mat backward_cumsum(const BackwardContext<S>& c, const std::vector<S>& dcum,
                                             const std::vector<S>* dscores);
// projection backward: d Wp, d bp into grad; returns dOut = d loss / d layer_out[L-1] [T*B][2H].
template <class S>
typename Activations<S>::Mat backward_projection(const BackwardContext<S>& c, const typename Activations<S>::Mat& dS);
// the anchored heads' backward (crf.onset_features): d heads [B][T][A][C] from
// d onset and d cum (model/heads_fold.h), then d Wo, d bo into grad, dOut += dO Wo.
template <class S>
void backward_heads(const BackwardContext<S>& c, const std::vector<S>& dcum, const std::vector<S>* donset,
                    typename Activations<S>::Mat& dOut);
// BiLSTM layer k (from the top): dIn[dir] [T*B][In_k] = d loss / d layer_in[k]
// through direction dir, from dOut (top layer) or dInAbove (the layer above's dIn).
template <class S>
void backward_lstm_layer(const BackwardContext<S>& c, int k, const typename Activations<S>::Mat& dOut,
                         const typename Activations<S>::Mat (&dInAbove)[2], typename Activations<S>::Mat (&dIn)[2]);
// input projection: d Win, d bin into grad and, with dfeatures, d loss / d features [B][T][D]
// (with the Gaussian head, crf.gaussian_weight, also its path from dS = d loss / d scores [T*B][C], slice-blocked).
template <class S>
void backward_input(const BackwardContext<S>& c, const typename Activations<S>::Mat (&dIn)[2],
                    std::vector<S>* dfeatures, const typename Activations<S>::Mat& dS);

}  // namespace timitseg::model::cpu_detail
