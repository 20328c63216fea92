// Device helpers shared by the recurrence kernels (recurrence.cu: the
// log-domain kernel of every semiring; recurrence_fast.cu: the scaled
// linear-domain log-sum-exp kernel): per-lane accumulators, the group
// reductions over G lanes (fixed order: lane order, then a symmetric xor
// butterfly, so every lane holds the same bits), and the final reduction
// over labels.
#pragma once

#include "crf/cuda/common.cuh"
#include "crf/cuda/rec_args.cuh"

namespace timitseg::crf::cuda_impl {

// Semiring accumulators for one lane, combined across a lane group.
struct LseAcc {
  double m = kNegInf;  // running max
  double s = 0.0;      // sum of exp(v - m)
  __device__ void push(double v, int) {
    if (v == kNegInf) return;
    if (v > m) {
      s = s * exp(m - v) + 1.0;  // m = -inf first: 0 * 0 + 1
      m = v;
    } else {
      s += exp(v - m);
    }
  }
  // Symmetric in (this, other), so both lanes of an xor pair get the same bits.
  __device__ void combine(double om, double os) {
    const double M = fmax(m, om);
    if (M == kNegInf) {
      m = kNegInf;
      s = 0.0;
      return;
    }
    s = s * exp(m - M) + os * exp(om - M);
    m = M;
  }
  __device__ void reduce(unsigned mask, int G) {
    for (int off = G / 2; off >= 1; off >>= 1) {
      const double om = __shfl_xor_sync(mask, m, off, G);
      const double os = __shfl_xor_sync(mask, s, off, G);
      combine(om, os);
    }
  }
  __device__ double value() const { return m == kNegInf ? kNegInf : m + log(s); }
  __device__ int index() const { return 0; }
};

// Max with argmax; ties go to the smallest index (spec: smallest d, then
// smallest label). Each lane pushes indices in increasing order.
struct MaxAcc {
  double m = kNegInf;
  int idx = INT_MAX;
  __device__ void push(double v, int i) {
    if (v > m || (v == m && i < idx)) {
      m = v;
      idx = i;
    }
  }
  __device__ void combine(double om, int oi) {
    if (om > m || (om == m && oi < idx)) {
      m = om;
      idx = oi;
    }
  }
  __device__ void reduce(unsigned mask, int G) {
    for (int off = G / 2; off >= 1; off >>= 1) {
      const double om = __shfl_xor_sync(mask, m, off, G);
      const int oi = __shfl_xor_sync(mask, idx, off, G);
      combine(om, oi);
    }
  }
  __device__ double value() const { return m; }
  __device__ int index() const { return idx; }
};

// Reduces terms k = 0..n-1 over the G lanes of a group (lane takes k = lane,
// lane + G, ...). kMax: max with the smallest argmax k. Otherwise
// log-sum-exp in two passes: the group max, then sum exp(v - max) (one exp
// per term, none for the cross-lane combine). Sums go lane order then a
// symmetric xor butterfly, so every lane holds the same bits and the result
// does not depend on timing. The first kCache terms stay in registers.
template <bool kMax, class F>
__device__ inline double group_reduce(int n, int lane, int G, unsigned mask, F term, int& arg) {
  if (kMax) {
    MaxAcc acc;
    for (int k = lane; k < n; k += G) acc.push(term(k), k);
    acc.reduce(mask, G);
    arg = acc.idx;
    return acc.m;
  }
  constexpr int kCache = 6;
  double v[kCache];
  double m = kNegInf;
#pragma unroll
  for (int i = 0; i < kCache; ++i) {
    const int k = lane + i * G;
    v[i] = k < n ? term(k) : kNegInf;
    m = fmax(m, v[i]);
  }
  for (int k = lane + kCache * G; k < n; k += G) m = fmax(m, term(k));
  for (int off = G / 2; off >= 1; off >>= 1) m = fmax(m, __shfl_xor_sync(mask, m, off, G));
  if (m == kNegInf) return kNegInf;  // the same m in every lane of the group
  double sum = 0.0;
#pragma unroll
  for (int i = 0; i < kCache; ++i)
    if (v[i] != kNegInf) sum += exp(v[i] - m);
  for (int k = lane + kCache * G; k < n; k += G) {
    const double t = term(k);
    if (t != kNegInf) sum += exp(t - m);
  }
  for (int off = G / 2; off >= 1; off >>= 1) sum += __shfl_xor_sync(mask, sum, off, G);
  return m + log(sum);
}

// Final reduction over labels by warp 0: forward lse_c alpha[L,c] + e[c];
// backward lse_c s[c] + rho[0,c] (the same log Z, kept as a cross-check).
// fin_val, fin_idx: the block's shared result (log Z or the Viterbi score and its final label).
template <class Acc, bool kMax>
__device__ void finish_recurrence(const RecArgs& a, int b, bool rev, const double* xrow, double& fin_val,
                                  int& fin_idx) {
  const int tid = threadIdx.x, C = a.C;
  if (tid < 32) {
    Acc acc;
    for (int c = tid; c < C; c += 32) acc.push(xrow[c] + static_cast<double>(rev ? a.s[c] : a.e[c]), c);
    acc.reduce(0xffffffffu, 32);
    if (tid == 0) {
      fin_val = acc.value();
      fin_idx = acc.index();
      if (kMax) {
        a.vit_score[b] = fin_val;
      } else if (rev) {
        a.logz_rev[b] = fin_val;
      } else {
        a.logz[b] = fin_val;
        if (a.logz_user) a.logz_user[b] = fin_val;
      }
      if (!(fin_val > kNegInf)) report(a.status, kLogZ, b);
    }
  }
}

}  // namespace timitseg::crf::cuda_impl
