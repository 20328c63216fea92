// Runs a backend on host arrays whatever its memory space (copies to and from
// the device for cuda). Used by `crf replay`, `bench crf`, tests and training
// on the CPU. Vectors are resized by the callee. Each runner is a temporary
// crf::Session (crf/session.h, which does the same with buffers kept across
// calls); they are defined beside the session's calls (crf/session*.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "crf/backend.h"

namespace timitseg::crf {

struct HostResult {
  std::vector<double> log_z;                    // [B]
  std::vector<double> gold;                     // [B] (labels given)
  std::vector<double> viterbi_score;            // [B]
  std::vector<Segment> segments;                // all utterances, batch-major
  std::vector<float> grad_cum_scores;           // [B][T+1][C] (labels given)
  std::vector<float> grad_transition;           // [C][C]
  std::vector<float> grad_duration_bias;        // [K][C]
  std::vector<float> grad_start;                // [C]
  std::vector<float> grad_end;                  // [C]
  std::vector<float> grad_onset;                // [B][T][C] (when Params::onset is set)
  std::vector<double> boundary_posteriors;      // [B][T+1] (when requested)
};

struct HostRunOptions {
  bool gradients = true;            // run backward(): log_z, gold (labels given) and all grads
  bool viterbi = true;              // run viterbi(): viterbi_score, segments
  bool boundary_posteriors = false; // run boundary_posteriors()
  double scale = 1.0;               // gradients of sum_b scale * NLL_b (or log Z_b without labels)
};

// Validates the host inputs (validate_host), then runs the requested
// operations. `labels` [B][T] may be nullptr: then gold is empty and the
// gradients are those of sum_b scale * log Z_b. log_z is always filled
// (from backward() or, when gradients are off, log_partition()).
// For a backend with on_device() the inputs are copied to device memory,
// results copied back; device memory is freed on every path (RAII).
// A thin wrapper: Session(backend).run_host(...) with a temporary session.
HostResult run_host(Backend& backend, const Dims& dims, const Params& host_params, const int32_t* labels,
                    const HostRunOptions& options = HostRunOptions());
// Forced alignment on host arrays for any backend (crf/session.h does the
// same with buffers kept across calls). phones [B][N], num_phones [B].
// What crf::posterior_boundaries did (crf/posterior_boundaries.h), summed over calls.
struct PosteriorBoundaryCount {
  int64_t utterances = 0;  // utterances whose boundaries were decided from the posteriors
  int64_t boundaries = 0;  // their boundaries (kept phones after the first)
  int64_t moved = 0;       // of them, at another frame than the constrained Viterbi's
  int64_t moved_frames = 0;  // the moves' signed sum (posterior - Viterbi, frames)
  int64_t windowed = 0;    // of the utterances, decided by windows of the transcript (tables over the limit)
  int64_t over_limit = 0;  // utterances left with the Viterbi boundaries: even a window over the memory limit
  int64_t first_over_limit = -1;  // the first such utterance's index in its batch (-1: none)
  double seconds = 0.0;    // wall time of the step (summed over the batches)
  int64_t between_frames = 0;  // of the boundaries, placed between two frames (offset != 0; rule 18)
  double offset_abs_sum = 0.0;  // the offsets' absolute sum (frames): its mean over `boundaries` is the mean |offset|
  void add(const PosteriorBoundaryCount& o);
};
struct AlignResult {
  std::vector<double> score;   // [B], -inf for an infeasible utterance
  std::vector<int32_t> spans;  // [B][N][2] (start, duration) per phone
  PosteriorBoundaryCount posterior;  // filled when the boundaries came from the posteriors
  // [B][N] each phone's start between frames: spans' start + start_offset frames, |offset| <= 1/2
  // (crf/posterior_boundaries.h, docs/crf.md "Between frames"); empty: on the frames (every offset 0).
  std::vector<double> start_offset;
};
AlignResult align_host(Backend& backend, const Dims& dims, const Params& host_params, int64_t N,
                       const int32_t* phones, const int32_t* num_phones, const int32_t* optional = nullptr);
// Confidence on host arrays for any backend (copies for cuda): span
// marginals [B][Q] and log Z [B]; constrained posteriors [B][N][3] and log Z_c [B].
struct SpanMarginalResult {
  std::vector<double> log_z;     // [B]
  std::vector<double> marginal;  // [B][Q]
};
SpanMarginalResult span_marginals_host(Backend& backend, const Dims& dims, const Params& host_params, int64_t Q,
                                       const int32_t* queries, const int32_t* num_queries);
struct AlignPosteriorResult {
  std::vector<double> log_z_c;    // [B], -inf for an infeasible utterance
  std::vector<double> posterior;  // [B][N][3]
};
AlignPosteriorResult align_posteriors_host(Backend& backend, const Dims& dims, const Params& host_params, int64_t N,
                                           const int32_t* phones, const int32_t* num_phones, const int32_t* optional,
                                           const int32_t* spans);
// The transcript NLL on host arrays for any backend (copies for cuda;
// crf/session.h keeps the buffers across calls): log Z, log Z_c [B] and the
// gradients of sum_b scale * (log Z_b - log Z_c_b) (grad_onset only with
// Params::onset). Validates first; throws as Backend::transcript_backward.
struct TranscriptResult {
  std::vector<double> log_z, log_z_c;  // [B]
  std::vector<float> grad_cum_scores, grad_transition, grad_duration_bias, grad_start, grad_end, grad_onset;
};
TranscriptResult transcript_host(Backend& backend, const Dims& dims, const Params& host_params, int64_t N,
                                 const int32_t* phones, const int32_t* num_phones, const int32_t* optional,
                                 double scale = 1.0, const int32_t* links = nullptr);

}  // namespace timitseg::crf
