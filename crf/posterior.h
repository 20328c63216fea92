// Posterior (per-frame minimum-Bayes-risk) decoding from the semi-CRF's
// marginals: crf.decode = posterior (docs/crf.md, "Posterior decoding").
//
// The gradient of log Z with respect to cum_scores (Backend::backward with
// labels == nullptr and scale 1) is, per utterance of length L,
//   g[t][c] = P(a segment of label c ends at t) - P(one of label c starts at t),  t = 0..L,
// and the marginal probability that frame t (t < L) lies in a segment of label c is
//   P(frame t has label c) = -sum_{t' <= t} g[t'][c] = sum_{t' = t+1..L} g[t'][c]
// (every segment starts once and ends once, so the column sums of g are 0).
// The suffix form reads rows 1..L only. Host arrays; no backend needed here
// but for posterior_decode_on_host, which runs the backward on a Session.
#pragma once

#include <cstdint>
#include <vector>

#include "crf/backend.h"
#include "crf/host_run.h"
#include "crf/session.h"

namespace timitseg::crf {

// marginals [B][T][C] (float64) from grad_log_z [B][T+1][C] (the gradient of
// sum_b log Z_b): the suffix sums above (float64, t descending) on valid
// frames, 0 on padding frames.
void frame_marginals(const Dims& dims, const float* grad_log_z, const int32_t* lengths, double* marginals);

// Per valid frame the label of largest marginal (ties to the smallest label),
// as segments: the maximal runs of equal labels, in time order, batch-major
// (a run may be longer than K: posterior decoding has no segment lengths).
std::vector<Segment> posterior_segments(const Dims& dims, const double* marginals, const int32_t* lengths);

// crf.decode = posterior on host arrays: the segments of posterior_segments
// from the frame marginals (frame_marginals of the gradient of log Z, one
// backward of `session` without labels) and, when labels is not nullptr, log Z
// and the gold score of p (the dev loss; a second call). viterbi_score stays
// empty. The executors' posterior decoding on a host backend.
HostResult posterior_decode_on_host(Session& session, const Dims& dims, const Params& p, const int32_t* labels);

}  // namespace timitseg::crf
