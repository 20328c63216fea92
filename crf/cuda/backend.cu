// The cuda backend class: dims and pointer checks, device validation, the
// host side of every operation (which kernels, in which order, on the
// backend's stream), and the status read-back that turns a kernel's report
// into one clear error. Kernels: validate.cu, recurrence.cu, recurrence_fast.cu, gold.cu,
// backward.cu, posteriors.cu; shared layout: common.cuh. Design and
// measurements: docs/cuda.md; the math: docs/crf.md.
//
// Design summary:
//   * One thread block per utterance runs a recurrence; the forward (alpha,
//     sigma) and backward (rho, gamma) recurrences are independent of each
//     other, so backward() launches both in one grid of 2B blocks.
//   * Inside a block every output label c is owned by a group of G lanes of one
//     warp; a lane reduces its share of the terms (durations d, or source
//     labels c') and the group combines by xor-shuffles in a fixed pattern.
//   * The last K+1 rows of sigma / gamma (float64) and of cum_scores (float32)
//     are kept in a shared-memory ring, with the transition and duration
//     parameters, when they fit; otherwise the same code reads the full
//     [T+1][C] arrays in global memory.
//   * Log-sum-exp recurrences (log_partition, backward, boundary posteriors)
//     run on the scaled linear-domain kernel of recurrence_fast.cu where it
//     fits (FMAs for the terms, two exps per position and label, exact
//     fallback per entry; log_partition then needs no [T] table); Viterbi and
//     larger dims on the log-domain kernel of recurrence.cu.
//   * All log-space state is float64 and every exp/log is the float64 one:
//     over T = 100000 steps float32 rounding of a log-sum-exp would drift by
//     ~1e-5 and miss the 1e-5 agreement. Gradient sums are float64 too.
//   * Parameter gradients: per (utterance, chunk of positions) partial sums
//     written to workspace, then summed over (b, chunk) in a fixed order by
//     one thread per entry. No float atomics anywhere; the only atomics are
//     integer counts (gold segment counts) and a 64-bit atomicMin that picks
//     the first invalid input for the error message. Two runs on the same
//     input give bitwise identical results.
//   * Padding rows (t > lengths[b]) are never read; their gradient is 0.
//   * Every kernel, memset and copy is queued on the backend's stream
//     (set_stream); a call waits only for that stream (status read-back).
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "common/cuda.h"
#include "crf/cuda/cuda_backend.h"
#include "crf/cuda_knobs.h"
#include "crf/cuda/recurrence.cuh"

namespace timitseg::crf {
namespace cuda_impl {
namespace {

class CudaBackend final : public Backend {
 public:
  CudaBackend() {
    TS_CUDA(cudaGetDevice(&device_));
    TS_CUDA(cudaGetDeviceProperties(&prop_, device_));
    smem_limit_ = prop_.sharedMemPerBlockOptin;
    // The environment knobs (crf/cuda_knobs.h), read once. TIMITSEG_CUDA_LANES
    // (benchmark knob): lanes per label group; results stay deterministic for a
    // given value, but the summation order (hence the last bits) depends on it.
    // TIMITSEG_CUDA_RECURRENCE=exact (test knob) runs log-sum-exp on the
    // log-domain kernel (recurrence.cu) even where the scaled linear-domain one
    // (recurrence_fast.cu) fits; TIMITSEG_CUDA_MARGINALS=exact sums the
    // parameter marginals with one exp per term (marginal_kernel) even where
    // the linear-domain kernel (marginal_fast.cu) fits; both agree to float64
    // rounding. TIMITSEG_CUDA_RING=global keeps the recurrence state in global
    // memory even when the shared-memory ring would fit (the path taken
    // automatically for large K * C, or on GPUs with less shared memory).
    // TIMITSEG_CUDA_CHECKPOINT: the checkpointed backward (docs/crf.md) for a
    // long input (auto: common.cuh's long_input), at every size (always: tests
    // compare it with the full tables at small T) or never.
    const CudaKnobs knobs = cuda_knobs_from_environment();
    lanes_override_ = knobs.lanes;
    fast_enabled_ = knobs.recurrence == CudaRecurrence::fast;
    fast_marginals_ = knobs.marginals == CudaMarginals::linear;
    force_global_ring_ = knobs.ring == CudaRing::global;
    checkpoint_ = knobs.checkpoint;
    TS_CUDA(cudaMallocHost(&status_host_, sizeof(*status_host_)));
  }
  ~CudaBackend() override {
    // Teardown: errors here cannot be reported (a destructor does not throw).
    if (status_host_) (void)cudaFreeHost(status_host_);
    if (deferred_host_) (void)cudaFreeHost(deferred_host_);
    if (deferred_end_) (void)cudaEventDestroy(deferred_end_);
    if (join_) (void)cudaEventDestroy(join_);
    if (fork_) (void)cudaEventDestroy(fork_);
    if (side_) (void)cudaStreamDestroy(side_);
  }
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;
  std::string name() const override { return "cuda"; }
  bool on_device() const override { return true; }
  // Every call already waits for its own work (it reads back the status
  // word); this also covers work the caller queued on the same stream.
  void synchronize() override { TS_CUDA(cudaStreamSynchronize(stream_)); }
  void set_stream(void* stream) override { stream_ = static_cast<cudaStream_t>(stream); }
  void* stream() const override { return stream_; }
  void set_defer_status(bool on) override { defer_ = on; }
  // The deferred call's status check (crf/backend.h), on the stream it was queued on.
  void check_deferred() override {
    if (!deferred_.pending) return;
    const Deferred d = deferred_;
    deferred_.pending = false;
    last_deferred_ = d;  // recheck_deferred reads its word again
    if (d.copied) {  // mark_deferred_end: the word's copy, waited for alone
      TS_CUDA(cudaEventSynchronize(deferred_end_));
      if (*deferred_host_ == kNoError) return;
    }
    check_status_on_its_stream(d);  // an error: the message's values read back as a synchronous call does
  }
  void mark_deferred_end() override {
    if (!deferred_.pending || deferred_.copied) return;
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    TS_CUDA(cudaStreamIsCapturing(stream_, &capturing));
    if (capturing != cudaStreamCaptureStatusNone) return;  // graph nodes: check_deferred waits for the stream
    if (!deferred_end_) {
      TS_CUDA(cudaMallocHost(&deferred_host_, sizeof(*deferred_host_)));
      TS_CUDA(cudaEventCreateWithFlags(&deferred_end_, cudaEventDisableTiming));
    }
    TS_CUDA(cudaMemcpyAsync(deferred_host_, at<char>(deferred_.workspace, deferred_.l.status), sizeof(*deferred_host_),
                            cudaMemcpyDeviceToHost, stream_));
    TS_CUDA(cudaEventRecord(deferred_end_, stream_));
    deferred_.copied = true;
  }
  bool recheck_deferred() override {
    if (!last_deferred_.pending) return false;
    const Deferred d = last_deferred_;
    check_status_on_its_stream(d);
    return true;
  }
  size_t workspace_bytes(const Dims& dims) const override {
    check_dims(dims);
    return make_layout(dims, true, checkpointed(dims)).total;
  }
  // The fast recurrence keeps the forward's state in shared memory: log Z
  // needs no [B][T+1][C] table then.
  size_t log_partition_workspace_bytes(const Dims& dims) const override {
    check_dims(dims);
    return make_layout(dims, !use_fast(static_cast<int>(dims.K), static_cast<int>(dims.C))).total;
  }

  void log_partition(const Dims& dims, const Params& p, double* log_z, void* workspace) override {
    check_dims(dims);
    const bool tables = !use_fast(static_cast<int>(dims.K), static_cast<int>(dims.C));
    const Layout l = begin(dims, p, nullptr, workspace, "log_partition", tables);
    RecArgs a = rec_args(l, p, workspace);
    a.logz_user = log_z;
    a.store = tables ? 1 : 0;  // on the fast kernel no table (the workspace is then the small layout)
    recurrence<false>(l, a, l.B);
    finish(l, p, nullptr, workspace);
  }

  void gold_score(const Dims& dims, const Params& p, const int32_t* labels, double* gold, void* workspace) override {
    if (!labels) throw std::invalid_argument("cuda backend: gold_score needs labels [B][T] (got a null pointer)");
    const Layout l = begin(dims, p, labels, workspace, "gold_score");
    launch_gold(l, p, labels, gold, workspace, stream_);
    finish(l, p, labels, workspace);
  }

  void backward(const Dims& dims, const Params& p, const int32_t* labels, double scale, double* log_z, double* gold,
                const Grads& grads, void* workspace) override {
    backward_begin(dims, p, labels, scale, log_z, gold, grads, workspace);
    backward_finish(grads);
  }

  // Everything up to the tables: validation, gold (side stream), the two
  // recurrences, the parameter marginals when a parameter gradient is wanted.
  void backward_begin(const Dims& dims, const Params& p, const int32_t* labels, double scale, double* log_z,
                      double* gold, const Grads& wanted, void* workspace) override {
    if (!std::isfinite(scale)) throw std::invalid_argument("cuda backend: backward scale must be finite");
    if (split_.pending) throw std::logic_error("cuda backend: backward_begin: the last begun backward is not finished");
    if (wanted.frame_scores && !fuses_frame_grads(dims)) {
      std::ostringstream os;
      os << "cuda backend: backward: frame_scores gradients need T*C float64 in one block's shared memory, T="
         << dims.T << " C=" << dims.C << " needs " << grad_frames_smem_bytes(static_cast<int>(dims.T),
                                                                               static_cast<int>(dims.C))
         << " bytes, the device has " << smem_limit_;
      throw std::invalid_argument(os.str());
    }
    const Layout l = begin(dims, p, labels, workspace, "backward");
    // The gold kernel (B blocks) on a side stream, beside the recurrence
    // (2B blocks, one per SM): forked after the validation, joined before the
    // kernels that read its counts and markers. Its outputs and the status
    // word's integer atomicMin do not depend on the order. The recurrence is
    // launched first: the GPU starts it while the host queues the side
    // stream's work (four calls).
    if (labels) record_fork();
    RecArgs a = rec_args(l, p, workspace);
    a.logz_user = log_z;
    if (l.ck)  // the recurrences' checkpoints; the tables come window by window in backward_finish
      launch_checkpoint_pass(l, a, workspace, smem_limit_, stream_);
    else
      recurrence<false>(l, a, 2 * l.B);
    if (labels) {
      TS_CUDA(cudaStreamWaitEvent(side_, fork_, 0));
      launch_gold(l, p, labels, gold, workspace, side_);
      TS_CUDA(cudaEventRecord(join_, side_));
      TS_CUDA(cudaStreamWaitEvent(stream_, join_, 0));
    }
    const bool marginals = wanted.transition || wanted.duration_bias;
    if (marginals && !l.ck) {
      if (use_fast_marginals(l.K, l.C))
        launch_marginals_fast(l, p, workspace, stream_);
      else
        launch_marginals(l, p, workspace, stream_);
    }
    split_ = Split{true, marginals, wanted.frame_scores != nullptr, l, p, labels, scale, workspace};
  }

  // The gradients into `grads` and the status (finish).
  void backward_finish(const Grads& grads) override {
    if (!split_.pending) throw std::logic_error("cuda backend: backward_finish without backward_begin");
    const Split c = split_;
    split_.pending = false;
    if ((grads.transition || grads.duration_bias) && !c.marginals)
      throw std::logic_error("cuda backend: backward_finish: parameter gradients that backward_begin did not want");
    if (grads.frame_scores && !c.frames)
      throw std::logic_error("cuda backend: backward_finish: frame_scores gradients that backward_begin did not want");
    const Layout& l = c.l;
    const bool want_params = grads.transition || grads.duration_bias || grads.start || grads.end;
    if (l.ck) {  // every window: its tables, then what reads them
      each_window(l, c.p, c.workspace, [&](const Layout& v) {
        if (c.marginals) marginals(v, c.p, c.workspace);
        if (grads.cum_scores) launch_grad_cum(v, c.p, c.labels, c.workspace, c.scale, grads.cum_scores, stream_);
        if (c.p.onset && grads.onset)
          launch_grad_onset(v, c.p, c.labels, c.workspace, c.scale, grads.onset, stream_);
      });
      if (want_params) launch_param_reduce(l, c.p, c.workspace, c.labels != nullptr, c.scale, grads, stream_);
      finish(l, c.p, c.labels, c.workspace);
      return;
    }
    if (want_params) launch_param_reduce(l, c.p, c.workspace, c.labels != nullptr, c.scale, grads, stream_);
    if (grads.cum_scores) launch_grad_cum(l, c.p, c.labels, c.workspace, c.scale, grads.cum_scores, stream_);
    if (grads.frame_scores)
      launch_grad_frames(l, c.p, c.labels, c.workspace, c.scale, grads.frame_scores, stream_);
    if (c.p.onset && grads.onset) launch_grad_onset(l, c.p, c.labels, c.workspace, c.scale, grads.onset, stream_);
    finish(l, c.p, c.labels, c.workspace);
  }

  bool fuses_frame_grads(const Dims& dims) const override {
    return dims.T >= 1 && dims.C >= 1 && dims.T * dims.C <= INT_MAX / 2 && !checkpointed(dims) &&
           grad_frames_smem_bytes(static_cast<int>(dims.T), static_cast<int>(dims.C)) <= smem_limit_;
  }

  void viterbi(const Dims& dims, const Params& p, double* score, int32_t* segments, int32_t* num_segments,
               void* workspace) override {
    if (!score || !segments || !num_segments)
      throw std::invalid_argument("cuda backend: viterbi needs score, segments and num_segments outputs");
    const Layout l = begin(dims, p, nullptr, workspace, "viterbi");
    RecArgs a = rec_args(l, p, workspace);
    a.bp_d = at<int32_t>(workspace, l.bp_d);  // the rho/gamma storage (checkpointed: the windows' region)
    a.bp_c = at<int32_t>(workspace, l.bp_c);
    a.store = l.ck ? 0 : 1;  // checkpointed: no [T+1][C] tables (the ring is in shared memory there)
    a.segtmp = at<int32_t>(workspace, l.segtmp);
    a.vit_score = score;
    a.segments = segments;
    a.nsegs = num_segments;
    recurrence<true>(l, a, l.B);
    finish(l, p, nullptr, workspace);
  }

  size_t align_workspace_bytes(const Dims& dims, int64_t N) const override {
    check_dims(dims);
    check_align_n(dims, N);
    return make_align_layout(dims, N).total;
  }

  void align(const Dims& dims, const Params& p, int64_t N, const int32_t* phones, const int32_t* num_phones,
             const int32_t* optional, double* score, int32_t* spans, void* workspace) override {
    check_dims(dims);
    check_align_n(dims, N);
    const AlignLayout al = make_align_layout(dims, N);
    const Layout l = begin_phones(dims, p, N, "align",
                                  {{phones, "phones"}, {num_phones, "num_phones"}, {score, "score"}, {spans, "spans"}},
                                  al.status, al.zeros, workspace, phones, num_phones, optional);
    check_status(l, p, nullptr, workspace, phones, num_phones, static_cast<int>(N), optional);
    launch_align(l, al, p, static_cast<int>(N), phones, num_phones, optional, workspace, score, spans, stream_);
    TS_CUDA(cudaStreamSynchronize(stream_));
  }

  // Confidence (docs/crf.md "Confidence"; kernels in confidence.cu).
  void span_marginals(const Dims& dims, const Params& p, int64_t Q, const int32_t* queries,
                      const int32_t* num_queries, double* log_z, double* out, void* workspace) override {
    if (!queries || !num_queries || !out)
      throw std::invalid_argument("cuda backend: span_marginals: queries, num_queries and out must not be null");
    if (Q < 1 || dims.B * Q > (1LL << 40))
      throw std::invalid_argument("cuda backend: span_marginals: query stride Q=" + std::to_string(Q) +
                                  " must be >= 1 (and B*Q small enough)");
    const Layout l = begin(dims, p, nullptr, workspace, "span_marginals");
    launch_query_validate(l, p.lengths, static_cast<int>(Q), queries, num_queries,
                          at<unsigned long long>(workspace, l.status), stream_);
    check_status(l, p, nullptr, workspace, queries, num_queries, static_cast<int>(Q));
    RecArgs a = rec_args(l, p, workspace);
    a.logz_user = log_z;
    if (l.ck) {
      launch_checkpoint_pass(l, a, workspace, smem_limit_, stream_);
      each_window(l, p, workspace, [&](const Layout& v) {
        launch_span_marginals(v, p, static_cast<int>(Q), queries, num_queries, workspace, out, stream_);
      });
    } else {
      recurrence<false>(l, a, 2 * l.B);
      launch_span_marginals(l, p, static_cast<int>(Q), queries, num_queries, workspace, out, stream_);
    }
    finish(l, p, nullptr, workspace);
  }

  size_t align_posterior_workspace_bytes(const Dims& dims, int64_t N) const override {
    check_dims(dims);
    check_align_n(dims, N);
    return make_conf_layout(dims, N).total;
  }

  void align_posteriors(const Dims& dims, const Params& p, int64_t N, const int32_t* phones,
                        const int32_t* num_phones, const int32_t* optional, const int32_t* spans, double* log_z_c,
                        double* out, void* workspace) override {
    check_dims(dims);
    check_align_n(dims, N);
    const ConfLayout cl = make_conf_layout(dims, N);
    const Layout l = begin_phones(dims, p, N, "align_posteriors",
                                  {{phones, "phones"}, {num_phones, "num_phones"}, {spans, "spans"}, {out, "out"}},
                                  cl.status, cl.zeros, workspace, phones, num_phones, optional);
    auto* status = at<unsigned long long>(workspace, cl.status);
    check_status(l, p, nullptr, workspace, phones, num_phones, static_cast<int>(N), optional);
    launch_span_validate(l, p.lengths, static_cast<int>(N), num_phones, spans, status, stream_);
    check_status(l, p, nullptr, workspace, spans, num_phones, static_cast<int>(N));
    launch_align_posteriors(l, cl, p, static_cast<int>(N), phones, num_phones, optional, spans, workspace, log_z_c,
                            out, stream_);
    TS_CUDA(cudaStreamSynchronize(stream_));
  }

  // Transcript NLL: the backward without labels, then the constrained part (confidence.cu) in the workspace after its.
  size_t transcript_workspace_bytes(const Dims& dims, int64_t N) const override {
    check_align_n(dims, N);
    return align256(workspace_bytes(dims)) + make_transcript_layout(dims, N).total;
  }
  void transcript_backward(const Dims& dims, const Params& p, int64_t N, const int32_t* phones, const int32_t* num_phones,
                           const int32_t* optional, const int32_t* links, double scale, double* log_z, double* log_z_c,
                           const Grads& grads, void* workspace) override {
    if (grads.frame_scores) throw std::invalid_argument("cuda backend: transcript_backward: frame_scores must be null");
    check_dims(dims), check_align_n(dims, N);
    const TranscriptLayout tl = make_transcript_layout(dims, N);
    void* tws = workspace ? at<char>(workspace, align256(workspace_bytes(dims))) : nullptr;
    const Layout l = begin_phones(dims, p, N, "transcript_backward", {{phones, "phones"}, {num_phones, "num_phones"}},
                                  tl.status, tl.zeros, tws, phones, num_phones, optional);
    check_status(l, p, nullptr, tws, phones, num_phones, static_cast<int>(N), optional);
    struct Keep { bool& f; bool v; ~Keep() { f = v; } } keep{defer_, std::exchange(defer_, false)};  // read now
    // The constrained part reads the inputs only: on side_, beside the backward without labels,
    // joined (however backward leaves) before its marginals are subtracted from backward's gradients.
    record_fork();
    TS_CUDA(cudaStreamWaitEvent(side_, fork_, 0));
    launch_transcript_marginals(l, tl, p, static_cast<int>(N), phones, num_phones, optional, links, tws, log_z_c, side_);
    TS_CUDA(cudaEventRecord(join_, side_));
    {
      struct Join { cudaStream_t s; cudaEvent_t e; ~Join() { (void)cudaStreamWaitEvent(s, e, 0); } } j{stream_, join_};
      backward(dims, p, nullptr, scale, log_z, nullptr, grads, workspace);
    }
    launch_transcript_grads(l, tl, p, scale, tws, grads, stream_);
    check_status(l, p, nullptr, tws);
  }

  void boundary_posteriors(const Dims& dims, const Params& p, double* out, void* workspace) override {
    if (!out) throw std::invalid_argument("cuda backend: boundary_posteriors output is a null pointer");
    const Layout l = begin(dims, p, nullptr, workspace, "boundary_posteriors");
    RecArgs a = rec_args(l, p, workspace);
    if (l.ck) {
      launch_checkpoint_pass(l, a, workspace, smem_limit_, stream_);
      each_window(l, p, workspace, [&](const Layout& v) { launch_boundary(v, p, workspace, out, stream_); });
    } else {
      recurrence<false>(l, a, 2 * l.B);
      launch_boundary(l, p, workspace, out, stream_);
    }
    finish(l, p, nullptr, workspace);
  }

 private:
  int device_ = 0;
  cudaDeviceProp prop_{};
  size_t smem_limit_ = 48 * 1024;
  int lanes_override_ = 0;
  cudaStream_t stream_ = nullptr;  // every kernel, memset and copy is queued here
  bool force_global_ring_ = false;
  bool fast_enabled_ = true;  // TIMITSEG_CUDA_RECURRENCE=exact turns it off
  bool fast_marginals_ = true;  // TIMITSEG_CUDA_MARGINALS=exact turns it off
  CudaCheckpoint checkpoint_ = CudaCheckpoint::automatic;  // TIMITSEG_CUDA_CHECKPOINT (unset: automatic), read once
  bool defer_ = false;  // set_defer_status
  // The call whose status word is still unread (check_deferred).
  struct Deferred {
    bool pending = false;
    Layout l;
    Params p;
    const int32_t* labels = nullptr;
    void* workspace = nullptr;
    cudaStream_t stream = nullptr;
    bool copied = false;  // mark_deferred_end queued the word's copy into deferred_host_
  } deferred_, last_deferred_;  // last_deferred_: the last one check_deferred read (pending: it exists)
  // check_status of a deferred call on the stream it was queued on; the handle's stream restored after.
  void check_status_on_its_stream(const Deferred& d) {
    cudaStream_t const now = stream_;
    stream_ = d.stream;
    try {
      check_status(d.l, d.p, d.labels, d.workspace);
    } catch (...) {
      stream_ = now;
      throw;
    }
    stream_ = now;
  }
  // The backward_begin whose backward_finish is still to come.
  struct Split {
    bool pending = false;
    bool marginals = false;  // the parameter marginals were queued
    bool frames = false;     // frame_scores gradients were wanted
    Layout l;
    Params p;
    const int32_t* labels = nullptr;
    double scale = 1.0;
    void* workspace = nullptr;
  } split_;
  unsigned long long* status_host_ = nullptr;  // pinned: the status word's copy (check_status)
  unsigned long long* deferred_host_ = nullptr;  // pinned: a deferred call's word (mark_deferred_end)
  cudaEvent_t deferred_end_ = nullptr;           // recorded after that copy
  cudaStream_t side_ = nullptr;  // backward's gold kernel, the transcript's constrained part; forked from stream_
  cudaEvent_t fork_ = nullptr, join_ = nullptr;

  // Records fork_ after the work queued on stream_ so far, for side_ to wait
  // on (the side stream and its events are created on first use).
  void record_fork() {
    if (!side_) {
      TS_CUDA(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
      TS_CUDA(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
      TS_CUDA(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
    }
    TS_CUDA(cudaEventRecord(fork_, stream_));
  }

  // Log-sum-exp recurrences run on the fast kernel when its shared memory fits.
  bool use_fast(int K, int C) const {
    return fast_enabled_ && !force_global_ring_ && lse_fast_fits(K, C, lanes(K, C), smem_limit_);
  }
  // The checkpointed backward (common.cuh): on the fast recurrence only, for a
  // long input (long_input) or as TIMITSEG_CUDA_CHECKPOINT says.
  bool checkpointed(const Dims& d) const {
    if (!use_fast(static_cast<int>(d.K), static_cast<int>(d.C)) || checkpoint_ == CudaCheckpoint::never) return false;
    return checkpoint_ == CudaCheckpoint::always || long_input(d);
  }
  // Each window of a checkpointed layout recomputed (after launch_checkpoint_pass), then fn(its layout).
  template <class F>
  void each_window(const Layout& l, const Params& p, void* ws, F&& fn) {
    const RecArgs a = rec_args(l, p, ws);
    for (int w = 0; w < checkpoint_windows(l); ++w) fn(launch_checkpoint_window(l, a, ws, w, smem_limit_, stream_));
  }
  void marginals(const Layout& l, const Params& p, void* ws) {
    if (use_fast_marginals(l.K, l.C))
      launch_marginals_fast(l, p, ws, stream_);
    else
      launch_marginals(l, p, ws, stream_);
  }
  // Parameter marginals in the linear domain where its shared memory fits
  // (the exact recurrence knob and the global ring select the exact ones too).
  bool use_fast_marginals(int K, int C) const {
    return fast_marginals_ && fast_enabled_ && !force_global_ring_ && marginal_fast_smem_bytes(K, C) <= smem_limit_;
  }
  // Lanes per label group. Measured on an H200 (docs/cuda.md): 8 lanes beat
  // 16 and 32 for C=39, K in {1,30,64}.
  int lanes(int K, int C) const {
    const int widest = std::max(K, C);
    return lanes_override_ ? lanes_override_ : (widest <= 64 ? 8 : (widest <= 256 ? 16 : 32));
  }

  // The start of align and align_posteriors (their own workspace layouts, at
  // status_off and zeros_off): the pointers that must not be null (the CRF's
  // inputs, `ptrs`, the workspace), then the status word and the zero row set
  // and the scores' and phones' validation queued; no host wait. Returns the
  // Layout that check_status reads.
  Layout begin_phones(const Dims& dims, const Params& p, int64_t N, const char* what,
                      std::initializer_list<std::pair<const void*, const char*>> ptrs, size_t status_off,
                      size_t zeros_off, void* workspace, const int32_t* phones, const int32_t* num_phones,
                      const int32_t* optional) {
    auto need = [&](const void* ptr, const char* name) {
      if (!ptr)
        throw std::invalid_argument(std::string("cuda backend: ") + what + ": " + name + " is a null pointer");
    };
    need(p.cum_scores, "cum_scores");
    need(p.transition, "transition");
    need(p.duration_bias, "duration_bias");
    need(p.lengths, "lengths");
    for (const auto& [ptr, name] : ptrs) need(ptr, name);
    need(workspace, "workspace");
    Layout l;
    l.B = static_cast<int>(dims.B);
    l.T = static_cast<int>(dims.T);
    l.K = static_cast<int>(dims.K);
    l.C = static_cast<int>(dims.C);
    l.status = status_off;
    l.zeros = zeros_off;
    auto* status = at<unsigned long long>(workspace, status_off);
    TS_CUDA(cudaSetDevice(device_));
    TS_CUDA(cudaMemsetAsync(status, 0xff, sizeof(unsigned long long), stream_));
    TS_CUDA(cudaMemsetAsync(at<char>(workspace, zeros_off), 0, sizeof(float) * l.C, stream_));
    launch_validate(l, p, nullptr, status, stream_);
    launch_align_validate(l.B, static_cast<int>(N), l.C, phones, num_phones, optional, status, stream_);
    return l;
  }

  // Checks dims and pointers and queues the validation of every input on the
  // device. No host wait here: every kernel queued after it returns at once
  // when it reported an invalid input (input_invalid, common.cuh), so nothing
  // is written, and finish() reads the status once and throws.
  // tables: the workspace holds the [T] tables (make_layout); false only for
  // log_partition on the fast recurrence.
  Layout begin(const Dims& dims, const Params& p, const int32_t* labels, void* workspace, const char* what,
               bool tables = true) {
    check_dims(dims);
    if (deferred_.pending)
      throw std::logic_error(std::string("cuda backend: ") + what + ": a deferred status is unread (check_deferred)");
    if (split_.pending)
      throw std::logic_error(std::string("cuda backend: ") + what + ": a backward_begin is not finished");
    auto need = [&](const void* ptr, const char* name) {
      if (!ptr) throw std::invalid_argument(std::string("cuda backend: ") + what + ": " + name + " is a null pointer");
    };
    need(p.cum_scores, "cum_scores");
    need(p.transition, "transition");
    need(p.duration_bias, "duration_bias");
    need(p.lengths, "lengths");
    need(workspace, "workspace");
    const Layout l = make_layout(dims, tables, tables && checkpointed(dims));
    TS_CUDA(cudaSetDevice(device_));
    TS_CUDA(cudaMemsetAsync(at<char>(workspace, l.status), 0xff, sizeof(unsigned long long), stream_));
    TS_CUDA(cudaMemsetAsync(at<char>(workspace, l.zeros), 0, sizeof(float) * l.C, stream_));
    launch_validate(l, p, labels, at<unsigned long long>(workspace, l.status), stream_);
    return l;
  }

  // Waits for the queued work and throws if a kernel flagged a problem.
  // Deferred (set_defer_status): records the call for check_deferred instead.
  void finish(const Layout& l, const Params& p, const int32_t* labels, void* workspace) {
    if (defer_) {
      deferred_ = Deferred{true, l, p, labels, workspace, stream_, false};
      return;
    }
    check_status(l, p, labels, workspace);
  }

  RecArgs rec_args(const Layout& l, const Params& p, void* ws) const {
    RecArgs a{};
    a.B = l.B;
    a.T = l.T;
    a.K = l.K;
    a.C = l.C;
    a.store = 1;
    a.G = lanes(l.K, l.C);
    a.cum = p.cum_scores;
    a.A = p.transition;
    a.D = p.duration_bias;
    a.s = start_ptr(p, ws, l);
    a.e = end_ptr(p, ws, l);
    a.lengths = p.lengths;
    a.onset = p.onset;
    a.alpha = at<double>(ws, l.alpha);
    a.sigma = at<double>(ws, l.sigma);
    a.rho = at<double>(ws, l.rho);
    a.gamma = at<double>(ws, l.gamma);
    a.logz = at<double>(ws, l.logz);
    a.logz_rev = at<double>(ws, l.logz_rev);
    a.status = at<unsigned long long>(ws, l.status);
    return a;
  }

  // Log-sum-exp (kMax false) on the fast kernel where it fits, else, and for
  // Viterbi, the log-domain kernel (which always writes the tables).
  template <bool kMax>
  void recurrence(const Layout& l, RecArgs& a, int blocks) {
    if (!kMax && use_fast(l.K, l.C)) {
      launch_lse_fast(l, a, blocks, smem_limit_, stream_);
      return;
    }
    if (!kMax && !a.store) throw std::logic_error("cuda backend: a table-free forward needs the fast recurrence");
    launch_recurrence<kMax>(l, a, blocks, smem_limit_, force_global_ring_, stream_);
  }

  // Reads the status word (a wait) and throws the message of the input it names (status.cu).
  void check_status(const Layout& l, const Params& p, const int32_t* labels, void* ws,
                    const int32_t* phones = nullptr, const int32_t* num_phones = nullptr, int N = 0,
                    const int32_t* optional = nullptr) {
    check_status_word(stream_, status_host_, l, p, labels, ws, phones, num_phones, N, optional);
  }
};

}  // namespace
}  // namespace cuda_impl

std::unique_ptr<Backend> make_cuda_backend() {
  timitseg::cuda::require_device("; use --backend cpu or reference");
  return std::make_unique<cuda_impl::CudaBackend>();
}

}  // namespace timitseg::crf
