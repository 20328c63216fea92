// The reference backend: float64 throughout, the plainest possible code,
// O(T K C^2) per utterance (no factorization, no tricks). It is the oracle for
// every faster backend (tests/crf/). Besides the Backend object (float32
// Params, converted to float64 on entry), the float64 entry points below take
// float64 inputs so finite-difference tests of the whole
// cumsum + CRF + penalty stack can run in float64 end to end.
//
// Definitions used here (spec: docs/crf.md):
//   seg(u,d,c)  = cum[u+d,c] - cum[u,c] + D[d-1,c] (+ o[u,c] with onset)  (segment [u, u+d) with label c)
//   alpha[t][c] = log of the summed exp-scores of all segmentations of [0,t)
//                 whose last segment has label c (including s of the first)
//   beta[t][c]  = log of the summed exp-scores of all completions of [t,L)
//                 given a segment with label c ends at t (including e of the last)
//   mu(u,d,c)   = P(segment (u,d,c) is in y)
#pragma once

#include <cstdint>
#include <memory>

#include "crf/backend.h"
#include "crf/reference/params_f64.h"

namespace timitseg::crf::reference {

// Throws std::invalid_argument like validate_host (dims, lengths, labels; cum_scores
// finite; parameters finite or -inf). The functions below throw std::runtime_error
// naming the utterance when its log Z is -inf or (with labels) its gold score is -inf.
void validate_f64(const Dims& dims, const ParamsF64& p, const int32_t* labels);

void log_partition_f64(const Dims& dims, const ParamsF64& p, double* log_z);
void gold_score_f64(const Dims& dims, const ParamsF64& p, const int32_t* labels, double* gold);
// Gradients of sum_b scale * (log Z_b - gold_b) (or scale * log Z_b without labels).
void backward_f64(const Dims& dims, const ParamsF64& p, const int32_t* labels, double scale, double* log_z,
                  double* gold, const GradsF64& grads);
void viterbi_f64(const Dims& dims, const ParamsF64& p, double* score, int32_t* segments, int32_t* num_segments);
void boundary_posteriors_f64(const Dims& dims, const ParamsF64& p, double* out);
// Segment posteriors out [B][T][K][C]: out[b][t][d-1][c] = P(a segment of label
// c and duration d ends at frame t, i.e. covers frames t-d+1..t) = mu(t-d+1, d, c),
// from the same alpha/beta tables as boundary_posteriors_f64 (summed over d and
// c, row t gives its boundary posterior at t+1); 0 where t >= L or d > t+1.
void segment_posteriors_f64(const Dims& dims, const ParamsF64& p, double* out);
// The gradient of the marginals (docs/crf.md "Gradient of the marginals"): the
// gradients of sum(g * marginals) w.r.t. every input, where g are upstream
// gradients of the boundary posteriors [B][T+1] (boundary_posteriors_f64's
// layout), the frame posteriors [B][T][C] (P(frame t lies in a segment of
// label c)) and the segment posteriors [B][T][K][C] (segment_posteriors_f64's
// layout); nullptr = zero. Only valid entries are read (t <= L, t < L, t < L
// and d <= t+1); they must be finite (std::invalid_argument naming the entry).
// grads as backward_f64's (overwritten; nullptr = not wanted). A Hessian-vector
// product of log Z, computed exactly by the first-order expectation semiring,
// O(T K C^2) per utterance.
struct MarginalGradsF64 {
  const double* boundaries = nullptr;  // [B][T+1]
  const double* frames = nullptr;      // [B][T][C]
  const double* segments = nullptr;    // [B][T][K][C]
};
void marginals_backward_f64(const Dims& dims, const ParamsF64& p, const MarginalGradsF64& g, const GradsF64& grads);
// Forced alignment by its definition (docs/crf.md "Forced alignment"): a max
// over every duration r of every phone, each phone's pieces scored one by one,
// O(L^2 N) per utterance. phones [B][N], num_phones [B], optional [B][N] or
// nullptr, score [B] (-inf when infeasible), spans [B][N][2].
void align_f64(const Dims& dims, const ParamsF64& p, int64_t N, const int32_t* phones, const int32_t* num_phones,
               const int32_t* optional, double* score, int32_t* spans);

// Confidence (docs/crf.md "Confidence") by the definitions: span marginals
// exp(prefix + the span's pieces + beta - log Z) from the reference's alpha
// and beta (queries [B][Q][3], out [B][Q]); the constrained posteriors by a
// forward and a backward sum over every duration of every phone (O(L^2 N) per
// utterance; phones, optional and spans as Backend::align_posteriors, out
// [B][N][3], log_z_c [B] or nullptr).
void span_marginals_f64(const Dims& dims, const ParamsF64& p, int64_t Q, const int32_t* queries,
                        const int32_t* num_queries, double* log_z, double* out);
void align_posteriors_f64(const Dims& dims, const ParamsF64& p, int64_t N, const int32_t* phones,
                          const int32_t* num_phones, const int32_t* optional, const int32_t* spans, double* log_z_c,
                          double* out);

// The transcript NLL (docs/crf.md "Training from transcripts"): log_z [B],
// log_z_c [B] (each nullptr = not wanted) and the gradients (as backward_f64's)
// of sum_b scale * (log Z_b - log Z_c_b). phones, num_phones, optional as
// align_f64, links [B][N] (nullptr = the chain of optional) the phone graph of
// crf/phone_graph.h. Throws std::runtime_error naming an utterance whose log Z or
// log Z_c is -inf (nothing written then).
void transcript_backward_f64(const Dims& dims, const ParamsF64& p, int64_t N, const int32_t* phones,
                             const int32_t* num_phones, const int32_t* optional, const int32_t* links,
                             double scale, double* log_z, double* log_z_c, const GradsF64& grads);

std::unique_ptr<Backend> make_reference_backend();

}  // namespace timitseg::crf::reference
