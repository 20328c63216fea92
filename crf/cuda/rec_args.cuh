// The arguments of the recurrence kernels (recurrence.cuh): one struct for
// every kernel and mode, read by the kernels and by their shared device
// helpers (reduce.cuh).
#pragma once

#include <cstdint>

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

}  // namespace timitseg::crf::cuda_impl
