// The building blocks of the fused LSTM kernels (model/cuda/lstm_fused.cu,
// whose top comment describes the grid, the roles and the budget): the CTA
// and cluster sizes, the register tile of the matvec (Tile), and the
// load/store-only pieces of a step (lengths, padding, the backward's
// transposed tile and its DSMEM partials). Included by lstm_fused.cu only:
// everything stays in its translation unit (an unnamed namespace), as before.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "model/cuda/lstm_fused_grid.h"

namespace timitseg::model::fused {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 256;  // per CTA
constexpr int kSplit = 4;      // adjacent lanes that split a matvec's inputs
constexpr int BG = kGroup;     // utterances per cluster

// Cluster size (CTAs) for H units per direction; 0 if H is not supported.
__host__ __device__ constexpr int cluster_size(int H) { return H == 64 ? 4 : H == 128 ? 4 : H == 256 ? 8 : 0; }
static_assert(grid_ctas(32, 64) == 2 * 4 * cluster_size(64) && grid_ctas(32, 128) == 2 * 4 * cluster_size(128) &&
                  grid_ctas(9, 256) == 2 * 2 * cluster_size(256),
              "lstm_fused.h's grid_ctas must match cluster_size and launch_config's grid");

// Register tile of out[b][o] = sum_i in[b][i] * M[o][i] (see the top).
template <int O, int I>
struct Tile {
  static constexpr int OPT = O * kSplit / kThreads;  // outputs per thread
  static constexpr int IPT = I / kSplit;             // inputs per thread
  static constexpr int G4 = IPT / 4;                 // float4 groups per thread
  static_assert(OPT >= 1 && OPT * kThreads == O * kSplit, "outputs must tile the CTA");
  static_assert(G4 >= 1 && G4 * 4 * kSplit == I, "inputs must split into float4 groups");
  static_assert((OPT * BG) % kSplit == 0, "every lane writes the same number of sums");

  // acc[e][b] = sum_i in[b][i] * w[e][i'] for this thread's output o = (tid/4)*OPT + e,
  // summed over the 4 lanes of the group (all 4 lanes end with the same bits).
  // in: shared memory [BG][I], 16-byte aligned.
  static __device__ __forceinline__ void run(const float (&w)[OPT][IPT], const float* in, int c,
                                             float (&acc)[OPT][BG]) {
#pragma unroll
    for (int e = 0; e < OPT; ++e)
#pragma unroll
      for (int b = 0; b < BG; ++b) acc[e][b] = 0.0f;
#pragma unroll
    for (int g = 0; g < G4; ++g) {
#pragma unroll
      for (int b = 0; b < BG; ++b) {
        const float4 x = *reinterpret_cast<const float4*>(in + b * I + 4 * (g * kSplit + c));
#pragma unroll
        for (int e = 0; e < OPT; ++e) {
          float a = acc[e][b];
          a = fmaf(w[e][4 * g + 0], x.x, a);
          a = fmaf(w[e][4 * g + 1], x.y, a);
          a = fmaf(w[e][4 * g + 2], x.z, a);
          a = fmaf(w[e][4 * g + 3], x.w, a);
          acc[e][b] = a;
        }
      }
    }
#pragma unroll
    for (int e = 0; e < OPT; ++e)
#pragma unroll
      for (int b = 0; b < BG; ++b) {
        float v = acc[e][b];
        v += __shfl_xor_sync(0xffffffffu, v, 1);
        v += __shfl_xor_sync(0xffffffffu, v, 2);
        acc[e][b] = v;
      }
  }
  // Input index of register w[e][n] for lane group c.
  static __device__ __forceinline__ int input_of(int n, int c) { return 4 * ((n / 4) * kSplit + c) + n % 4; }
};

// (Only where the kernels have bodies: unreferenced device functions are warnings.)
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// Length of utterance b of the batch clamped to [0, T]; 0 past the batch.
__device__ __forceinline__ int clamped_length(const int32_t* lengths, int b, int B, int T) {
  if (b >= B) return 0;
  return min(max(static_cast<int>(lengths[b]), 0), T);
}

// Load/store-only pieces of the kernels (no arithmetic), inlined. Forward padding frames [len, T): 0.
template <int H>
__device__ __forceinline__ void zero_forward_padding(int len, int T, float* gates_b, float* cell_b, float* hprev_b,
                                                     float* y_b) {
  for (int t = len; t < T; ++t) {
#pragma unroll
    for (int q = 0; q < 4; ++q) gates_b[static_cast<int64_t>(t) * 4 * H + q * H] = 0.0f;
    cell_b[static_cast<int64_t>(t) * H] = 0.0f;
    hprev_b[static_cast<int64_t>(t) * H] = 0.0f;
    y_b[static_cast<int64_t>(t) * 2 * H] = 0.0f;
  }
}
// Backward: padding frames [len, T) of d xg: 0.
template <int H>
__device__ __forceinline__ void zero_backward_padding(int len, int T, float* dxg_b) {
  for (int t = len; t < T; ++t)
#pragma unroll
    for (int q = 0; q < 4; ++q) dxg_b[static_cast<int64_t>(t) * 2 * 4 * H + q * H] = 0.0f;
}

// Backward's transposed tile: w[e][n] = W[dir][row(r = input_of(n))][unit k = o0 + e] (wd = W[dir]).
template <int H, int U, class Mv>
__device__ __forceinline__ void load_transposed_tile(const float* wd, int u0, int c, int o0,
                                                     float (&w)[Mv::OPT][Mv::IPT]) {
#pragma unroll
  for (int n = 0; n < Mv::IPT; ++n) {
    const int r = Mv::input_of(n, c), q = r / U, j = r % U;
    const float* row = wd + static_cast<int64_t>(q * H + u0 + j) * H + o0;
#pragma unroll
    for (int e = 0; e < Mv::OPT; ++e) w[e][n] = __ldg(row + e);
  }
}

// Backward: this CTA's d h partials (acc, units o0 + e) into part[rank] of each unit's CTA (DSMEM).
template <int U, int NC, class Mv>
__device__ __forceinline__ void send_partials(cg::cluster_group& cluster, float (&part)[NC][BG][U], int rank, int c,
                                              int o0, const float (&acc)[Mv::OPT][BG]) {
#pragma unroll
  for (int e = 0; e < Mv::OPT; ++e) {
    const int k = o0 + e, dst = k / U, kl = k % U;
#pragma unroll
    for (int b = 0; b < BG; ++b)
      if ((e * BG + b) % kSplit == c) *cluster.map_shared_rank(&part[rank][b][kl], dst) = acc[e][b];
  }
}
#endif

}  // namespace
}  // namespace timitseg::model::fused
