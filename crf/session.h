// A CRF session: one backend, one CUDA stream, and every buffer the calls
// need, kept across calls and grown for the largest batch seen.
//
// The session owns the workspace (backend memory space) and, for a backend
// with on_device(), the device copies of host inputs and the device outputs
// of run_host(). All of them are timitseg::Buffer (common/buffer.h) grown with
// reserve(): after the first batch of a given size nothing is allocated.
//
// Two ways in:
//   * run_host(): host arrays in, HostResult out, for any backend (what
//     crf::run_host does; crf::run_host is a temporary session).
//   * backward() / viterbi() / log_partition() / gold_score() /
//     boundary_posteriors(): the backend's own calls minus the workspace.
//     Inputs and outputs are in the backend's memory space (device pointers
//     for cuda), so GPU training keeps everything on the device.
//
// Session(backend) runs on the backend's current stream (Backend::stream());
// Session(backend, stream) sets the backend's stream (Backend::set_stream),
// so a backend shared by two sessions follows the one constructed last. Not
// thread-safe: one session per thread.
#pragma once

#include <cstdint>
#include <vector>

#include "common/buffer.h"
#include "crf/backend.h"
#include "crf/host_run.h"

namespace timitseg::crf {

class Session {
 public:
  // On the backend's current stream.
  explicit Session(Backend& backend);
  // stream: a cudaStream_t (nullptr: the default stream); host backends ignore it.
  Session(Backend& backend, void* stream);
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  Backend& backend() { return backend_; }
  void* stream() const { return stream_; }

  // Host arrays in, results on the host (see crf::run_host in crf/host_run.h).
  HostResult run_host(const Dims& dims, const Params& host_params, const int32_t* labels,
                      const HostRunOptions& options = HostRunOptions());

  // Device-resident path: the Backend calls with the session's workspace.
  void log_partition(const Dims& dims, const Params& p, double* log_z);
  void gold_score(const Dims& dims, const Params& p, const int32_t* labels, double* gold);
  void backward(const Dims& dims, const Params& p, const int32_t* labels, double scale, double* log_z, double* gold,
                const Grads& grads);
  // Backend::backward_begin / backward_finish with the session's workspace.
  void backward_begin(const Dims& dims, const Params& p, const int32_t* labels, double scale, double* log_z,
                      double* gold, const Grads& wanted);
  void backward_finish(const Grads& grads);
  void viterbi(const Dims& dims, const Params& p, double* score, int32_t* segments, int32_t* num_segments);
  void boundary_posteriors(const Dims& dims, const Params& p, double* out);

  // crf.phone_bonus decoding, the one recipe (crf/session_decode.cpp): Viterbi
  // on transition + phone_bonus off the diagonal (crf::add_phone_bonus; 0: the
  // transition itself), the parameters untouched.
  // viterbi(): pointers in the backend's memory space; for a device backend
  // p.transition is read back, biased on the host and copied into a session
  // buffer (the stream is synchronized twice).
  void viterbi(const Dims& dims, const Params& p, double phone_bonus, double* score, int32_t* segments,
               int32_t* num_segments);
  // decode_host(): host arrays in; the segments and Viterbi scores with the
  // bonus and, when labels is not nullptr, log Z and the gold score of p itself
  // (the dev loss; without labels log_z is unspecified). With a bonus of 0 one
  // run_host call serves both; otherwise Viterbi runs on the biased copy and the
  // loss takes a second call.
  HostResult decode_host(const Dims& dims, const Params& host_params, const int32_t* labels, double phone_bonus);

  // Forced alignment (Backend::align) with the session's align workspace,
  // pointers in the backend's memory space.
  void align(const Dims& dims, const Params& p, int64_t N, const int32_t* phones, const int32_t* num_phones,
             const int32_t* optional, double* score, int32_t* spans);
  // Host arrays in (phones [B][N], num_phones [B], optional [B][N] or nullptr), score [B] and spans
  // [B][N][2] out, for any backend (copies for cuda). Validates first.
  AlignResult align_host(const Dims& dims, const Params& host_params, int64_t N, const int32_t* phones,
                         const int32_t* num_phones, const int32_t* optional = nullptr);

  // Confidence (Backend::span_marginals, Backend::align_posteriors) with the
  // session's workspaces, pointers in the backend's memory space; and the same
  // on host arrays for any backend (copies for cuda; validates first).
  void span_marginals(const Dims& dims, const Params& p, int64_t Q, const int32_t* queries,
                      const int32_t* num_queries, double* log_z, double* out);
  void align_posteriors(const Dims& dims, const Params& p, int64_t N, const int32_t* phones, const int32_t* num_phones,
                        const int32_t* optional, const int32_t* spans, double* log_z_c, double* out);
  SpanMarginalResult span_marginals_host(const Dims& dims, const Params& host_params, int64_t Q,
                                         const int32_t* queries, const int32_t* num_queries);
  AlignPosteriorResult align_posteriors_host(const Dims& dims, const Params& host_params, int64_t N,
                                             const int32_t* phones, const int32_t* num_phones,
                                             const int32_t* optional, const int32_t* spans);

  // The transcript NLL (Backend::transcript_backward) with the session's
  // transcript workspace, pointers in the backend's memory space; and the same
  // on host arrays for any backend (copies for cuda; validates first).
  // links [B][N]: the phone graph (crf/phone_graph.h; nullptr = the chain of optional).
  void transcript_backward(const Dims& dims, const Params& p, int64_t N, const int32_t* phones,
                           const int32_t* num_phones, const int32_t* optional, const int32_t* links, double scale,
                           double* log_z, double* log_z_c, const Grads& grads);
  TranscriptResult transcript_host(const Dims& dims, const Params& host_params, int64_t N, const int32_t* phones,
                                   const int32_t* num_phones, const int32_t* optional, double scale = 1.0,
                                   const int32_t* links = nullptr);

  // The workspace for these dims (grown when needed); nullptr when the
  // backend needs none.
  void* workspace(const Dims& dims);
  // Bytes held by the session's buffers (workspace, inputs, outputs).
  size_t bytes_reserved() const;

 private:
  Backend& backend_;
  void* stream_;
  Memory mem_;
  Buffer ws_;
  // Device copies of host inputs and device outputs (on_device() backends).
  Buffer cum_, A_, D_, s_, e_, len_, lab_;
  Buffer lz_, gold_, gc_, ga_, gd_, gs_, ge_, vs_, segs_, nseg_, bp_;
  Buffer trans_ws_;  // transcript_backward's workspace
  Buffer align_ws_, ph_, nph_, aspans_, opt_, links_;  // align: workspace, phones [B][N], counts [B], spans [B][N][2], optional [B][N]
  Buffer conf_in_, conf_out_;  // confidence: queries [B][Q][3] or spans [B][N][2]; outputs [B][Q] or [B][N][3]
  Buffer on_, go_;  // onset [B][T][C] and its gradient (when Params::onset is set)
  Buffer bonus_;    // transition [C][C] + phone bonus (viterbi with a bonus on a device backend)
  // Copies host inputs into the device buffers (padding rows zeroed); the device Params.
  Params upload_params(const Dims& dims, const Params& hp);
  // run_host on a host backend: the host arrays directly, no copies.
  HostResult run_on_host_backend(const Dims& dims, const Params& hp, const int32_t* labels, const HostRunOptions& opt);
  // Host scratch: sanitized cum_scores, Viterbi rows and counts.
  std::vector<float> cum_host_, on_host_, bonus_host_;
  std::vector<int32_t> segs_host_, nseg_host_;
};

}  // namespace timitseg::crf
