// crf::Session's transcript NLL (Backend::transcript_backward, docs/crf.md
// "Training from transcripts") and its one-call host wrapper (crf/host_run.h).
#include <cstddef>

#include "crf/session.h"
#include "crf/validate.h"

namespace timitseg::crf {

void Session::transcript_backward(const Dims& dims, const Params& p, int64_t N, const int32_t* phones,
                                  const int32_t* num_phones, const int32_t* optional, const int32_t* links,
                                  double scale, double* log_z, double* log_z_c, const Grads& grads) {
  trans_ws_.reserve(backend_.transcript_workspace_bytes(dims, N));
  backend_.transcript_backward(dims, p, N, phones, num_phones, optional, links, scale, log_z, log_z_c, grads,
                               trans_ws_.data());
}

TranscriptResult Session::transcript_host(const Dims& dims, const Params& hp, int64_t N, const int32_t* phones,
                                          const int32_t* num_phones, const int32_t* optional, double scale,
                                          const int32_t* links) {
  validate_host(dims, hp, nullptr);
  validate_transcript_host(dims, N, phones, num_phones, optional, links);
  const int64_t B = dims.B, T = dims.T, K = dims.K, C = dims.C;
  const size_t f = sizeof(float), f64 = sizeof(double);
  TranscriptResult r;
  r.log_z.resize(B);
  r.log_z_c.resize(B);
  r.grad_cum_scores.resize(B * (T + 1) * C);
  r.grad_transition.resize(C * C);
  r.grad_duration_bias.resize(K * C);
  r.grad_start.resize(C);
  r.grad_end.resize(C);
  if (hp.onset) r.grad_onset.resize(B * T * C);
  if (!backend_.on_device()) {
    Grads g{r.grad_cum_scores.data(), r.grad_transition.data(), r.grad_duration_bias.data(), r.grad_start.data(),
            r.grad_end.data()};
    if (hp.onset) g.onset = r.grad_onset.data();
    transcript_backward(dims, hp, N, phones, num_phones, optional, links, scale, r.log_z.data(), r.log_z_c.data(), g);
    return r;
  }
  const Params dp = upload_params(dims, hp);
  ph_.upload(phones, B * N * sizeof(int32_t), stream_);
  nph_.upload(num_phones, B * sizeof(int32_t), stream_);
  if (optional) opt_.upload(optional, B * N * sizeof(int32_t), stream_);
  if (links) links_.upload(links, B * N * sizeof(int32_t), stream_);
  lz_.reserve(B * f64);
  gold_.reserve(B * f64);  // log Z_c
  gc_.reserve(B * (T + 1) * C * f);
  ga_.reserve(C * C * f);
  gd_.reserve(K * C * f);
  gs_.reserve(C * f);
  ge_.reserve(C * f);
  Grads g{gc_.as<float>(), ga_.as<float>(), gd_.as<float>(), gs_.as<float>(), ge_.as<float>()};
  if (hp.onset) {
    go_.reserve(B * T * C * f);
    g.onset = go_.as<float>();
  }
  transcript_backward(dims, dp, N, ph_.as<int32_t>(), nph_.as<int32_t>(), optional ? opt_.as<int32_t>() : nullptr,
                      links ? links_.as<int32_t>() : nullptr, scale, lz_.as<double>(), gold_.as<double>(), g);
  lz_.download(r.log_z.data(), B * f64, stream_);
  gold_.download(r.log_z_c.data(), B * f64, stream_);
  gc_.download(r.grad_cum_scores.data(), r.grad_cum_scores.size() * f, stream_);
  ga_.download(r.grad_transition.data(), r.grad_transition.size() * f, stream_);
  gd_.download(r.grad_duration_bias.data(), r.grad_duration_bias.size() * f, stream_);
  gs_.download(r.grad_start.data(), C * f, stream_);
  ge_.download(r.grad_end.data(), C * f, stream_);
  if (hp.onset) go_.download(r.grad_onset.data(), r.grad_onset.size() * f, stream_);
  backend_.synchronize();
  return r;
}

TranscriptResult transcript_host(Backend& backend, const Dims& dims, const Params& host_params, int64_t N,
                                 const int32_t* phones, const int32_t* num_phones, const int32_t* optional,
                                 double scale, const int32_t* links) {
  Session session(backend);
  return session.transcript_host(dims, host_params, N, phones, num_phones, optional, scale, links);
}

}  // namespace timitseg::crf
