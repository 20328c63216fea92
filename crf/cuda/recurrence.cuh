// The recurrence kernels: the log-domain kernel shared by log_partition /
// backward (log-sum-exp, forward and backward recurrences) and Viterbi (max
// with backpointers, then traceback), defined in recurrence.cu; and the scaled
// linear-domain log-sum-exp kernel (recurrence_fast.cu) that log_partition /
// backward / boundary_posteriors use when its shared memory fits. Their
// arguments and host launches.
#pragma once

#include "crf/cuda/common.cuh"

namespace timitseg::crf::cuda_impl {

constexpr int kMaxRecThreads = 640;

struct RecArgs {
  int B, T, K, C;
  int G;          // lanes per label group (8, 16 or 32)
  int use_smem;   // rings and parameters in shared memory
  int store;      // write the [T+1][C] tables alpha/sigma (rho/gamma); 0: log Z only (fast kernel)
  const float* cum;
  const float* A;
  const float* D;
  const float* s;  // never null (zeros buffer)
  const float* e;  // never null
  const float* onset;  // [B][T][C] onset scores o, or null (none)
  const int32_t* lengths;
  double* alpha;
  double* sigma;
  double* rho;
  double* gamma;
  int32_t* bp_d;   // Viterbi: argmax duration per [b][t][c]
  int32_t* bp_c;   // Viterbi: argmax source label per [b][u][c]
  int32_t* segtmp; // Viterbi: [B][T][3] reversed segments
  double* logz;      // [B] internal (forward)
  double* logz_rev;  // [B] internal (backward recurrence: lse_c s + rho[0])
  double* logz_user; // [B] or null
  double* vit_score; // [B] (Viterbi)
  int32_t* segments; // [B][T][3] (Viterbi)
  int32_t* nsegs;    // [B] (Viterbi)
  unsigned long long* status;
};


// Launches recurrence_kernel on `blocks` blocks (B: forward or Viterbi;
// 2B: forward and backward). kMax = false: log-sum-exp, true: Viterbi.
// The state stays in a shared-memory ring when it fits in smem_limit bytes
// and force_global_ring is false.
template <bool kMax>
void launch_recurrence(const Layout& l, RecArgs& a, int blocks, size_t smem_limit, bool force_global_ring,
                       cudaStream_t stream);

// The scaled linear-domain log-sum-exp kernel (recurrence_fast.cu, docs/cuda.md
// "Fast recurrence"): same outputs as launch_recurrence<false> to float64
// rounding (not bitwise), exact fallback per entry. Shared memory it needs
// for these dims; lse_fast_fits: whether the kernel runs these dims with G
// lanes per label (C * G <= kMaxRecThreads, shared memory within smem_limit);
// launch_lse_fast requires it.
size_t lse_fast_smem_bytes(int K, int C);
bool lse_fast_fits(int K, int C, int G, size_t smem_limit);
void launch_lse_fast(const Layout& l, RecArgs& a, int blocks, size_t smem_limit, cudaStream_t stream);

}  // namespace timitseg::crf::cuda_impl
