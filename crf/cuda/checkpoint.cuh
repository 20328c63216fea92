// The device side of the checkpointed backward (docs/crf.md "The backward in
// bounded memory"), for the fast recurrence (recurrence_fast.cu): which
// utterance, direction and block a thread block runs, the steps and table rows
// of that block, and the state of a recurrence saved at a checkpoint and
// restored from it. The state at the top of step s is everything step s reads
// that earlier steps wrote: the ring (q, woff, wm: K rows of every label), the
// per-label reference ref and the row reference R; the cum_scores row of the
// step is read again. Restored, the steps after it compute the same values,
// bit for bit, as the run that saved it.
#pragma once

#include <climits>

#include "crf/cuda/recurrence.cuh"

namespace timitseg::crf::cuda_impl {

// The steps a thread block runs and the rows of X (alpha / rho) and Y (sigma /
// gamma) it writes. Full run: steps 1..L, every row. Block j of a window
// (kCkResume) covers rows [t0, t1) = [j W, j W + W): the forward resumes at
// step t0 (block 0: from row 0) and stops at step t1 (which writes sigma[t1 - 1]);
// the backward resumes at position t1 + K - 1 (from row L when that is past
// it) and stops at position t0 - 1 (which writes gamma[t0]); the last block of
// a window writes gamma up to row t1 + K - 1, which the duration marginals of
// its last segments read.
struct CkRange {
  int s0 = 1, s1 = 0;  // first and last step
  int xlo = 0, xhi = INT_MAX, ylo = 0, yhi = INT_MAX;
  bool resume = false;  // the state of step s0 from checkpoint j
  bool active = true;
  int j = 0;
};

// The utterance b, direction rev and block j of this thread block (kCk
// false: a full run, blocks 0..B-1 forward, B..2B-1 backward).
template <bool kCk>
__device__ inline void ck_map(const RecArgs& a, bool& rev, int& b, int& j) {
  if (!kCk || a.ck_mode != kCkResume) {
    rev = blockIdx.x >= static_cast<unsigned>(a.B);
    b = rev ? blockIdx.x - a.B : blockIdx.x;
    j = 0;
    return;
  }
  const int per = a.B * a.ck_P;
  rev = blockIdx.x >= static_cast<unsigned>(per);
  const int r = rev ? blockIdx.x - per : blockIdx.x;
  b = r / a.ck_P;
  j = a.ck_g0 + r % a.ck_P;
}

__device__ inline CkRange ck_range(const RecArgs& a, bool rev, int j, int L) {
  CkRange r;
  r.s1 = L;
  r.j = j;
  if (a.ck_mode != kCkResume) return r;
  const int t0 = j * a.ck_W, t1 = t0 + a.ck_W;
  r.active = j < a.ck_nblk && t0 <= L;
  r.xlo = r.ylo = t0;
  r.xhi = t1;
  if (!rev) {
    r.resume = j > 0;
    r.s0 = r.resume ? t0 : 1;
    r.s1 = min(L, t1);
    r.yhi = t1;
  } else {
    const bool last = j == min(a.ck_g0 + a.ck_P, a.ck_nblk) - 1;
    r.yhi = last ? t1 + a.K : t1;
    const int pr = t1 + a.K - 1;
    r.resume = pr < L;
    r.s0 = r.resume ? L - pr : 1;
    r.s1 = L - max(0, t0 - 1);
  }
  return r;
}

// Checkpoint j of utterance b in direction rev, saved at the top of step s of
// the full run (kCkSave), or -1: forward s = j W; backward at position
// L - s = (j + 1) W + K - 1, the position block j resumes from.
__device__ inline int ck_index(const RecArgs& a, bool rev, int s, int L) {
  if (!rev) return s % a.ck_W == 0 ? s / a.ck_W : -1;
  const int q = L - s - (a.K - 1);
  return (q >= a.ck_W && q % a.ck_W == 0) ? q / a.ck_W - 1 : -1;
}

__device__ inline double* ck_state(const RecArgs& a, bool rev, int b, int j) {
  const size_t bi = static_cast<size_t>(rev ? a.B + b : b);
  return a.ckpt + (bi * a.ck_nblk + j) * ck_state_doubles(a.K, a.C);
}

// Label c's column of the ring, its ref and (label 0) R into checkpoint
// `dst`, by the G lanes of its group.
__device__ inline void ck_save(double* dst, const double* q, const double* woff, const double* wm, int K, int C, int c,
                               int lane, int G, double ref, double R) {
  const int KC = K * C;
  for (int k = lane; k < K; k += G) {
    const int i = k * C + c;
    dst[i] = q[i];
    dst[KC + i] = woff[i];
    dst[2 * KC + i] = wm[i];
  }
  if (lane == 0) dst[3 * KC + c] = ref;
  if (lane == 0 && c == 0) dst[3 * KC + C] = R;
}

// The same state back into the ring (q2: its mirror, or null), ref and R.
__device__ inline void ck_restore(const double* src, double* q, double* q2, double* woff, double* wm, int K, int C,
                                  int c, int lane, int G, double& ref, double& R) {
  const int KC = K * C;
  for (int k = lane; k < K; k += G) {
    const int i = k * C + c;
    q[i] = src[i];
    if (q2) q2[i] = src[i];
    woff[i] = src[KC + i];
    wm[i] = src[2 * KC + i];
  }
  ref = src[3 * KC + c];
  R = src[3 * KC + C];
}

}  // namespace timitseg::crf::cuda_impl
