// crf::Session (crf/session.h) and crf::run_host, its one-call wrapper.
#include "crf/session.h"

#include <algorithm>

#include "crf/segments.h"
#include "crf/validate.h"

namespace timitseg::crf {

Session::Session(Backend& backend) : Session(backend, backend.stream()) {}

Session::Session(Backend& backend, void* stream)
    : backend_(backend), stream_(stream), mem_(backend.on_device() ? Memory::device : Memory::host) {
  backend_.set_stream(stream_);
  for (Buffer* b : {&ws_, &cum_, &A_, &D_, &s_, &e_, &len_, &lab_, &lz_, &gold_, &gc_, &ga_, &gd_, &gs_, &ge_, &vs_,
                    &segs_, &nseg_, &bp_, &on_, &go_, &align_ws_, &ph_, &nph_, &aspans_, &opt_, &links_, &conf_in_, &conf_out_, &bonus_, &trans_ws_})
    b->set_memory(mem_);
}

void* Session::workspace(const Dims& dims) {
  ws_.reserve(backend_.workspace_bytes(dims));
  return ws_.data();
}

size_t Session::bytes_reserved() const {
  size_t n = 0;
  for (const Buffer* b : {&ws_, &cum_, &A_, &D_, &s_, &e_, &len_, &lab_, &lz_, &gold_, &gc_, &ga_, &gd_, &gs_, &ge_,
                          &vs_, &segs_, &nseg_, &bp_, &on_, &go_, &align_ws_, &ph_, &nph_, &aspans_, &opt_, &links_, &conf_in_, &conf_out_, &bonus_, &trans_ws_})
    n += b->capacity();
  return n;
}

void Session::log_partition(const Dims& dims, const Params& p, double* log_z) {
  // The forward alone may need less than workspace(dims): grow only to that.
  ws_.reserve(backend_.log_partition_workspace_bytes(dims));
  backend_.log_partition(dims, p, log_z, ws_.data());
}

void Session::gold_score(const Dims& dims, const Params& p, const int32_t* labels, double* gold) {
  backend_.gold_score(dims, p, labels, gold, workspace(dims));
}

void Session::backward(const Dims& dims, const Params& p, const int32_t* labels, double scale, double* log_z,
                       double* gold, const Grads& grads) {
  backend_.backward(dims, p, labels, scale, log_z, gold, grads, workspace(dims));
}

void Session::backward_begin(const Dims& dims, const Params& p, const int32_t* labels, double scale, double* log_z,
                             double* gold, const Grads& wanted) {
  backend_.backward_begin(dims, p, labels, scale, log_z, gold, wanted, workspace(dims));
}

void Session::backward_finish(const Grads& grads) { backend_.backward_finish(grads); }

void Session::viterbi(const Dims& dims, const Params& p, double* score, int32_t* segments, int32_t* num_segments) {
  backend_.viterbi(dims, p, score, segments, num_segments, workspace(dims));
}

void Session::boundary_posteriors(const Dims& dims, const Params& p, double* out) {
  backend_.boundary_posteriors(dims, p, out, workspace(dims));
}

Params Session::upload_params(const Dims& dims, const Params& hp) {
  const int64_t B = dims.B, T = dims.T, K = dims.K, C = dims.C;
  const size_t f = sizeof(float), i32 = sizeof(int32_t);
  // Padding rows of cum_scores may hold anything on the host; only valid rows
  // were validated, so copy a sanitized version (padding zeroed).
  cum_host_.assign(hp.cum_scores, hp.cum_scores + B * (T + 1) * C);
  for (int64_t b = 0; b < B; ++b)
    std::fill(cum_host_.begin() + b * (T + 1) * C + (hp.lengths[b] + 1) * C, cum_host_.begin() + (b + 1) * (T + 1) * C,
              0.0f);
  cum_.upload(cum_host_.data(), cum_host_.size() * f, stream_);
  A_.upload(hp.transition, C * C * f, stream_);
  D_.upload(hp.duration_bias, K * C * f, stream_);
  if (hp.start) s_.upload(hp.start, C * f, stream_);
  if (hp.end) e_.upload(hp.end, C * f, stream_);
  len_.upload(hp.lengths, B * i32, stream_);
  Params dp{cum_.as<float>(), A_.as<float>(), D_.as<float>(), hp.start ? s_.as<float>() : nullptr,
            hp.end ? e_.as<float>() : nullptr, len_.as<int32_t>()};
  if (hp.onset) {  // onset [B][T][C]: padding frames zeroed like cum_scores'
    on_host_.assign(hp.onset, hp.onset + B * T * C);
    for (int64_t b = 0; b < B; ++b)
      std::fill(on_host_.begin() + (b * T + hp.lengths[b]) * C, on_host_.begin() + (b + 1) * T * C, 0.0f);
    on_.upload(on_host_.data(), on_host_.size() * f, stream_);
    dp.onset = on_.as<float>();
  }
  return dp;
}

void Session::align(const Dims& dims, const Params& p, int64_t N, const int32_t* phones, const int32_t* num_phones,
                    const int32_t* optional, double* score, int32_t* spans) {
  align_ws_.reserve(backend_.align_workspace_bytes(dims, N));
  backend_.align(dims, p, N, phones, num_phones, optional, score, spans, align_ws_.data());
}

AlignResult Session::align_host(const Dims& dims, const Params& hp, int64_t N, const int32_t* phones,
                                const int32_t* num_phones, const int32_t* optional) {
  validate_host(dims, hp, nullptr);
  validate_align_host(dims, N, phones, num_phones, optional);
  const int64_t B = dims.B;
  AlignResult r;
  r.score.resize(B);
  r.spans.resize(B * N * 2);
  if (!backend_.on_device()) {
    align(dims, hp, N, phones, num_phones, optional, r.score.data(), r.spans.data());
    return r;
  }
  const Params dp = upload_params(dims, hp);
  ph_.upload(phones, B * N * sizeof(int32_t), stream_);
  nph_.upload(num_phones, B * sizeof(int32_t), stream_);
  if (optional) opt_.upload(optional, B * N * sizeof(int32_t), stream_);
  vs_.reserve(B * sizeof(double));
  aspans_.reserve(B * N * 2 * sizeof(int32_t));
  align(dims, dp, N, ph_.as<int32_t>(), nph_.as<int32_t>(), optional ? opt_.as<int32_t>() : nullptr, vs_.as<double>(),
        aspans_.as<int32_t>());
  vs_.download(r.score.data(), B * sizeof(double), stream_);
  aspans_.download(r.spans.data(), r.spans.size() * sizeof(int32_t), stream_);
  backend_.synchronize();
  return r;
}

AlignResult align_host(Backend& backend, const Dims& dims, const Params& host_params, int64_t N,
                       const int32_t* phones, const int32_t* num_phones, const int32_t* optional) {
  Session session(backend);
  return session.align_host(dims, host_params, N, phones, num_phones, optional);
}

// run_host on a host backend (reference, cpu): the host arrays directly.
HostResult Session::run_on_host_backend(const Dims& dims, const Params& hp, const int32_t* labels,
                                        const HostRunOptions& opt) {
  const int64_t B = dims.B, T = dims.T, K = dims.K, C = dims.C;
  HostResult r;
  void* w = workspace(dims);
  r.log_z.resize(B);
  if (opt.gradients) {
    r.grad_cum_scores.resize(B * (T + 1) * C);
    r.grad_transition.resize(C * C);
    r.grad_duration_bias.resize(K * C);
    r.grad_start.resize(C);
    r.grad_end.resize(C);
    if (labels) r.gold.resize(B);
    Grads g{r.grad_cum_scores.data(), r.grad_transition.data(), r.grad_duration_bias.data(), r.grad_start.data(),
            r.grad_end.data()};
    if (hp.onset) {
      r.grad_onset.resize(B * T * C);
      g.onset = r.grad_onset.data();
    }
    backend_.backward(dims, hp, labels, opt.scale, r.log_z.data(), labels ? r.gold.data() : nullptr, g, w);
  } else {
    backend_.log_partition(dims, hp, r.log_z.data(), w);
    if (labels) {
      r.gold.resize(B);
      backend_.gold_score(dims, hp, labels, r.gold.data(), w);
    }
  }
  if (opt.viterbi) {
    r.viterbi_score.resize(B);
    segs_host_.resize(B * T * 3);
    nseg_host_.resize(B);
    backend_.viterbi(dims, hp, r.viterbi_score.data(), segs_host_.data(), nseg_host_.data(), w);
    r.segments = collect_segments(dims, segs_host_.data(), nseg_host_.data());
  }
  if (opt.boundary_posteriors) {
    r.boundary_posteriors.resize(B * (T + 1));
    backend_.boundary_posteriors(dims, hp, r.boundary_posteriors.data(), w);
  }
  return r;
}

HostResult Session::run_host(const Dims& dims, const Params& hp, const int32_t* labels, const HostRunOptions& opt) {
  validate_host(dims, hp, labels);
  const int64_t B = dims.B, T = dims.T, K = dims.K, C = dims.C;
  HostResult r;
  if (!backend_.on_device()) return run_on_host_backend(dims, hp, labels, opt);  // the host arrays directly

  // Device backend: copy the inputs into the session's buffers, run, copy back.
  const size_t f = sizeof(float), i32 = sizeof(int32_t), f64 = sizeof(double);
  const Params dp = upload_params(dims, hp);
  if (labels) lab_.upload(labels, B * T * i32, stream_);
  const int32_t* dlab = labels ? lab_.as<int32_t>() : nullptr;
  void* w = workspace(dims);
  lz_.reserve(B * f64);
  if (labels) gold_.reserve(B * f64);
  double* dgold = labels ? gold_.as<double>() : nullptr;
  r.log_z.resize(B);
  if (opt.gradients) {
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
    backend_.backward(dims, dp, dlab, opt.scale, lz_.as<double>(), dgold, g, w);
    r.grad_cum_scores.resize(B * (T + 1) * C);
    r.grad_transition.resize(C * C);
    r.grad_duration_bias.resize(K * C);
    r.grad_start.resize(C);
    r.grad_end.resize(C);
    gc_.download(r.grad_cum_scores.data(), r.grad_cum_scores.size() * f, stream_);
    ga_.download(r.grad_transition.data(), r.grad_transition.size() * f, stream_);
    gd_.download(r.grad_duration_bias.data(), r.grad_duration_bias.size() * f, stream_);
    gs_.download(r.grad_start.data(), C * f, stream_);
    ge_.download(r.grad_end.data(), C * f, stream_);
    if (hp.onset) {
      r.grad_onset.resize(B * T * C);
      go_.download(r.grad_onset.data(), r.grad_onset.size() * f, stream_);
    }
  } else {
    backend_.log_partition(dims, dp, lz_.as<double>(), w);
    if (labels) backend_.gold_score(dims, dp, dlab, dgold, w);
  }
  lz_.download(r.log_z.data(), B * f64, stream_);
  if (labels) {
    r.gold.resize(B);
    gold_.download(r.gold.data(), B * f64, stream_);
  }
  if (opt.viterbi) {
    vs_.reserve(B * f64);
    segs_.reserve(B * T * 3 * i32);
    nseg_.reserve(B * i32);
    backend_.viterbi(dims, dp, vs_.as<double>(), segs_.as<int32_t>(), nseg_.as<int32_t>(), w);
    r.viterbi_score.resize(B);
    segs_host_.resize(B * T * 3);
    nseg_host_.resize(B);
    vs_.download(r.viterbi_score.data(), B * f64, stream_);
    segs_.download(segs_host_.data(), segs_host_.size() * i32, stream_);
    nseg_.download(nseg_host_.data(), B * i32, stream_);
  }
  if (opt.boundary_posteriors) {
    bp_.reserve(B * (T + 1) * f64);
    backend_.boundary_posteriors(dims, dp, bp_.as<double>(), w);
    r.boundary_posteriors.resize(B * (T + 1));
    bp_.download(r.boundary_posteriors.data(), r.boundary_posteriors.size() * f64, stream_);
  }
  backend_.synchronize();  // the downloads above are complete before the host reads them
  if (opt.viterbi) r.segments = collect_segments(dims, segs_host_.data(), nseg_host_.data());
  return r;
}

HostResult run_host(Backend& backend, const Dims& dims, const Params& host_params, const int32_t* labels,
                    const HostRunOptions& options) {
  Session session(backend);
  return session.run_host(dims, host_params, labels, options);
}

}  // namespace timitseg::crf
