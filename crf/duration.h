// crf.duration_model: how crf.duration_bias [K][C] is parameterized.
//   table     (default): the K x C entries are free parameters.
//   lognormal: a per-label log-normal log-density with 3 parameters per label,
//              crf.duration_lognormal [3][C] (rows mu, log_sigma, offset);
//              crf.duration_bias stays in the layout as the DERIVED table that
//              every CRF backend reads, so the CRF spec (docs/crf.md) is unchanged:
//     table[k][c] = offset_c - log d - ls_c - (log d - mu_c)^2 / (2 sigma_c^2),
//     d = k + 1 (frames), ls_c = clamp(log_sigma_c, kMinLogSigma, kMaxLogSigma), sigma_c = exp(ls_c)
//   (the log-normal log-density of d up to the constant -log sqrt(2 pi), which
//   offset_c absorbs). Outside the clamp the gradient of log_sigma_c is 0.
// crf.reg's L2 penalty covers crf.transition only with the log-normal (a
// derived table is not a parameter: penalizing its large negative tails would
// pull every sigma up); model::penalized_durations() is the K the penalty is given.
// The executors keep the invariant "crf.duration_bias == table(crf.duration_lognormal)"
// after set_state() and after every optimizer update, and turn the gradient of
// the table (the CRF loss's) into the gradient of the three
// rows (lognormal_duration_backward), leaving the table's own gradient 0
// (model/params.h: derive_duration_table, chain_duration_gradient over the
// model's flat layout). The same on the GPU: crf/device_layers.h.
#pragma once

#include <cstdint>
#include <vector>

namespace timitseg::crf {

constexpr double kMinLogSigma = -2.995732273553991;  // log 0.05
constexpr double kMaxLogSigma = 1.6094379124341003;  // log 5

// ln [3][C] (mu, log_sigma, offset) -> table [K][C]; math in double, stored as F
// (float: training; double: the C API's float64 path, docs/python.md "float64").
template <class F>
void lognormal_duration_table(int K, int C, const F* ln, F* table);
// grad_table [K][C] (d loss / d table) -> grad_ln [3][C] (overwritten; sums over
// k in order, in double); grad_table is then zeroed.
template <class F>
void lognormal_duration_backward(int K, int C, const F* ln, F* grad_table, F* grad_ln);

// crf.duration_init = data for the log-normal: per label, the mean and standard
// deviation of log d over the pieces of the loss's gold segmentation (runs split
// at K, as duration_log_prior counts them); a label with fewer than 2 pieces, or
// with zero spread, takes the pooled fit of all labels (no pieces at all:
// mu 0, sigma 1); sigma clamped to [0.05, 5]; offset 0. Returns [3][C].
std::vector<float> fit_lognormal_durations(const std::vector<std::vector<int32_t>>& class_labels, int K, int C);

// Throws std::invalid_argument "WHAT: utterance U, frame T: label L outside [0, C)"
// for the first frame label (utterance order, then frame order) outside [0, C).
void check_class_labels(const char* what, const std::vector<std::vector<int32_t>>& class_labels, int C);

}  // namespace timitseg::crf
