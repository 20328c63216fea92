// model/heads_fold.h on the GPU: the anchored heads' scores [B][T][A][C]
// (device) folded into the CRF's inputs, and the fold's backward. Results are
// bitwise those of the host functions. Compiles without CUDA headers; `stream`
// is a cudaStream_t as void*; nothing synchronizes; a failed launch throws
// std::runtime_error naming the kernel.
#pragma once

#include <cstdint>

#include "model/crf_params.h"

namespace timitseg::model::gpu {

// heads [B][T][A][C] -> the CRF's onset input [B][T][C]: `heads` itself when
// h.fold_is_identity(), else onset_out (written); nullptr without a head. cum
// [B][T+1][C] is folded in place by the heads that fold into it. len: device [B].
const float* fold_heads(const AnchoredHeads& h, int B, int T, int C, const int32_t* len, const float* heads,
                        float* cum, float* onset_out, void* stream);

// d onset [B][T][C] and d cum [B][T+1][C] -> d heads [B][T][A][C]: `donset`
// itself when h.fold_is_identity(), else dheads_out (written; padding frames 0).
const float* fold_heads_backward(const AnchoredHeads& h, int B, int T, int C, const int32_t* len, const float* dcum,
                                 const float* donset, float* dheads_out, void* stream);

}  // namespace timitseg::model::gpu
