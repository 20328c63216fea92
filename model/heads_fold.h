// The CRF's anchored inputs from the encoder's head scores (docs/crf.md; the
// heads are model/crf_params.h's AnchoredHeads): what the CPU network and the
// long-recording paths hand the CRF, on the host.
#pragma once

#include <cstdint>
#include <vector>

#include "model/crf_params.h"

namespace timitseg::model {

// heads [B][T][A][C] (the encoder's head scores, padding frames 0) -> onset
// [B][T][C], crf::Params::onset: the sum of the first-frame heads (bitwise the
// onset head when it is the only head), then each last-frame (end) head folded
// into onset and cum [B][T+1][C] (crf::Params::cum_scores) in place
// (crf/end_scores.h); onset empty when the model has no head. lengths [B] in [1, T].
template <class S>
void fold_heads(const AnchoredHeads& h, int B, int T, int C, const std::vector<int32_t>& lengths,
                const std::vector<S>& heads, std::vector<S>& cum, std::vector<S>& onset);

// The fold's backward: d onset [B][T][C] and d cum [B][T+1][C] (the CRF's
// gradients; the fold passes d cum on unchanged) -> d heads [B][T][A][C]
// (overwritten, padding frames 0): d onset for a first-frame head, the end
// fold's backward for a last-frame head.
template <class S>
void fold_heads_backward(const AnchoredHeads& h, int B, int T, int C, const std::vector<int32_t>& lengths,
                         const std::vector<S>& dcum, const std::vector<S>& donset, std::vector<S>& dheads);

}  // namespace timitseg::model
