// The CRF calls of the C API (include/timitseg.h): log_partition, nll,
// viterbi, marginals, align. Each prepares the batch (capi/crf_batch.h), runs
// the handle's session on the utterances of length >= 1, and writes the
// caller's tensors.
#include <cmath>
#include <limits>
#include <tuple>

#include "capi/crf_batch.h"
#include "capi/crf_f64.h"
#include "capi/crf_fast.h"
#include "crf/cumsum.h"
#include "crf/phone_graph.h"
#include "crf/posterior.h"
#include "crf/score.h"
#include "crf/duration.h"
#include "crf/segments.h"
#include "crf/validate.h"

using timitseg::capi::ApiError;
using timitseg::capi::Batch;
using timitseg::capi::guard;
using timitseg::capi::on_kept;
namespace crf = timitseg::crf;
namespace capi = timitseg::capi;

namespace timitseg::capi {
const char* last_error();
}

namespace {

void need(const void* p, const char* what) {
  if (p == nullptr) throw ApiError(TIMITSEG_ERR_ARGUMENT, std::string(what) + " is NULL");
}

Batch prepare(timitseg_crf* h, const timitseg_crf_batch* in) {
  need(h, "crf");
  need(in, "batch");
  capi::settle(*h);  // the general path shares the session's buffers with the zero-copy path
  capi::refresh_bound(*h, in->stream);  // the general path reads the parameters on the host
  return capi::prepare(*h, *in);
}

// Runs the session on the kept utterances (none: an empty result).
crf::HostResult run(timitseg_crf& h, const Batch& b, const int32_t* labels, const crf::HostRunOptions& o) {
  if (b.dims.B == 0) return crf::HostResult();
  return on_kept(b, [&] { return h.session->run_host(b.dims, b.params(h), labels, o); });
}

// Labels [B][inner] in [0, C) on each row's first count(r) entries, named
// by the caller's indices (the backends' own checks see the kept rows only).
template <class Count>
void check_labels(const Batch& b, const std::vector<int64_t>& v, int64_t inner, const char* name, Count count) {
  for (int64_t r = 0; r < b.B; ++r)
    for (int64_t t = 0; t < count(r); ++t) {
      const int64_t x = v[static_cast<size_t>(r * inner + t)];
      if (x < 0 || x >= b.C)
        throw ApiError(TIMITSEG_ERR_ARGUMENT, std::string(name) + "[" + std::to_string(r) + "][" + std::to_string(t) +
                                                  "] = " + std::to_string(x) + " is outside [0, C = " +
                                                  std::to_string(b.C) + ")");
    }
}

// Viterbi alone with the handle's phone bonus (crf::Session's decoding):
// host backends call the session directly (run_host also computes log Z); a
// device backend goes through run_host's uploads.
crf::HostResult run_viterbi(timitseg_crf& h, const Batch& b) {
  crf::HostResult r;
  if (b.dims.B == 0) return r;
  if (h.cuda)
    return on_kept(b, [&] { return h.session->decode_host(b.dims, b.params(h), nullptr, h.p.phone_bonus); });
  const crf::Params p = b.params(h);
  std::vector<int32_t> segs(static_cast<size_t>(b.dims.B * b.T * 3)), counts(static_cast<size_t>(b.dims.B));
  r.viterbi_score.resize(static_cast<size_t>(b.dims.B));
  on_kept(b, [&] {
    crf::validate_host(b.dims, p, nullptr);
    h.session->viterbi(b.dims, p, h.p.phone_bonus, r.viterbi_score.data(), segs.data(), counts.data());
  });
  r.segments = crf::collect_segments(b.dims, segs.data(), counts.data());
  return r;
}

// The gold segments [B][S][3] + counts of the kept rows, checked to tile each utterance.
std::vector<std::vector<crf::Segment>> gold_from_segments(const timitseg_crf& h, const Batch& b,
                                                          const timitseg_crf_gold& g) {
  capi::check_int(g.segments, "gold.segments");
  capi::check_int(g.num_segments, "gold.num_segments");
  const int64_t S = capi::check_shape(g.segments, "gold.segments", {b.B, -1, 3})[1];
  capi::check_shape(g.num_segments, "gold.num_segments", {b.B});
  capi::check_device(g.segments, "gold.segments", b.device, b.device_index);
  capi::check_device(g.num_segments, "gold.num_segments", b.device, b.device_index);
  const std::vector<int64_t> seg = capi::read_i64(g.segments, b.stream), ns = capi::read_i64(g.num_segments, b.stream);
  std::vector<std::vector<crf::Segment>> out;
  for (int64_t r = 0; r < b.B; ++r) {
    const std::string at = "utterance " + std::to_string(r) + ": ";
    if (ns[r] < 0 || ns[r] > S || (b.lengths[r] == 0) != (ns[r] == 0))
      throw ApiError(TIMITSEG_ERR_LENGTH, at + "num_segments = " + std::to_string(ns[r]) + " is outside [" +
                                              (b.lengths[r] ? "1" : "0") + ", " + std::to_string(b.lengths[r] ? S : 0) + "]");
    if (b.lengths[r] == 0) continue;
    std::vector<crf::Segment> v;
    int64_t t = 0;
    for (int64_t i = 0; i < ns[r]; ++i) {
      const int64_t* x = seg.data() + (r * S + i) * 3;
      if (x[0] != t || x[1] < 1 || x[1] > h.p.max_duration || x[0] + x[1] > b.lengths[r])
        throw ApiError(TIMITSEG_ERR_LENGTH, at + "gold segment " + std::to_string(i) + " (start " + std::to_string(x[0]) +
                                                ", duration " + std::to_string(x[1]) + ") must start at " + std::to_string(t) +
                                                " with a duration in [1, K = " + std::to_string(h.p.max_duration) +
                                                "] inside the length " + std::to_string(b.lengths[r]));
      if (x[2] < 0 || x[2] >= h.p.num_labels)
        throw ApiError(TIMITSEG_ERR_ARGUMENT, at + "gold segment " + std::to_string(i) + " has label " +
                                                  std::to_string(x[2]) + ", outside [0, C)");
      v.push_back({static_cast<int32_t>(v.size()), static_cast<int32_t>(x[0]), static_cast<int32_t>(x[1]), static_cast<int32_t>(x[2])});
      t = x[0] + x[1];
    }
    if (t != b.lengths[r])
      throw ApiError(TIMITSEG_ERR_LENGTH, at + "the gold segments end at " + std::to_string(t) + ", the length is " +
                                              std::to_string(b.lengths[r]));
    out.push_back(std::move(v));
  }
  return out;
}

// Score of one gold segmentation (docs/crf.md) of kept row k in double; when
// g is set, subtracts scale times its indicator from the gradients.
double gold_score(const timitseg_crf& h, const Batch& b, size_t k, const std::vector<crf::Segment>& segs,
                  double scale, crf::HostResult* g) {
  const int64_t C = b.C, T = b.T;
  const float* cum = b.cum.data() + k * (T + 1) * C;
  const float* on = b.onset.empty() ? nullptr : b.onset.data() + k * T * C;
  const crf::ScoreParams<float> p{C, h.transition.data(), h.duration_bias.data(), h.start.data(), h.end.data(), on};
  const auto sub = [scale](float& v, double by) { v = static_cast<float>(static_cast<double>(v) - by * scale); };
  const double s = crf::segmentation_score(segs, cum, p, [&](size_t i) {
    const crf::Segment& x = segs[i];
    const int c = x.label, u = x.start, d = x.duration;
    if (!g) return;
    sub(g->grad_cum_scores[(k * (T + 1) + u + d) * C + c], 1.0);
    sub(g->grad_cum_scores[(k * (T + 1) + u) * C + c], -1.0);
    sub(g->grad_duration_bias[(d - 1) * C + c], 1.0);
    if (i > 0) sub(g->grad_transition[segs[i - 1].label * C + c], 1.0);
    if (on) sub(g->grad_onset[(k * T + u) * C + c], 1.0);
  });
  if (g) {
    g->grad_start[segs.front().label] = static_cast<float>(g->grad_start[segs.front().label] - scale);
    g->grad_end[segs.back().label] = static_cast<float>(g->grad_end[segs.back().label] - scale);
  }
  if (!std::isfinite(s))
    throw ApiError(TIMITSEG_ERR_RUNTIME, "utterance " + std::to_string(b.rows[k]) +
                                             ": the gold segmentation scores -inf (a forbidden transition, duration, start or end)");
  return s;
}

void write_param_grad(const Batch& b, const timitseg_tensor& t, const char* name, std::vector<float> v,
                      const std::vector<int64_t>& shape) {
  if (!capi::present(&t)) return;
  capi::check_float(t, name);
  capi::check_shape(t, name, shape);
  capi::check_device(t, name, b.device, b.device_index);
  capi::write_f64(t, std::vector<double>(v.begin(), v.end()), b.stream);
}

// The gradients of the handle's parameters (zeros when no utterance ran), the
// penalty's added, the log-normal's chained.
void write_grads(const timitseg_crf& h, const Batch& b, crf::HostResult& r, const timitseg_crf_grads& g,
                 bool penalty = true) {
  const int64_t C = b.C, K = b.K;
  if (b.dims.B == 0) {
    r.grad_transition.assign(C * C, 0.0f);
    r.grad_duration_bias.assign(K * C, 0.0f);
    r.grad_start.assign(C, 0.0f);
    r.grad_end.assign(C, 0.0f);
  }
  const bool ln = h.p.duration_model == TIMITSEG_DURATION_LOGNORMAL;
  if (penalty && h.p.reg != 0.0)  // reg 0: no penalty, no launch on the zero-copy path either (the same bits)
    crf::l2_penalty<float>(h.p.reg, C, ln ? 0 : K, h.transition.data(), h.duration_bias.data(),
                           r.grad_transition.data(), r.grad_duration_bias.data());
  if (capi::present(&g.scores)) capi::write_score_grad(b, r.grad_cum_scores, g.scores);
  write_param_grad(b, g.transition, "grads.transition", r.grad_transition, {C, C});
  write_param_grad(b, g.duration_bias, "grads.duration_bias", r.grad_duration_bias, {K, C});
  write_param_grad(b, g.start, "grads.start", r.grad_start, {C});
  write_param_grad(b, g.end, "grads.end", r.grad_end, {C});
  if (capi::present(&g.duration_lognormal)) {
    if (!ln) throw ApiError(TIMITSEG_ERR_ARGUMENT, "grads.duration_lognormal given, but the duration model is TABLE");
    std::vector<float> table = r.grad_duration_bias, gl(static_cast<size_t>(3 * C));
    timitseg::crf::lognormal_duration_backward(static_cast<int>(K), static_cast<int>(C), h.duration_lognormal.data(),
                                                 table.data(), gl.data());
    write_param_grad(b, g.duration_lognormal, "grads.duration_lognormal", gl, {3, C});
  }
  if (capi::present(&g.onset)) {
    if (b.onset.empty()) throw ApiError(TIMITSEG_ERR_ARGUMENT, "grads.onset given, but the batch has no onset");
    std::vector<double> kept(r.grad_onset.begin(), r.grad_onset.end());
    capi::write_rows(b, kept, b.T * C, g.onset, "grads.onset", {b.B, b.T, C});
  }
}

// Every output of nll checked before any work (a failed call writes nothing).
void check_outputs(const timitseg_crf& h, const Batch& b, const timitseg_tensor& out, const timitseg_crf_grads* g,
                   const char* out_name = "nll") {
  const int64_t C = b.C, K = b.K;
  auto check = [&](const timitseg_tensor& t, const char* name, const std::vector<int64_t>& shape) {
    if (!capi::present(&t)) return;
    capi::check_float(t, name);
    capi::check_shape(t, name, shape);
    capi::check_device(t, name, b.device, b.device_index);
  };
  check(out, out_name, {b.B});
  if (!g) return;
  check(g->scores, "grads.scores", {b.B, b.cumulative ? b.T + 1 : b.T, C});
  check(g->transition, "grads.transition", {C, C});
  check(g->duration_bias, "grads.duration_bias", {K, C});
  check(g->start, "grads.start", {C});
  check(g->end, "grads.end", {C});
  check(g->duration_lognormal, "grads.duration_lognormal", {3, C});
  check(g->onset, "grads.onset", {b.B, b.T, C});
  if (capi::present(&g->duration_lognormal) && h.p.duration_model != TIMITSEG_DURATION_LOGNORMAL)
    throw ApiError(TIMITSEG_ERR_ARGUMENT, "grads.duration_lognormal given, but the duration model is TABLE");
  if (capi::present(&g->onset) && b.onset.empty())
    throw ApiError(TIMITSEG_ERR_ARGUMENT, "grads.onset given, but the batch has no onset");
}

void nll_general(timitseg_crf* h, const timitseg_crf_batch* in, const timitseg_crf_gold* gold, double scale,
                 timitseg_tensor* out, const timitseg_crf_grads* grads);

// The zero-copy path (crf_fast.h; cuda: everything queued, one wait at the
// end, capi/crf_deferred.cpp), else the general path.
void nll(timitseg_crf* h, const timitseg_crf_batch* in, const timitseg_crf_gold* gold, double scale,
         timitseg_tensor* out, const timitseg_crf_grads* grads) {
  need(h, "crf");
  need(in, "batch");
  need(gold, "gold");
  need(out, "nll");
  if (h->cuda) {
    capi::check_nll(*h, capi::nll_deferred(*h, *in, *gold, scale, *out, grads));
    return;
  }
  if (capi::fast_nll(*h, *in, *gold, scale, *out, grads)) return;
  nll_general(h, in, gold, scale, out, grads);
}

// The general path of nll (capi::nll_general).
void nll_general(timitseg_crf* h, const timitseg_crf_batch* in, const timitseg_crf_gold* gold, double scale,
                 timitseg_tensor* out, const timitseg_crf_grads* grads) {
  Batch b = prepare(h, in);
  need(gold, "gold");
  need(out, "nll");
  check_outputs(*h, b, *out, grads);
  const bool by_labels = capi::present(&gold->labels);
  if (by_labels == capi::present(&gold->segments))
    throw ApiError(TIMITSEG_ERR_ARGUMENT, "gold: give exactly one of labels and segments");
  if (!std::isfinite(scale)) throw ApiError(TIMITSEG_ERR_ARGUMENT, "scale must be finite");
  std::vector<int32_t> labels;
  std::vector<std::vector<crf::Segment>> segs;
  if (by_labels) {
    capi::check_int(gold->labels, "gold.labels");
    capi::check_shape(gold->labels, "gold.labels", {b.B, b.T});
    capi::check_device(gold->labels, "gold.labels", b.device, b.device_index);
    const std::vector<int64_t> all = capi::read_i64(gold->labels, b.stream);
    check_labels(b, all, b.T, "gold.labels", [&](int64_t r) { return static_cast<int64_t>(b.lengths[r]); });
    labels = b.gather_rows(all, b.T);
  } else {
    segs = gold_from_segments(*h, b, *gold);
  }
  if (b.f64) {  // float64 end to end (capi/crf_f64.h)
    capi::nll_f64(*h, b, by_labels ? &labels : nullptr, by_labels ? nullptr : &segs, scale, *out, grads);
    return;
  }
  crf::HostRunOptions o;
  o.gradients = grads != nullptr;
  o.viterbi = false;
  o.scale = scale;
  crf::HostResult r = run(*h, b, by_labels ? labels.data() : nullptr, o);
  std::vector<double> v(b.rows.size());
  for (size_t k = 0; k < b.rows.size(); ++k)
    v[k] = r.log_z[k] - (by_labels ? r.gold[k] : gold_score(*h, b, k, segs[k], scale, grads ? &r : nullptr));
  capi::write_rows(b, v, 1, *out, "nll", {b.B});
  if (grads) write_grads(*h, b, r, *grads);
}

// timitseg_crf_log_partition_grads: the gradients of scale * sum log Z (no gold, no penalty).
void log_partition_grads(timitseg_crf* h, const timitseg_crf_batch* in, double scale, timitseg_tensor* log_z,
                         const timitseg_crf_grads* grads) {
  Batch b = prepare(h, in);
  need(log_z, "log_z");
  need(grads, "grads");
  check_outputs(*h, b, *log_z, grads, "log_z");
  if (!std::isfinite(scale)) throw ApiError(TIMITSEG_ERR_ARGUMENT, "scale must be finite");
  if (b.f64) return capi::nll_f64(*h, b, nullptr, nullptr, scale, *log_z, grads);  // gold absent: log Z
  crf::HostRunOptions o;
  o.viterbi = false;
  o.scale = scale;
  crf::HostResult r = run(*h, b, nullptr, o);
  capi::write_rows(b, r.log_z, 1, *log_z, "log_z", {b.B});
  write_grads(*h, b, r, *grads, false);
}

void viterbi(timitseg_crf* h, const timitseg_crf_batch* in, timitseg_tensor* score, timitseg_tensor* segments,
             timitseg_tensor* num_segments) {
  Batch b = prepare(h, in);
  need(score, "score");
  need(segments, "segments");
  need(num_segments, "num_segments");
  capi::check_int(*segments, "segments");
  capi::check_int(*num_segments, "num_segments");
  capi::check_shape(*segments, "segments", {b.B, b.T, 3});
  capi::check_shape(*num_segments, "num_segments", {b.B});
  capi::check_device(*segments, "segments", b.device, b.device_index);
  capi::check_device(*num_segments, "num_segments", b.device, b.device_index);
  capi::check_float(*score, "score");
  capi::check_shape(*score, "score", {b.B});
  capi::check_device(*score, "score", b.device, b.device_index);
  crf::HostResult r = run_viterbi(*h, b);
  std::vector<int32_t> rows(static_cast<size_t>(b.B * b.T * 3), 0), counts(static_cast<size_t>(b.B), 0);
  for (const crf::Segment& s : r.segments) {
    const int64_t row = b.rows[s.batch];
    int32_t* dst = rows.data() + (row * b.T + counts[row]++) * 3;
    dst[0] = s.start, dst[1] = s.duration, dst[2] = s.label;
  }
  capi::write_rows(b, r.viterbi_score, 1, *score, "score", {b.B});
  capi::write_i32(*segments, rows, b.stream);
  capi::write_i32(*num_segments, counts, b.stream);
}

void marginals(timitseg_crf* h, const timitseg_crf_batch* in, timitseg_tensor* boundaries, timitseg_tensor* frames) {
  Batch b = prepare(h, in);
  const int64_t T = b.T, C = b.C;
  for (auto [t, name, shape] : {std::tuple{boundaries, "boundaries", std::vector<int64_t>{b.B, T + 1}},
                                std::tuple{frames, "frames", std::vector<int64_t>{b.B, T, C}}})
    if (capi::present(t)) {
      capi::check_float(*t, name);
      capi::check_shape(*t, name, shape);
      capi::check_device(*t, name, b.device, b.device_index);
    }
  if (b.f64) {  // float64 end to end (capi/crf_f64.h)
    capi::marginals_f64(*h, b, boundaries, frames);
    return;
  }
  if (capi::present(boundaries)) {
    std::vector<double> bp(static_cast<size_t>(b.dims.B * (T + 1)));
    if (b.dims.B > 0 && !h->cuda) {  // host backends: the one call (run_host would add a log_partition)
      on_kept(b, [&] {
        crf::validate_host(b.dims, b.params(*h), nullptr);
        h->session->boundary_posteriors(b.dims, b.params(*h), bp.data());
      });
    } else if (b.dims.B > 0) {
      crf::HostRunOptions o;
      o.gradients = false;
      o.viterbi = false;
      o.boundary_posteriors = true;
      bp = run(*h, b, nullptr, o).boundary_posteriors;
    }
    capi::write_rows(b, bp, T + 1, *boundaries, "boundaries", {b.B, T + 1});
  }
  if (capi::present(frames)) {
    crf::HostRunOptions o;
    o.viterbi = false;
    const crf::HostResult r = run(*h, b, nullptr, o);
    std::vector<double> m(static_cast<size_t>(b.dims.B * T * C));
    if (b.dims.B > 0) crf::frame_marginals(b.dims, r.grad_cum_scores.data(), b.len.data(), m.data());
    capi::write_rows(b, m, T * C, *frames, "frames", {b.B, T, C});
  }
}

// The phone inputs of align and transcript_nll, checked (shapes, device, counts, labels), kept rows gathered.
struct PhoneInputs {
  int64_t N = 0;
  std::vector<int32_t> ph, np, opt;  // [B'][N], [B'], [B'][N] or empty
  const int32_t* optional() const { return opt.empty() ? nullptr : opt.data(); }
};
PhoneInputs read_phones(const Batch& b, const timitseg_tensor* phones, const timitseg_tensor* num_phones,
                        const timitseg_tensor* optional) {
  need(phones, "phones");
  need(num_phones, "num_phones");
  capi::check_int(*phones, "phones");
  capi::check_int(*num_phones, "num_phones");
  PhoneInputs x;
  const int64_t N = x.N = capi::check_shape(*phones, "phones", {b.B, -1})[1];
  capi::check_shape(*num_phones, "num_phones", {b.B});
  capi::check_device(*phones, "phones", b.device, b.device_index);
  capi::check_device(*num_phones, "num_phones", b.device, b.device_index);
  const std::vector<int64_t> nph = capi::read_i64(*num_phones, b.stream);
  for (int64_t r = 0; r < b.B; ++r)
    if (b.lengths[r] == 0 ? nph[r] != 0 : (nph[r] < 1 || nph[r] > N))
      throw ApiError(TIMITSEG_ERR_LENGTH, "num_phones[" + std::to_string(r) + "] = " + std::to_string(nph[r]) +
                                              (b.lengths[r] == 0 ? " for an utterance of length 0 (must be 0)"
                                                                 : " is outside [1, N = " + std::to_string(N) + "]"));
  if (capi::present(optional)) {
    capi::check_int(*optional, "optional");
    capi::check_shape(*optional, "optional", {b.B, N});
    capi::check_device(*optional, "optional", b.device, b.device_index);
    x.opt = b.gather_rows(capi::read_i64(*optional, b.stream), N);
  }
  if (b.dims.B > 0 && N > 0) {
    const std::vector<int64_t> all = capi::read_i64(*phones, b.stream);
    check_labels(b, all, N, "phones", [&](int64_t r) { return nph[r]; });
    x.ph = b.gather_rows(all, N);
    x.np = b.gather_rows(nph, 1);
  }
  return x;
}

// timitseg_crf_transcript_nll and _graph_nll (docs/crf.md "Training from transcripts"): the general path.
// links (the graph) or optional, at most one present.
void transcript_nll(timitseg_crf* h, const timitseg_crf_batch* in, const timitseg_tensor* phones,
                    const timitseg_tensor* num_phones, const timitseg_tensor* optional, const timitseg_tensor* links,
                    double scale, timitseg_tensor* out, const timitseg_crf_grads* grads) {
  Batch b = prepare(h, in);
  need(out, "nll");
  check_outputs(*h, b, *out, grads);
  if (!std::isfinite(scale)) throw ApiError(TIMITSEG_ERR_ARGUMENT, "scale must be finite");
  const PhoneInputs x = read_phones(b, phones, num_phones, optional);
  std::vector<int32_t> lk;  // [B'][N] the kept rows' links, or empty
  if (links) {
    need(links, "links");
    capi::check_int(*links, "links");
    capi::check_shape(*links, "links", {b.B, x.N});
    capi::check_device(*links, "links", b.device, b.device_index);
    lk = b.gather_rows(capi::read_i64(*links, b.stream), x.N);
    crf::validate_links_host(b.dims.B, x.N, x.np.data(), lk.data());
  }
  const int32_t* lp = lk.empty() ? nullptr : lk.data();
  if (b.f64) return capi::transcript_f64(*h, b, x.N, x.ph, x.np, x.opt, lk, scale, *out, grads);
  crf::TranscriptResult t;
  if (b.dims.B > 0)
    t = on_kept(b, [&] {
      return h->session->transcript_host(b.dims, b.params(*h), x.N, x.ph.data(), x.np.data(), x.optional(), scale,
                                         lp);
    });
  std::vector<double> v(b.rows.size());
  for (size_t k = 0; k < b.rows.size(); ++k) v[k] = t.log_z[k] - t.log_z_c[k];
  capi::write_rows(b, v, 1, *out, "nll", {b.B});
  if (!grads) return;
  crf::HostResult r;
  r.grad_cum_scores = std::move(t.grad_cum_scores);
  r.grad_transition = std::move(t.grad_transition);
  r.grad_duration_bias = std::move(t.grad_duration_bias);
  r.grad_start = std::move(t.grad_start);
  r.grad_end = std::move(t.grad_end);
  r.grad_onset = std::move(t.grad_onset);
  write_grads(*h, b, r, *grads);
}

void align(timitseg_crf* h, const timitseg_crf_batch* in, const timitseg_tensor* phones,
           const timitseg_tensor* num_phones, const timitseg_tensor* optional, timitseg_tensor* score,
           timitseg_tensor* spans) {
  Batch b = prepare(h, in);
  need(score, "score");
  need(spans, "spans");
  need(phones, "phones");
  const int64_t N = capi::check_shape(*phones, "phones", {b.B, -1})[1];
  capi::check_int(*spans, "spans");
  capi::check_shape(*spans, "spans", {b.B, N, 2});
  capi::check_device(*spans, "spans", b.device, b.device_index);
  capi::check_float(*score, "score");
  capi::check_shape(*score, "score", {b.B});
  capi::check_device(*score, "score", b.device, b.device_index);
  const PhoneInputs x = read_phones(b, phones, num_phones, optional);
  std::vector<double> sc;
  std::vector<int32_t> sp(static_cast<size_t>(b.B * N * 2), 0);
  if (b.dims.B > 0 && N > 0) {
    const crf::AlignResult a = on_kept(b, [&] {
      return h->session->align_host(b.dims, b.params(*h), N, x.ph.data(), x.np.data(), x.optional());
    });
    sc = a.score;
    for (size_t k = 0; k < b.rows.size(); ++k)
      std::copy(a.spans.begin() + k * N * 2, a.spans.begin() + (k + 1) * N * 2, sp.begin() + b.rows[k] * N * 2);
  }
  capi::write_rows(b, sc, 1, *score, "score", {b.B});
  capi::write_i32(*spans, sp, b.stream);
}

}  // namespace

void timitseg::capi::nll_general(timitseg_crf* h, const timitseg_crf_batch* in, const timitseg_crf_gold* gold,
                                 double scale, timitseg_tensor* out, const timitseg_crf_grads* grads) {
  ::nll_general(h, in, gold, scale, out, grads);
}

extern "C" {

const char* timitseg_last_error(void) { return capi::last_error(); }

int timitseg_crf_log_partition(timitseg_crf* crf, const timitseg_crf_batch* batch, timitseg_tensor* log_z) {
  return guard("timitseg_crf_log_partition", [&] {
    const capi::OnHandleDevice on(crf);
    need(crf, "crf");
    need(batch, "batch");
    need(log_z, "log_z");
    if (capi::fast_log_partition(*crf, *batch, *log_z)) return;  // the zero-copy path (crf_fast.h)
    Batch b = prepare(crf, batch);
    if (b.f64) return capi::log_partition_f64(*crf, b, *log_z);  // float64 end to end (capi/crf_f64.h)
    crf::HostRunOptions o;
    o.gradients = false;
    o.viterbi = false;
    capi::write_rows(b, run(*crf, b, nullptr, o).log_z, 1, *log_z, "log_z", {b.B});
  });
}

int timitseg_crf_log_partition_grads(timitseg_crf* crf, const timitseg_crf_batch* batch, double scale,
                                     timitseg_tensor* log_z, const timitseg_crf_grads* grads) {
  return guard("timitseg_crf_log_partition_grads", [&] {
    const capi::OnHandleDevice on(crf);
    log_partition_grads(crf, batch, scale, log_z, grads);
  });
}

int timitseg_crf_nll(timitseg_crf* crf, const timitseg_crf_batch* batch, const timitseg_crf_gold* gold, double scale,
                     timitseg_tensor* out, const timitseg_crf_grads* grads) {
  return guard("timitseg_crf_nll", [&] {
    const capi::OnHandleDevice on(crf);
    nll(crf, batch, gold, scale, out, grads);
  });
}

int timitseg_crf_viterbi(timitseg_crf* crf, const timitseg_crf_batch* batch, timitseg_tensor* score,
                         timitseg_tensor* segments, timitseg_tensor* num_segments) {
  return guard("timitseg_crf_viterbi", [&] {
    const capi::OnHandleDevice on(crf);
    if (crf && batch && score && segments && num_segments && capi::fast_viterbi(*crf, *batch, *score, *segments,
                                                                                 *num_segments))
      return;  // the zero-copy path (crf_fast.h)
    viterbi(crf, batch, score, segments, num_segments);
  });
}

int timitseg_crf_marginals(timitseg_crf* crf, const timitseg_crf_batch* batch, timitseg_tensor* boundaries,
                           timitseg_tensor* frames) {
  return guard("timitseg_crf_marginals", [&] {
    const capi::OnHandleDevice on(crf);
    marginals(crf, batch, boundaries, frames);
  });
}

int timitseg_crf_transcript_nll(timitseg_crf* crf, const timitseg_crf_batch* batch, const timitseg_tensor* phones,
                                const timitseg_tensor* num_phones, const timitseg_tensor* optional, double scale,
                                timitseg_tensor* nll, const timitseg_crf_grads* grads) {
  return guard("timitseg_crf_transcript_nll", [&] {
    const capi::OnHandleDevice on(crf);
    transcript_nll(crf, batch, phones, num_phones, optional, nullptr, scale, nll, grads);
  });
}

int timitseg_crf_transcript_graph_nll(timitseg_crf* crf, const timitseg_crf_batch* batch,
                                      const timitseg_tensor* phones, const timitseg_tensor* num_phones,
                                      const timitseg_tensor* links, double scale, timitseg_tensor* nll,
                                      const timitseg_crf_grads* grads) {
  return guard("timitseg_crf_transcript_graph_nll", [&] {
    const capi::OnHandleDevice on(crf);
    if (!capi::present(links)) throw ApiError(TIMITSEG_ERR_ARGUMENT, "links is missing (the phone graph [B][N])");
    transcript_nll(crf, batch, phones, num_phones, nullptr, links, scale, nll, grads);
  });
}

int timitseg_crf_align(timitseg_crf* crf, const timitseg_crf_batch* batch, const timitseg_tensor* phones,
                       const timitseg_tensor* num_phones, const timitseg_tensor* optional, timitseg_tensor* score,
                       timitseg_tensor* spans) {
  return guard("timitseg_crf_align", [&] {
    const capi::OnHandleDevice on(crf);
    align(crf, batch, phones, num_phones, optional, score, spans);
  });
}

}  // extern "C"
