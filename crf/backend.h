// The semi-Markov CRF interface shared by every backend (reference, cpu, cuda).
//
// The math is docs/crf.md (the semi-CRF specification), followed to the letter. Shapes are
// written [B][T][C] row-major; T is the padded length, each utterance b has a
// valid length lengths[b] in [1, T]; cum_scores has T+1 rows (cum[0] = 0).
//
// Design (after flashlight's sequence criteria): raw pointers in the backend's
// memory space (host for reference/cpu, CUDA device for cuda), sizes explicit,
// scratch memory supplied by the caller (workspace_bytes), no hidden allocation
// in the hot calls. Backends throw std::runtime_error / std::invalid_argument
// with a clear message on bad input; they never return NaN for finite input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace timitseg::crf {

struct Dims {
  int64_t B = 0;  // batch size
  int64_t T = 0;  // padded number of frames (cum_scores has T+1 rows)
  int64_t K = 0;  // maximum segment duration
  int64_t C = 0;  // number of labels
};

// Inputs. All float32, in the backend's memory space.
struct Params {
  const float* cum_scores = nullptr;     // [B][T+1][C]; rows > lengths[b] are ignored
  const float* transition = nullptr;     // [C][C]   A[from c'][to c]
  const float* duration_bias = nullptr;  // [K][C]   D[d-1][c]
  const float* start = nullptr;          // [C]      nullptr means zeros
  const float* end = nullptr;            // [C]      nullptr means zeros
  const int32_t* lengths = nullptr;      // [B]      each in [1, T]
  // Onset scores o[b][t][c] (docs/crf.md): added once at the first frame of
  // every segment with label c starting at t. Frames t >= lengths[b] are never
  // read. nullptr = none (every result bitwise as without the term).
  const float* onset = nullptr;          // [B][T][C]
};

// Gradient outputs, float32, overwritten (never accumulated into). A nullptr
// member means "not wanted". Rows of grad cum_scores past lengths[b] are 0.
struct Grads {
  float* cum_scores = nullptr;     // [B][T+1][C]
  float* transition = nullptr;     // [C][C]
  float* duration_bias = nullptr;  // [K][C]
  float* start = nullptr;          // [C]
  float* end = nullptr;            // [C]
  float* onset = nullptr;          // [B][T][C] (only when Params::onset is set; padding frames written 0)
  // [B][T][C]: the gradient of the frame scores x whose centered cumsum
  // (crf/cumsum.h) is Params::cum_scores, i.e. centered_cumsum_backward of the
  // cum_scores gradient, bitwise; padding frames 0. Only where the backend's
  // fuses_frame_grads(dims) is true (backward throws std::invalid_argument
  // otherwise); cum_scores may be nullptr then.
  float* frame_scores = nullptr;
};

// One decoded segment. Rows of `viterbi_segments` in crf replay are
// (batch, start, duration, label).
struct Segment {
  int32_t batch = 0;
  int32_t start = 0;
  int32_t duration = 0;
  int32_t label = 0;
  bool operator==(const Segment& o) const {
    return batch == o.batch && start == o.start && duration == o.duration && label == o.label;
  }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // True when every pointer passed to this backend is a CUDA device pointer.
  virtual bool on_device() const = 0;

  // Bytes of scratch memory (same memory space as the data) that the calls
  // below need for these dims. The caller allocates it once and reuses it.
  virtual size_t workspace_bytes(const Dims& dims) const = 0;
  // Bytes log_partition alone needs (<= workspace_bytes; a backend whose
  // forward keeps no [T] tables returns less: cuda, docs/cuda.md).
  virtual size_t log_partition_workspace_bytes(const Dims& dims) const { return workspace_bytes(dims); }

  // log Z per utterance. log_z: [B] float64 (backend memory space).
  virtual void log_partition(const Dims& dims, const Params& p, double* log_z, void* workspace) = 0;

  // Score of the gold segmentation derived from frame labels [B][T] int32
  // (maximal runs split into pieces of at most K, spec "Gold segmentation").
  // Frames t >= lengths[b] are ignored. gold: [B] float64.
  virtual void gold_score(const Dims& dims, const Params& p, const int32_t* labels, double* gold,
                          void* workspace) = 0;

  // Forward + backward. Writes log_z [B] (float64) and, when labels != nullptr,
  // gold [B] (float64, may be nullptr if not wanted). Gradients are those of
  //     sum_b scale * NLL_b    (labels given; NLL_b = log Z_b - gold_b)
  //     sum_b scale * log Z_b  (labels == nullptr)
  // so a mean-NLL loss passes scale = 1/B.
  virtual void backward(const Dims& dims, const Params& p, const int32_t* labels, double scale,
                        double* log_z, double* gold, const Grads& grads, void* workspace) = 0;

  // backward() in two calls, for a caller that makes its gradient buffers
  // while the device runs the recurrences (the C API's nll, capi/crf_fast.cpp):
  // backward_begin queues the work that writes log_z and gold and keeps the
  // call; `wanted` marks the gradients that backward_finish will be given
  // (only which members are non-null is read, not the pointers). Then
  // backward_finish(grads), whose non-null members are among those wanted,
  // writes them and reads the status as backward() does (set_defer_status
  // applies). Between the two no other call is made on the backend except
  // backward_finish, with Grads{} to drop a begun call (its status is still
  // read). backward() is backward_begin + backward_finish. The default runs
  // the whole backward() inside backward_finish (host backends compute in the
  // call anyway).
  virtual void backward_begin(const Dims& dims, const Params& p, const int32_t* labels, double scale, double* log_z,
                              double* gold, const Grads& wanted, void* workspace);
  virtual void backward_finish(const Grads& grads);
  // True when backward computes Grads::frame_scores itself for these dims
  // (cuda: when an utterance's [T][C] float64 fits a block's shared memory).
  virtual bool fuses_frame_grads(const Dims& dims) const {
    (void)dims;
    return false;
  }

  // Viterbi decode. score: [B] float64. Segments are written per utterance:
  // segments [B][T][3] int32 rows (start, duration, label) in time order,
  // num_segments [B] int32. Ties go to the smallest d, then the smallest label.
  virtual void viterbi(const Dims& dims, const Params& p, double* score, int32_t* segments,
                       int32_t* num_segments, void* workspace) = 0;

  // Forced alignment (constrained Viterbi, docs/crf.md "Forced alignment"):
  // utterance b's phone sequence is phones[b][0..num_phones[b]) ([B][N]
  // int32, labels in [0, C); num_phones[b] in [1, N]); each phone gets a span
  // of >= 1 frames, in order, covering [0, lengths[b]); a phone longer than K
  // is scored as the loss scores a gold run (pieces of K, then the remainder).
  // optional [B][N] int32 (nullptr = none): 1 marks a phone that may be
  // skipped (0 frames; an optional silence between words); never two
  // optional phones in a row, never every phone optional.
  // Outputs: score [B] float64 (the best alignment's Score), spans [B][N][2]
  // int32 rows (start, duration) per phone, duration 0 for a skipped phone
  // (start = where it would be). An infeasible utterance (more non-optional
  // phones than frames, or no alignment of finite score because of -inf
  // parameters) gets score -inf and spans (0, 0); it is not an error. Rows
  // past num_phones[b] are written (0, 0). Workspace: align_workspace_bytes.
  virtual size_t align_workspace_bytes(const Dims& dims, int64_t N) const = 0;
  virtual void align(const Dims& dims, const Params& p, int64_t N, const int32_t* phones, const int32_t* num_phones,
                     const int32_t* optional, double* score, int32_t* spans, void* workspace) = 0;

  // Confidence (docs/crf.md "Confidence"). Unconstrained span marginals:
  // queries [B][Q][3] int32 rows (start, duration, label), num_queries [B] in
  // [0, Q]; out [B][Q] float64 = P(the segmentation holds the span's pieces:
  // [start, start+duration) with label, cut into pieces of K then the
  // remainder, in a row), i.e. the segment marginal for duration <= K. A row
  // of duration 0 (a skipped phone) and rows past num_queries[b] get 0.
  // log_z [B] (nullptr = not wanted). Workspace: workspace_bytes(dims).
  // An utterance with log Z = -inf is an error, as in backward().
  virtual void span_marginals(const Dims& dims, const Params& p, int64_t Q, const int32_t* queries,
                              const int32_t* num_queries, double* log_z, double* out, void* workspace) = 0;

  // Constrained forward-backward under the transcript (align's phone inputs):
  // for each phone n and its query span spans[b][n] = (s, r) ([B][N][2], e.g.
  // align's output), out [B][N][3] float64 =
  //   (P_c(phone n occupies [s', e') with |s'-s| <= 1, |e'-e| <= 1)   = boundary_confidence,
  //    P_c(phone n starts at s' with |s'-s| <= 1),  P_c(phone n ends at e' with |e'-e| <= 1))
  // with e = s + r; for r = 0 all three are P_c(phone n is skipped). log_z_c [B]
  // (nullptr = not wanted) = log Z_c, -inf for an infeasible utterance (then
  // out is 0; not an error). Rows past num_phones[b] are 0. Workspace:
  // align_posterior_workspace_bytes (the cpu backend, like align, keeps
  // (T+1) N x 32 bytes per thread; the caller checks align_posterior_table_bytes
  // against its memory limit first, docs/align.md).
  virtual size_t align_posterior_workspace_bytes(const Dims& dims, int64_t N) const = 0;
  virtual void align_posteriors(const Dims& dims, const Params& p, int64_t N, const int32_t* phones,
                                const int32_t* num_phones, const int32_t* optional, const int32_t* spans,
                                double* log_z_c, double* out, void* workspace) = 0;

  // Transcript NLL (docs/crf.md "Training from transcripts"): utterance b's
  // phone sequence phones[b][0..num_phones[b]) ([B][N] int32, labels in
  // [0,C)), optional [B][N] int32 (nullptr = none; the rules of align()),
  // links [B][N] int32 (nullptr = the chain of `optional`; else the phone graph
  // of crf/phone_graph.h, alternatives included, and optional must be nullptr).
  // Writes log_z [B] and log_z_c [B] (float64, backend memory space) and the
  // gradients (Grads members overwritten; nullptr = not wanted;
  // Grads::frame_scores must be nullptr) of sum_b scale * (log Z_b - log Z_c_b).
  // An utterance with log Z_c = -inf (or log Z = -inf) throws
  // std::runtime_error naming the utterance (callers filter first with
  // transcript_feasible()); the outputs are unspecified then.
  // Workspace: transcript_workspace_bytes(dims, N).
  virtual size_t transcript_workspace_bytes(const Dims& dims, int64_t N) const = 0;
  virtual void transcript_backward(const Dims& dims, const Params& p, int64_t N, const int32_t* phones,
                                   const int32_t* num_phones, const int32_t* optional, const int32_t* links,
                                   double scale, double* log_z, double* log_z_c, const Grads& grads,
                                   void* workspace) = 0;

  // Posterior probability that a segment ends at frame boundary t, for
  // t = 1..lengths[b]; out: [B][T+1] float64, entry 0 and t > length are 0.
  // (P(end at length) = 1.)
  virtual void boundary_posteriors(const Dims& dims, const Params& p, double* out, void* workspace) = 0;

  // Blocks until all work queued by the calls above has finished (cuda:
  // cudaStreamSynchronize on the backend's stream). Host backends finish
  // inside each call, so the default does nothing. `bench crf` calls it before
  // reading the clock.
  virtual void synchronize() {}

  // The CUDA stream (a cudaStream_t passed as void*; nullptr = the default
  // stream) on which the cuda backend queues every kernel, memset and copy.
  // Host backends ignore it.
  virtual void set_stream(void* stream) { (void)stream; }
  // The stream set last (nullptr for host backends and the default stream).
  virtual void* stream() const { return nullptr; }

  // Deferred status (cuda): while set_defer_status(true) is in effect, a call
  // that reads its status word at the end (log_partition, gold_score,
  // backward, viterbi, boundary_posteriors, span_marginals) returns once its
  // work is queued, without waiting; check_deferred() then waits for that
  // stream, reads the word and throws what the call would have thrown (the
  // same message). Until then its workspace's status word is in use: the
  // caller runs check_deferred() before any other call (those listed throw
  // std::logic_error otherwise). One call at a time is pending. Host backends report inside
  // each call: both are no-ops there.
  virtual void set_defer_status(bool on) { (void)on; }
  virtual void check_deferred() {}
  // The pending deferred call's end (cuda): queues a copy of its status word
  // into pinned memory and an event on the current stream, after the work
  // queued there so far (the caller's tail of the call included), so that
  // check_deferred() waits for that event only, not for whatever was queued
  // on the stream since (a training step's next layers), when the word reads
  // OK. Not while the stream is being captured into a CUDA graph (the check
  // then waits for the stream). No-op without a pending call, and on hosts.
  virtual void mark_deferred_end() {}
  // Re-reads the status word of the last call check_deferred() checked and
  // throws what check_deferred() would throw for it now: for a call captured
  // in a CUDA graph, whose every replay writes that word again (the C API's
  // timitseg_crf_check_again). False when no deferred call was checked yet
  // (host backends: always). Valid until another call writes the word.
  virtual bool recheck_deferred() { return false; }

 private:
  // The default backward_begin's call, run by backward_finish.
  struct BegunBackward {
    bool pending = false;
    Dims dims;
    Params p;
    const int32_t* labels = nullptr;
    double scale = 1.0;
    double* log_z = nullptr;
    double* gold = nullptr;
    void* workspace = nullptr;
  } begun_;
};

// Bytes of the constrained forward-backward's tables for one utterance of
// T+1 frames and N phones (four float64 tables of (T+1) N).
inline double align_posterior_table_bytes(int64_t T, int64_t N) {
  return 32.0 * static_cast<double>(T + 1) * static_cast<double>(N);
}

}  // namespace timitseg::crf
