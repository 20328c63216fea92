// The CRF's parameters in the flat layout (model/params.h), as one typed view
// resolved once from the layout (ParamLayout::crf()). The checkpoint tensor
// names live in one table (model/crf_params.cpp); code reaches a CRF tensor
// through its member here, never through its name
// (scripts/check_param_names.py). W = hidden_dim, C = num_classes, K = max_duration.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace timitseg::model {

struct ModelDims;

// One CRF tensor of the flat layout: its checkpoint name, where it lies, and
// whether this model has it (the optional ones: onset_projection.*, end_projection.*, gaussian_projection.*,
// duration_lognormal). in(buf) points into a params, grads or optimizer-moment
// buffer of the layout (float or double, const or not).
struct CrfTensor {
  const char* name = "";  // the checkpoint tensor's name, e.g. "crf.transition"
  size_t offset = 0;      // into the flat layout (0 when absent)
  size_t size = 0;        // elements (0 when absent)
  bool present = false;

  // The name without the "crf." of the checkpoint: the replay file's, the C API's
  // and timitseg.torch's name of the tensor ("transition", ...).
  const char* short_name() const;
  template <class S>
  S* in(S* buf) const {
    if (!present) throw std::logic_error(std::string("model: this model has no ") + name);
    return buf + offset;
  }
  template <class S>
  S* in(std::vector<S>& v) const { return in(v.data()); }
  template <class S>
  const S* in(const std::vector<S>& v) const { return in(v.data()); }
};

// The anchored heads (docs/crf.md): per-frame label scores of the encoder output
// that the CRF reads at a segment's first frame (anchor first_frame: the onset
// head, crf.onset_features) or its last frame (last_frame: the end head,
// crf.end_features, folded into cum_scores and onset, crf/end_scores.h). The present heads' weights lie next to each other
// in the layout, and so do their biases, so the encoder computes them all as
// one linear map: weight [A*C][W], bias [A*C] -> heads [B][T][A][C]
// (model/heads_fold.h turns them into the CRF's inputs).
enum class Anchor { first_frame, last_frame };
struct AnchoredHeads {
  const CrfTensor* weight = nullptr;  // the first present head's weight [C][W]; A*C rows from there
  const CrfTensor* bias = nullptr;    // the first present head's bias [C]; A*C entries from there
  std::vector<const CrfTensor*> weights, biases;  // [A] each present head's tensors, in layout order
  std::vector<Anchor> anchors;                    // [A]
  int count() const { return static_cast<int>(anchors.size()); }
  // True when the CRF's inputs are the heads as they are: no head, or the onset head alone.
  bool fold_is_identity() const { return anchors.empty() || (anchors.size() == 1 && anchors[0] == Anchor::first_frame); }
};

struct CrfParamView {
  // The encoder's optimizer group (before ParamLayout::crf_structure_begin()):
  CrfTensor projection_weight;   // crf.projection.weight [C][W]
  CrfTensor projection_bias;     // crf.projection.bias [C]
  CrfTensor onset_weight;        // crf.onset_projection.weight [C][W]  (only with ModelDims::onset)
  CrfTensor end_weight;          // crf.end_projection.weight [C][W]    (only with ModelDims::end)
  CrfTensor onset_bias;          // crf.onset_projection.bias [C]       (only with ModelDims::onset)
  CrfTensor end_bias;            // crf.end_projection.bias [C]         (only with ModelDims::end)
  // The Gaussian head (model/gaussian_head.h; only with ModelDims::gaussian), right after
  // crf.projection.bias: held by the optimizer (model/step_recipe.h held_parameters), set by the
  // per-epoch re-estimation.
  CrfTensor gaussian_weight;     // crf.gaussian_projection.weight [C][2D]: [x^2; x] -> frame scores
  CrfTensor gaussian_bias;       // crf.gaussian_projection.bias [C]
  // The CRF structure group (crf.lr_scale's), last in the layout:
  CrfTensor transition;          // crf.transition [C][C]     A[from][to]; may hold -inf (forbidden)
  CrfTensor duration_bias;       // crf.duration_bias [K][C]  D[d-1][c]; may hold -inf
  CrfTensor start;               // crf.start [C]; may hold -inf
  CrfTensor end;                 // crf.end [C]; may hold -inf
  CrfTensor duration_lognormal;  // crf.duration_lognormal [3][C]: rows mu, log_sigma, offset
                                 // (only with ModelDims::duration_lognormal; duration_bias derived, crf/duration.h)

  // The present anchored heads, in layout order (none: count() == 0). Throws
  // std::logic_error if their tensors are not adjacent in the layout.
  AnchoredHeads heads() const;

  // The names alone, none present (for files read without a layout).
  static const CrfParamView& names();
  // The tensors whose values may be -inf (a forbidden transition / duration /
  // start / end label, crf/): transition, duration_bias, start, end.
  std::array<const CrfTensor*, 4> may_hold_neg_inf() const { return {&transition, &duration_bias, &start, &end}; }
};

// The table: every CRF tensor in layout order, with its checkpoint name, shape
// and whether a model of these dims has it. ParamLayout adds them from here.
struct CrfTensorEntry {
  CrfTensor CrfParamView::*member;
  const char* name;
  bool structure;                                     // in the CRF structure group (crf.lr_scale)
  bool (*present)(const ModelDims& d);
  std::vector<int64_t> (*shape)(const ModelDims& d);
};
const std::array<CrfTensorEntry, 13>& crf_tensor_table();

}  // namespace timitseg::model
