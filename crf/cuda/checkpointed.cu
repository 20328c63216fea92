// The host side of the checkpointed backward (docs/crf.md "The backward in
// bounded memory (checkpointed)"): the full run of both recurrences that keeps
// their state every W positions and no table, then one window of P blocks at a
// time recomputed from its checkpoints into the window's tables, which the
// callers' table readers (marginals, gradients, posteriors) consume before the
// next window. Layout: common.cuh (make_layout with ck); device side:
// checkpoint.cuh and recurrence_fast.cu.
#include <algorithm>

#include "crf/cuda/recurrence.cuh"

namespace timitseg::crf::cuda_impl {
namespace {

void set_checkpoints(const Layout& l, RecArgs& a, void* ws) {
  a.ck_W = l.W;
  a.ck_nblk = l.nblk;
  a.ck_P = l.P;
  a.ck_rows = l.trows;
  a.ckpt = at<double>(ws, l.ckpt);
}

}  // namespace

void launch_checkpoint_pass(const Layout& l, RecArgs a, void* ws, size_t smem_limit, cudaStream_t stream) {
  set_checkpoints(l, a, ws);
  a.store = 0;
  a.ck_mode = kCkSave;
  a.edge = at<double>(ws, l.edge);
  launch_lse_fast(l, a, 2 * l.B, smem_limit, stream);
}

int checkpoint_windows(const Layout& l) { return (l.nblk + l.P - 1) / l.P; }

Layout launch_checkpoint_window(const Layout& l, RecArgs a, void* ws, int w, size_t smem_limit, cudaStream_t stream) {
  Layout v = l;
  v.t0 = w * l.P * l.W;
  v.r0 = v.t0;
  v.r1 = std::min(l.T + 1, v.t0 + l.P * l.W);
  set_checkpoints(l, a, ws);
  a.store = 1;
  a.ck_mode = kCkResume;
  a.ck_g0 = w * l.P;
  a.ck_t0 = v.t0;
  a.edge = nullptr;
  a.logz_user = nullptr;
  launch_lse_fast(l, a, 2 * l.B * l.P, smem_limit, stream);
  return v;
}

}  // namespace timitseg::crf::cuda_impl
