// Layers between the projection and the CRF (spec "Inputs"):
//
// 1. Zero-centered cumulative sum over the VALID frames of each utterance:
//      xc[t,c]    = x[t,c] - (1/L) sum_{t'<L} x[t',c]            t < L = lengths[b]
//      cum[0,c]   = 0,  cum[t+1,c] = cum[t,c] + xc[t,c]           t < L
//    Padding frames (t >= L) of x are never read; rows t > L of cum are set to 0.
//    Sums are accumulated in float64 in a fixed order.
//
// 2. The L2 penalty on the CRF parameters  reg * (||A||^2 + ||D||^2)  (sum of
//    squares of transition [C][C] and duration_bias [K][C]). start and end are
//    NOT included (they are few and are left free). -inf entries (forbidden
//    transitions/durations) are constants: excluded from the sum, no gradient.
//
// Templates instantiated for float (training) and double (finite-difference tests).
#pragma once

#include <cstdint>

namespace timitseg::crf {

// x [B][T][C] -> cum [B][T+1][C]. lengths [B], each in [1, T] (throws
// std::invalid_argument otherwise).
template <class F>
void centered_cumsum_forward(int64_t B, int64_t T, int64_t C, const F* x, const int32_t* lengths, F* cum);

// Backward of centered_cumsum_forward: grad_cum [B][T+1][C] -> grad_x [B][T][C]
// (overwritten). Row 0 of grad_cum is ignored (cum[0] = 0 is a constant) and so
// are rows t > L; grad_x at padding frames t >= L is exactly 0.
//      g[t,c]      = sum_{s=t+1..L} grad_cum[s,c]                  (reverse cumsum)
//      grad_x[t,c] = g[t,c] - (1/L) sum_{t'<L} g[t',c]             (through the mean)
// A long recording's variant (docs/crf.md "Centring a long recording"): one
// utterance x [T][C] of L valid frames, each frame centred by the mean of the
// frames of its own neighbourhood [t - half, t + half] (clipped to [0, L))
// instead of the whole utterance's:
//      xc[t,c] = x[t,c] - mean_{t' in [max(0, t-half), min(L, t+half+1))} x[t',c]
//      cum[0,c] = 0,  cum[t+1,c] = cum[t,c] + xc[t,c]             t < L
// rows t > L of cum are 0. Float64 sums: the window's sum slides (one frame in,
// one out, in frame order). half >= L - 1: every window is the utterance, and
// cum is bitwise centered_cumsum_forward's. Throws std::invalid_argument for
// L outside [1, T] or half < 0. Inference only (no backward).
void running_centered_cumsum_forward(int64_t T, int64_t C, const float* x, int64_t L, int64_t half, float* cum);

template <class F>
void centered_cumsum_backward(int64_t B, int64_t T, int64_t C, const F* grad_cum, const int32_t* lengths, F* grad_x);

// Returns reg * (sum A^2 + sum D^2), accumulated in float64. When grad_transition /
// grad_duration_bias are not null, ADDS 2 * reg * A / 2 * reg * D to them (so it
// composes with the CRF gradients already there).
template <class F>
double l2_penalty(double reg, int64_t C, int64_t K, const F* transition, const F* duration_bias, F* grad_transition,
                  F* grad_duration_bias);

}  // namespace timitseg::crf
