// The recurrence kernels: the log-domain kernel shared by log_partition /
// backward (log-sum-exp, forward and backward recurrences) and Viterbi (max
// with backpointers, then traceback), defined in recurrence.cu; and the scaled
// linear-domain log-sum-exp kernel (recurrence_fast.cu) that log_partition /
// backward / boundary_posteriors use when its shared memory fits. Their
// host launches (their arguments: rec_args.cuh).
#pragma once

#include "crf/cuda/common.cuh"
#include "crf/cuda/rec_args.cuh"

namespace timitseg::crf::cuda_impl {

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

// checkpointed.cu: the checkpointed backward on the fast kernel (l.ck; a from
// the backend's rec_args). launch_checkpoint_pass: both recurrences over the
// whole batch (log Z, and a.logz_user when set), their checkpoints and last
// rows, no table. launch_checkpoint_window: window w (< checkpoint_windows(l))
// of the tables recomputed from the checkpoints; returns the layout whose rows
// [r0, r1) the table readers then handle.
void launch_checkpoint_pass(const Layout& l, RecArgs a, void* ws, size_t smem_limit, cudaStream_t stream);
int checkpoint_windows(const Layout& l);
Layout launch_checkpoint_window(const Layout& l, RecArgs a, void* ws, int w, size_t smem_limit, cudaStream_t stream);

}  // namespace timitseg::crf::cuda_impl
