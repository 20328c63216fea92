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
  // Checkpointed backward (fast kernel only; docs/crf.md "The backward in
  // bounded memory"): ck_mode kCkSave runs the whole recurrence without tables
  // and keeps its state every W positions in ckpt, the last row in edge;
  // kCkResume runs 2 B P blocks, block j = ck_g0 + (index % P) of each
  // utterance and direction from its checkpoint, and writes the rows of the
  // window (tables [B][ck_rows][C] from row ck_t0).
  int ck_mode;
  int ck_W, ck_nblk, ck_g0, ck_P, ck_rows, ck_t0;
  double* ckpt;  // [2B][nblk][ck_state_doubles]
  double* edge;  // [2B][C]: alpha[L] (forward), rho[0] (backward)
};
constexpr int kCkNone = 0, kCkSave = 1, kCkResume = 2;


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
