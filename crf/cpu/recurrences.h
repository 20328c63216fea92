// The per-utterance recurrences of the cpu backend (internal to crf/cpu/;
// the scheme is described at the top of crf/cpu/cpu.cpp): the workspace
// layout, one utterance's view of its arrays, and the forward, backward and
// transition-gradient passes over it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "crf/detail.h"

namespace timitseg::crf::cpu {

// Below this a linear-domain sum is recomputed in the log domain (far above
// the smallest normal double 2.2e-308, so the fast path never sees denormals).
constexpr double kTiny = 1e-250;

// Workspace layout, in doubles:
//   shared:        amax_col[C], exp_col[C][C], amax_row[C], exp_row[C][C]
//   per thread:    alpha, sigma, rho, gamma, aux [(T+1)*C] each; tmp[max(K,C)]; v1[C]; v2[C]
//   per utterance: gA[C*C], gD[K*C], gs[C], ge[C]   (backward only)
struct Layout {
  int64_t C, K, T1, threads;
  int64_t shared() const { return 2 * C + 2 * C * C; }
  int64_t per_thread() const { return 5 * T1 * C + std::max(K, C) + 2 * C; }
  int64_t per_utt() const { return C * C + K * C + 2 * C; }
  size_t bytes(int64_t B) const {
    return sizeof(double) * static_cast<size_t>(shared() + threads * per_thread() + B * per_utt());
  }
};

// Everything one utterance needs; pointers into the caller's arrays and the workspace.
struct Utt {
  int64_t L, K, C;
  const float* cum;   // [L+1][C]
  const float* A;     // [C][C]
  const float* D;     // [K][C]
  const float* s;     // [C] or nullptr
  const float* e;     // [C] or nullptr
  const float* on;    // [L][C] onset rows of this utterance, or nullptr
  const double* amax_col;
  const double* exp_col;  // exp(A[c'][c] - amax_col[c])
  const double* amax_row;
  const double* exp_row;  // exp(A[c][c''] - amax_row[c])
  double *alpha, *sigma, *rho, *gamma, *aux, *tmp, *v1, *v2;

  double cm(int64_t t, int64_t c) const { return static_cast<double>(cum[t * C + c]); }
  double Dd(int64_t d, int64_t c) const { return static_cast<double>(D[(d - 1) * C + c]); }
  double Ad(int64_t a, int64_t b) const { return static_cast<double>(A[a * C + b]); }
  double start(int64_t c) const { return s ? static_cast<double>(s[c]) : 0.0; }
  double end(int64_t c) const { return e ? static_cast<double>(e[c]) : 0.0; }
  // v + o[u,c] with onset; v itself (the very same bits) without.
  double with_onset(double v, int64_t u, int64_t c) const { return on ? v + static_cast<double>(on[u * C + c]) : v; }
};

// sigma[u,:] from alpha[u,:] (u >= 1).
void transition_in(Utt& x, int64_t u);
// gamma[t,:] from rho[t,:] (t >= 1).
void transition_out(Utt& x, int64_t t);
// Forward: sigma, alpha; returns log Z.
double forward(Utt& x);
// Backward: rho and gamma; with gD, also d logZ / d D (forward done, lz = log Z).
void backward_pass(Utt& x, double lz = 0.0, double* gD = nullptr);
// d logZ / d A added to gA [C][C] (forward and backward_pass done, lz = log Z).
void transition_gradient(Utt& x, double lz, double* gA);

}  // namespace timitseg::crf::cpu
