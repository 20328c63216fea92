// The fused LSTM kernels' grid (model/cuda/lstm_fused.h): utterances per
// cluster and CTAs per launch, shared by the kernels' building blocks
// (lstm_fused_tile.cuh) and the callers that size work by it. No CUDA headers.
#pragma once

#include "settings/limits.h"

namespace timitseg::model::fused {

// Utterances per cluster (batch group). The grid is 2 directions x
// ceil(B / kGroup) groups x (CTAs per cluster).
constexpr int kGroup = 8;

// CTAs of one launch for batch B and H units per direction (0 for an
// unsupported H): 2 directions x ceil(B / kGroup) groups x the cluster size
// (4 for H = 64 and 128, 8 for H = 256; lstm_fused.cu's cluster_size). With one
// CTA per SM (__launch_bounds__(256, 1)) it is the number of SMs a launch
// occupies: B = 32, H = 128 gives 32 (`compare --jobs` sizes its default by it).
constexpr int grid_ctas(int B, int H) {
  return (H == 64 || H == 128 ? 4 : H == 256 ? 8 : 0) * ((B + kGroup - 1) / kGroup) * 2;
}
// The sizes above are the kernel's; the settings know them from settings/limits.h.
static_assert(grid_ctas(1, limits::kFusedLstmUnits[0]) > 0 && grid_ctas(1, limits::kFusedLstmUnits[1]) > 0 &&
                  grid_ctas(1, limits::kFusedLstmUnits[2]) > 0 &&
                  sizeof limits::kFusedLstmUnits / sizeof limits::kFusedLstmUnits[0] == 3,
              "settings/limits.h's kFusedLstmUnits and the fused kernel's sizes differ");

}  // namespace timitseg::model::fused
