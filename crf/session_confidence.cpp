// crf::Session's confidence calls (Backend::span_marginals and
// Backend::align_posteriors, docs/crf.md "Confidence") and their one-call
// host wrappers.
#include <algorithm>

#include "crf/session.h"
#include "crf/validate.h"

namespace timitseg::crf {

void Session::span_marginals(const Dims& dims, const Params& p, int64_t Q, const int32_t* queries,
                             const int32_t* num_queries, double* log_z, double* out) {
  backend_.span_marginals(dims, p, Q, queries, num_queries, log_z, out, workspace(dims));
}

void Session::align_posteriors(const Dims& dims, const Params& p, int64_t N, const int32_t* phones,
                               const int32_t* num_phones, const int32_t* optional, const int32_t* spans,
                               double* log_z_c, double* out) {
  align_ws_.reserve(backend_.align_posterior_workspace_bytes(dims, N));
  backend_.align_posteriors(dims, p, N, phones, num_phones, optional, spans, log_z_c, out, align_ws_.data());
}

SpanMarginalResult Session::span_marginals_host(const Dims& dims, const Params& hp, int64_t Q,
                                                const int32_t* queries, const int32_t* num_queries) {
  validate_host(dims, hp, nullptr);
  validate_span_queries_host(dims, Q, queries, num_queries, hp.lengths);
  const int64_t B = dims.B;
  SpanMarginalResult r;
  r.log_z.resize(B);
  r.marginal.resize(B * Q);
  if (!backend_.on_device()) {
    span_marginals(dims, hp, Q, queries, num_queries, r.log_z.data(), r.marginal.data());
    return r;
  }
  const Params dp = upload_params(dims, hp);
  conf_in_.upload(queries, B * Q * 3 * sizeof(int32_t), stream_);
  nph_.upload(num_queries, B * sizeof(int32_t), stream_);
  lz_.reserve(B * sizeof(double));
  conf_out_.reserve(B * Q * sizeof(double));
  span_marginals(dims, dp, Q, conf_in_.as<int32_t>(), nph_.as<int32_t>(), lz_.as<double>(), conf_out_.as<double>());
  lz_.download(r.log_z.data(), B * sizeof(double), stream_);
  conf_out_.download(r.marginal.data(), r.marginal.size() * sizeof(double), stream_);
  backend_.synchronize();
  return r;
}

AlignPosteriorResult Session::align_posteriors_host(const Dims& dims, const Params& hp, int64_t N,
                                                    const int32_t* phones, const int32_t* num_phones,
                                                    const int32_t* optional, const int32_t* spans) {
  validate_host(dims, hp, nullptr);
  validate_align_host(dims, N, phones, num_phones, optional);
  validate_align_spans_host(dims, N, num_phones, hp.lengths, spans);
  const int64_t B = dims.B;
  AlignPosteriorResult r;
  r.log_z_c.resize(B);
  r.posterior.resize(B * N * 3);
  if (!backend_.on_device()) {
    align_posteriors(dims, hp, N, phones, num_phones, optional, spans, r.log_z_c.data(), r.posterior.data());
    return r;
  }
  const Params dp = upload_params(dims, hp);
  ph_.upload(phones, B * N * sizeof(int32_t), stream_);
  nph_.upload(num_phones, B * sizeof(int32_t), stream_);
  if (optional) opt_.upload(optional, B * N * sizeof(int32_t), stream_);
  conf_in_.upload(spans, B * N * 2 * sizeof(int32_t), stream_);
  lz_.reserve(B * sizeof(double));
  conf_out_.reserve(B * N * 3 * sizeof(double));
  align_posteriors(dims, dp, N, ph_.as<int32_t>(), nph_.as<int32_t>(), optional ? opt_.as<int32_t>() : nullptr,
                   conf_in_.as<int32_t>(), lz_.as<double>(), conf_out_.as<double>());
  lz_.download(r.log_z_c.data(), B * sizeof(double), stream_);
  conf_out_.download(r.posterior.data(), r.posterior.size() * sizeof(double), stream_);
  backend_.synchronize();
  return r;
}

SpanMarginalResult span_marginals_host(Backend& backend, const Dims& dims, const Params& host_params, int64_t Q,
                                       const int32_t* queries, const int32_t* num_queries) {
  Session session(backend);
  return session.span_marginals_host(dims, host_params, Q, queries, num_queries);
}

AlignPosteriorResult align_posteriors_host(Backend& backend, const Dims& dims, const Params& host_params, int64_t N,
                                           const int32_t* phones, const int32_t* num_phones, const int32_t* optional,
                                           const int32_t* spans) {
  Session session(backend);
  return session.align_posteriors_host(dims, host_params, N, phones, num_phones, optional, spans);
}

}  // namespace timitseg::crf
