// Fused persistent bidirectional LSTM layer for Hopper (sm_90): the recurrent
// part of ONE bidirectional LSTM layer, both directions in one launch, forward
// and backward through time. Each (direction, group of 8 utterances) is one
// thread-block cluster whose CTAs keep their slice of W_hh in registers for
// the whole sequence and exchange h (forward) or d h (backward) through
// distributed shared memory, one cluster barrier per time step. See the top
// of lstm_fused.cu for the data layout and the budget.
//
// The input part is the caller's: it computes, with cuBLAS, for both
// directions at once, the pre-activations
//   xg[b][t][dir][4H] = W_ih_dir x[b][t] + b_ih_dir + b_hh_dir     [B][T][2][4H]
// and afterwards the weight gradients from the outputs here:
//   dW_ih_dir = sum_{b,t} dxg[b][t][dir]^T x[b][t],  dx = sum_dir dxg_dir W_ih_dir,
//   dW_hh_dir = sum_{b,t} dxg[b][t][dir]^T hprev[dir][b][t],  db = colsum(dxg_dir).
//
// Conventions: all pointers are device pointers, all tensors float32 and
// densely packed, `stream` a cudaStream_t as void* (nullptr: the default
// stream). Gates are in PyTorch order i, f, g, o (rows [0,H), [H,2H), [2H,3H),
// [3H,4H) of weight_hh_l{k}[_reverse], which is [4H][H] row-major).
// Precondition (not checked on the device, the caller validates lengths on the
// host): every lengths[b] is in [1, T]. Out-of-range lengths are clamped to
// [0, T] so that memory is never accessed out of bounds.
// Both calls are asynchronous on `stream`; nothing is allocated. Results are
// deterministic: two runs give bitwise identical outputs (no atomics, fixed
// summation orders).
//
// No CUDA headers here; the definitions exist only in builds with CUDA.
#pragma once

#include <cstdint>
#include <string>

#include "model/cuda/lstm_fused_grid.h"

namespace timitseg::model::fused {

// True when the kernels can run here: H is one of the supported sizes
// (64, 128 or 256 units per direction), there is a CUDA device of compute
// capability >= 9.0 (thread-block clusters, distributed shared memory), this
// binary holds sm_90 code for the kernels, and at least one cluster of the
// kernels fits on the device (cudaOccupancyMaxActiveClusters > 0). Otherwise
// false, with the reason in *why (when why is given). Never throws.
bool supported(int H, std::string* why = nullptr);

// Forward through time.
//   xg      [B][T][2][4H]  input pre-activations (biases included), see above
//   w_hh    [2][4H][H]     forward direction, then reverse (PyTorch layout)
//   lengths [B]            each in [1, T]
// Outputs (every element written; padding frames t >= lengths[b] get 0):
//   y      [B][T][2H]   h_t of the forward dir in [..][0,H), reverse in [..][H,2H) (the layer output)
//   gates  [2][B][T][4H] activated i, f, g, o (sigmoid, sigmoid, tanh, sigmoid) per dir
//   cell   [2][B][T][H]  c_t per dir
//   hprev  [2][B][T][H]  h_{t-1} as seen by step t of that dir (0 at the dir's first
//                        step: t = 0 forward, t = lengths[b]-1 reverse)
// The reverse direction starts at each utterance's own last frame
// t = lengths[b]-1 and runs down to 0.
// Throws std::invalid_argument for B < 1, T < 1 or an unsupported H, and
// std::runtime_error (naming the reason) when supported(H) is false or the
// launch fails.
void forward(int B, int T, int H, const float* xg, const float* w_hh, const int32_t* lengths, float* y, float* gates,
             float* cell, float* hprev, void* stream);

// Backward through time.
//   dy    [B][T][2H]  d loss / d y (padding rows may hold anything: they are ignored)
//   gates, cell       as written by forward() with the same lengths and w_hh
// Output (every element written):
//   dxg   [B][T][2][4H]  d loss / d xg (the gate pre-activations), 0 on padding frames.
// Nothing past lengths[b] leaks in: the gradient of a padding frame is 0 and
// it carries no d h / d c into the valid frames.
void backward(int B, int T, int H, const float* w_hh, const int32_t* lengths, const float* dy, const float* gates,
              const float* cell, float* dxg, void* stream);

}  // namespace timitseg::model::fused
