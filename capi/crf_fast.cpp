// The zero-copy path of the C API's CRF calls (crf_fast.h).
#include "capi/crf_fast.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <stdexcept>

#include "common/cuda.h"
#include "crf/cumsum.h"
#include "crf/device_layers.h"
#include "crf/phone_bonus.h"

namespace timitseg::capi {
namespace {

int space(const timitseg_crf& h) { return h.cuda ? TIMITSEG_DEVICE_CUDA : TIMITSEG_DEVICE_CPU; }

// t has exactly `shape`, dtype `dtype` (or `dtype2`), is contiguous, has data, and lives in h's space
// (for cuda, on the handle's device).
bool fits(const timitseg_crf& h, const timitseg_tensor& t, std::initializer_list<int64_t> shape, int dtype,
          int dtype2 = -1) {
  if (t.data == nullptr || t.device != space(h) || (t.dtype != dtype && t.dtype != dtype2)) return false;
  if (h.cuda && t.device_index != h.cuda_device) return false;  // the general path names it
  if (t.ndim != static_cast<int>(shape.size())) return false;
  int i = 0;
  for (int64_t s : shape)
    if (t.shape[i++] != s) return false;
  return is_contiguous(t);
}

// The host backends' checks that the general path words better: a
// non-finite score on a valid row (frame scores rows 0..L-1, cumulative 1..L).
bool finite_scores(const timitseg_crf& h, const timitseg_crf_batch& in, int64_t B, int64_t rows, int64_t C) {
  const float* x = static_cast<const float*>(in.scores.data);
  const int64_t first = in.cumulative ? 1 : 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = first * C; i < (h.fast_lengths[b] + first) * C; ++i)
      if (!std::isfinite(x[b * rows * C + i])) return false;
  return true;
}

// cum [B][T+1][C] for the backend in h.fast_cum: the centered cumsum of frame
// scores, or the caller's cumulative scores with row 0 and rows past the
// length set to 0 (what the general path copies).
float* make_cum(timitseg_crf& h, const timitseg_crf_batch& in, int64_t B, int64_t T, int64_t C) {
  h.fast_cum.reserve(static_cast<size_t>(B * (T + 1) * C) * sizeof(float));
  float* cum = h.fast_cum.as<float>();
  const float* x = static_cast<const float*>(in.scores.data);
  const int32_t* len = static_cast<const int32_t*>(in.lengths.data);
  const int Bi = static_cast<int>(B), Ti = static_cast<int>(T), Ci = static_cast<int>(C);
  if (h.cuda && in.cumulative) {
    crf::device::copy_cumulative(Bi, Ti, Ci, x, len, cum, in.stream);
  } else if (h.cuda) {
    crf::device::centered_cumsum_forward(Bi, Ti, Ci, x, len, cum, in.stream);
  } else if (in.cumulative) {
    const int64_t row = (T + 1) * C;
    std::fill(cum, cum + B * row, 0.0f);
    for (int64_t b = 0; b < B; ++b) std::copy(x + b * row + C, x + b * row + (len[b] + 1) * C, cum + b * row + C);
  } else {
    crf::centered_cumsum_forward<float>(B, T, C, x, len, cum);
  }
  return cum;
}

// The parts common to both calls: the scores and lengths qualify, cum
// [B][T+1][C] is in h.fast_cum. Host backends: every length is in [1, T] and
// every valid score finite (else false: the general path). cuda: the lengths
// are not read back (no host wait); the backend's device check rejects one
// outside [1, T] (std::invalid_argument, before any output is written), and
// the caller then falls back to the general path (run_or_fall_back).
// On success fills dims and the backend's Params (the handle's parameters).
bool begin(timitseg_crf& h, const timitseg_crf_batch& in, crf::Dims& d, crf::Params& p) {
  const timitseg_tensor& s = in.scores;
  if (present(&in.onset) || s.ndim != 3) return false;
  const int64_t B = s.shape[0], rows = s.shape[1], T = in.cumulative ? rows - 1 : rows, C = h.p.num_labels;
  if (B < 1 || T < 1 || B > INT32_MAX || T >= INT32_MAX || !fits(h, s, {B, rows, C}, TIMITSEG_F32)) return false;
  if (!fits(h, in.lengths, {B}, TIMITSEG_I32)) return false;
  if (h.fast_pending && h.fast_stream != in.stream) settle(h);
  resolve_deferred(h);  // the backend's status word is free again (a wait only when a deferred call is unchecked)
  if (!h.cuda) {
    h.fast_lengths.resize(static_cast<size_t>(B));
    std::memcpy(h.fast_lengths.data(), in.lengths.data, static_cast<size_t>(B) * sizeof(int32_t));
    for (int32_t L : h.fast_lengths)
      if (L < 1 || L > T) return false;  // rows of length 0 and errors: the general path
    if (!finite_scores(h, in, B, rows, C)) return false;
  }
  const Memory mem = h.cuda ? Memory::device : Memory::host;
  for (Buffer* buf : {&h.fast_cum, &h.fast_gcum, &h.fast_scratch, &h.fast_lz, &h.fast_gold, &h.fast_penalty})
    if (buf->memory() != mem) buf->set_memory(mem);
  h.fast_lz.reserve(static_cast<size_t>(B) * sizeof(double));
  h.fast_gold.reserve(static_cast<size_t>(B) * sizeof(double));
  d = crf::Dims{B, T, h.p.max_duration, C};
  p = crf::Params();
  p.cum_scores = make_cum(h, in, B, T, C);
  p.lengths = static_cast<const int32_t*>(in.lengths.data);
  const ParamPtrs pp = param_ptrs(h);
  p.transition = pp.transition;
  p.duration_bias = pp.duration_bias;
  p.start = pp.start;
  p.end = pp.end;
  return true;
}

// Runs f with the backend on the caller's stream (restored after); the
// work queued last may still run when it returns (settle()). Returns false
// when the cuda backend's device check rejected an input (a length outside
// [1, T], a label outside [0, C), a non-finite score: std::invalid_argument,
// thrown before any output is written): the general path then runs, handling
// rows of length 0 and wording any error as it does for every call.
template <class F>
bool on_stream(timitseg_crf& h, void* stream, F f) {
  void* const old = h.backend->stream();
  h.backend->set_stream(stream);
  h.fast_stream = stream;
  h.fast_pending = h.cuda;
  try {
    f();
  } catch (const std::invalid_argument&) {
    h.backend->set_stream(old);
    if (!h.cuda) throw;
    try {
      h.backend->check_deferred();  // a deferred call queued before the throw: its status word freed
    } catch (const std::exception&) {
    }
    settle(h);
    return false;
  } catch (...) {
    h.backend->set_stream(old);
    throw;
  }
  h.backend->set_stream(old);
  return true;
}

// out[b] = a[b] - g[b] (g nullptr: a[b]) in double, stored in out's dtype.
void difference(const timitseg_crf& h, int64_t B, const double* a, const double* g, const timitseg_tensor& out,
                void* stream) {
  const bool f64 = out.dtype == TIMITSEG_F64;
  if (h.cuda) {
    crf::device::difference_rows(static_cast<int>(B), a, g, out.data, f64, stream);
    return;
  }
  (void)stream;
  for (int64_t b = 0; b < B; ++b) {
    const double v = g ? a[b] - g[b] : a[b];
    if (f64)
      static_cast<double*>(out.data)[b] = v;
    else
      static_cast<float*>(out.data)[b] = static_cast<float>(v);
  }
}

// Host backends: every label of a valid frame in [0, C) (else false: the general path names the
// one outside as gold.labels). The cuda backend checks them on the device: true.
bool host_labels_in_range(const timitseg_crf& h, const int32_t* labels, int64_t B, int64_t T, int64_t C) {
  if (h.cuda) return true;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < h.fast_lengths[b]; ++t)
      if (labels[b * T + t] < 0 || labels[b * T + t] >= C) return false;
  return true;
}

// The backend's status read deferred while it lives (host backends: a no-op).
struct Deferring {
  crf::Backend& b;
  Deferring(crf::Backend& backend, bool on) : b(backend) { b.set_defer_status(on); }
  ~Deferring() { b.set_defer_status(false); }
};

float* ptr(const timitseg_tensor& t) { return present(&t) ? static_cast<float*>(t.data) : nullptr; }

// The grads qualify: each present one float32, contiguous, of its shape, in h's
// space; scores [B][rows][C] as the scores (rows = T, or T+1 when cumulative).
bool grads_fit(const timitseg_crf& h, const timitseg_crf_grads& g, int64_t B, int64_t rows) {
  const int64_t C = h.p.num_labels, K = h.p.max_duration;
  if (present(&g.duration_lognormal) || present(&g.onset)) return false;
  const auto ok = [&](const timitseg_tensor& t, std::initializer_list<int64_t> shape) {
    return !present(&t) || fits(h, t, shape, TIMITSEG_F32);
  };
  return ok(g.scores, {B, rows, C}) && ok(g.transition, {C, C}) && ok(g.duration_bias, {K, C}) && ok(g.start, {C}) &&
         ok(g.end, {C});
}

// The backward's gradients into the caller's tensors: the frame scores'
// through the centering (cumulative scores', and with frames_done the frame
// scores': the backend wrote them), the penalty's added to transition and
// duration_bias.
void finish_grads(timitseg_crf& h, const crf::Dims& d, const int32_t* len, const timitseg_crf_grads& g,
                  bool cumulative, bool frames_done, void* stream) {
  const int64_t C = d.C, K = d.K;
  const bool ln = h.p.duration_model == TIMITSEG_DURATION_LOGNORMAL;
  const float* gcum = h.fast_gcum.as<float>();
  float* gx = cumulative || frames_done ? nullptr : ptr(g.scores);  // frames_done: the backend wrote it
  const ParamPtrs pp = param_ptrs(h);
  if (h.cuda) {
    h.fast_penalty.reserve(sizeof(double));
    if (h.p.reg != 0.0)  // reg 0 adds nothing (as write_grads of the general path skips it)
      crf::device::l2_penalty(h.p.reg, static_cast<int>(C), ln ? 0 : static_cast<int>(K), pp.transition,
                                pp.duration_bias, ptr(g.transition), ptr(g.duration_bias), h.fast_penalty.as<double>(),
                                stream);
    if (gx) {
      const int B = static_cast<int>(d.B), T = static_cast<int>(d.T), Ci = static_cast<int>(C);
      h.fast_scratch.reserve(crf::device::centered_cumsum_scratch_bytes(B, T, Ci));
      crf::device::centered_cumsum_backward(B, T, Ci, gcum, len, h.fast_scratch.data(), gx, stream);
    }
    return;
  }
  (void)stream;
  if (h.p.reg != 0.0)
    crf::l2_penalty<float>(h.p.reg, C, ln ? 0 : K, pp.transition, pp.duration_bias, ptr(g.transition),
                           ptr(g.duration_bias));
  if (gx) crf::centered_cumsum_backward<float>(d.B, d.T, C, gcum, len, gx);
}

}  // namespace

ParamPtrs param_ptrs(const timitseg_crf& h) {
  if (h.bound) {
    const auto at = [&](int i) { return static_cast<const float*>(h.bound_params[i].data); };
    return {at(0), at(1), at(2), at(3)};
  }
  if (h.cuda) {
    const size_t K = static_cast<size_t>(h.p.max_duration), C = static_cast<size_t>(h.p.num_labels);
    const float* base = h.dev_params.as<float>();
    return {base, base + C * C, base + C * C + K * C, base + C * C + K * C + C};
  }
  return {h.transition.data(), h.duration_bias.data(), h.start.data(), h.end.data()};
}

void refresh_bound(timitseg_crf& h, void* stream) {
  if (!h.bound) return;
  if (stream == nullptr) settle(h);
  std::vector<float>* dst[4] = {&h.transition, &h.duration_bias, &h.start, &h.end};
  std::vector<double>* dst64[4] = {&h.transition64, &h.duration_bias64, &h.start64, &h.end64};
  for (int i = 0; i < 4; ++i) {
    const std::vector<double> v = read_f64(h.bound_params[i], stream);
    std::copy(v.begin(), v.end(), dst[i]->begin());  // float32 values: exact both ways
    *dst64[i] = v;
  }
}

void settle(timitseg_crf& h) {
  resolve_deferred(h);
  if (!h.fast_pending) return;
  h.fast_pending = false;
  cuda::stream_synchronize(h.fast_stream);
}

void upload_params(timitseg_crf& h) {
  if (!h.cuda) return;
  settle(h);
  std::vector<float> all(h.transition);
  all.insert(all.end(), h.duration_bias.begin(), h.duration_bias.end());
  all.insert(all.end(), h.start.begin(), h.start.end());
  all.insert(all.end(), h.end.begin(), h.end.end());
  h.dev_params.set_memory(Memory::device);
  h.dev_params.upload(all);  // a synchronous copy: the next call on any stream sees it
  if (h.p.phone_bonus != 0.0) {
    std::vector<float> bonus(h.transition.size());
    crf::add_phone_bonus(h.transition.data(), h.p.num_labels, static_cast<float>(h.p.phone_bonus), bonus.data());
    h.dev_bonus.set_memory(Memory::device);
    h.dev_bonus.upload(bonus);
  }
}

bool fast_log_partition(timitseg_crf& h, const timitseg_crf_batch& in, const timitseg_tensor& log_z) {
  crf::Dims d;
  crf::Params p;
  const timitseg_tensor& s = in.scores;
  if (s.ndim != 3 || !fits(h, log_z, {s.shape[0]}, TIMITSEG_F32, TIMITSEG_F64) || !begin(h, in, d, p)) return false;
  // float64 log_z is written by the backend itself (no conversion kernel)
  const bool direct = log_z.dtype == TIMITSEG_F64;
  double* lz = direct ? static_cast<double*>(log_z.data) : h.fast_lz.as<double>();
  const bool done = on_stream(h, in.stream, [&] {
    h.session->log_partition(d, p, lz);
    if (!direct) difference(h, d.B, lz, nullptr, log_z, in.stream);
  });
  if (!done) return false;
  ++h.fast_calls;
  return true;
}

bool fast_nll_begin(timitseg_crf& h, BegunNll& bn) {
  const timitseg_crf_batch& in = bn.batch;
  const timitseg_tensor& s = in.scores;
  if (s.ndim != 3 || !std::isfinite(bn.scale) || present(&bn.gold.segments) || present(&bn.gold.num_segments))
    return false;
  const bool cumulative = in.cumulative != 0;
  const int64_t B = s.shape[0], T = cumulative ? s.shape[1] - 1 : s.shape[1];
  if (!fits(h, bn.gold.labels, {B, T}, TIMITSEG_I32)) return false;
  crf::Dims d;
  crf::Params p;
  if (!begin(h, in, d, p)) return false;
  const int32_t* labels = static_cast<const int32_t*>(bn.gold.labels.data);
  if (!host_labels_in_range(h, labels, B, T, d.C)) return false;
  bn.frames = !cumulative && h.backend->fuses_frame_grads(d);
  static float wanted_marker;  // only which gradients are non-null is read (Backend::backward_begin)
  crf::Grads wanted;
  wanted.transition = wanted.duration_bias = wanted.start = wanted.end = &wanted_marker;
  (bn.frames ? wanted.frame_scores : wanted.cum_scores) = &wanted_marker;
  const bool done = on_stream(h, in.stream, [&] {
    h.session->backward_begin(d, p, labels, bn.scale, h.fast_lz.as<double>(), h.fast_gold.as<double>(), wanted);
  });
  if (!done) return false;
  bn.dims = d;
  bn.queued = true;
  return true;
}

void finish_dropped(timitseg_crf& h, void* stream) {
  void* const old = h.backend->stream();
  h.backend->set_stream(stream);
  h.backend->set_defer_status(false);
  try {
    h.session->backward_finish(crf::Grads{});  // the status read (a wait) and dropped: the call's owner is gone
  } catch (const std::exception&) {
  }
  h.backend->set_stream(old);
}

bool fast_nll_end(timitseg_crf& h, BegunNll& bn, const timitseg_tensor& out, const timitseg_crf_grads* grads,
                  bool defer) {
  const timitseg_crf_batch& in = bn.batch;
  const bool cumulative = in.cumulative != 0;
  const crf::Dims d = bn.dims;
  if (!fits(h, out, {d.B}, TIMITSEG_F32, TIMITSEG_F64) ||
      (grads && !grads_fit(h, *grads, d.B, cumulative ? d.T + 1 : d.T))) {
    finish_dropped(h, in.stream);
    return false;
  }
  const int32_t* len = static_cast<const int32_t*>(in.lengths.data);
  double* lz = h.fast_lz.as<double>();
  double* gs = h.fast_gold.as<double>();
  const Deferring deferring(*h.backend, defer);
  const bool done = on_stream(h, in.stream, [&] {
    crf::Grads g;
    if (grads) {
      g.transition = ptr(grads->transition);
      g.duration_bias = ptr(grads->duration_bias);
      g.start = ptr(grads->start);
      g.end = ptr(grads->end);
      if (present(&grads->scores)) {
        if (bn.frames) {
          g.frame_scores = ptr(grads->scores);
        } else if (cumulative) {
          g.cum_scores = ptr(grads->scores);
        } else {
          h.fast_gcum.reserve(static_cast<size_t>(d.B * (d.T + 1) * d.C) * sizeof(float));
          g.cum_scores = h.fast_gcum.as<float>();
        }
      }
    }
    h.session->backward_finish(g);
    if (grads) finish_grads(h, d, len, *grads, cumulative, bn.frames, in.stream);
    difference(h, d.B, lz, gs, out, in.stream);
    if (defer) h.backend->mark_deferred_end();  // its check then waits for this call's work only
  });
  if (!done) return false;
  ++h.fast_calls;
  return true;
}

bool fast_nll(timitseg_crf& h, const timitseg_crf_batch& in, const timitseg_crf_gold& gold, double scale,
              const timitseg_tensor& out, const timitseg_crf_grads* grads, bool defer) {
  const timitseg_tensor& s = in.scores;
  if (s.ndim != 3 || !std::isfinite(scale) || present(&gold.segments) || present(&gold.num_segments)) return false;
  const bool cumulative = in.cumulative != 0;
  const int64_t B = s.shape[0], rows = s.shape[1], T = cumulative ? rows - 1 : rows;
  if (!fits(h, out, {B}, TIMITSEG_F32, TIMITSEG_F64) || !fits(h, gold.labels, {B, T}, TIMITSEG_I32, TIMITSEG_I32))
    return false;
  if (grads) {  // the two halves of timitseg_crf_nll_begin / _end in one go
    if (!grads_fit(h, *grads, B, rows)) return false;
    BegunNll bn;
    bn.batch = in;
    bn.gold = gold;
    bn.scale = scale;
    bn.with_grads = true;
    return fast_nll_begin(h, bn) && fast_nll_end(h, bn, out, grads, defer);
  }
  crf::Dims d;
  crf::Params p;
  if (!begin(h, in, d, p)) return false;
  const int32_t* labels = static_cast<const int32_t*>(gold.labels.data);
  if (!host_labels_in_range(h, labels, B, T, d.C)) return false;
  double* lz = h.fast_lz.as<double>();
  double* gs = h.fast_gold.as<double>();
  const bool done = on_stream(h, in.stream, [&] {
    // two backend calls: only the second one's status is deferred
    h.session->log_partition(d, p, lz);
    {
      const Deferring deferring(*h.backend, defer);
      h.session->gold_score(d, p, labels, gs);
    }
    difference(h, d.B, lz, gs, out, in.stream);
    if (defer) h.backend->mark_deferred_end();
  });
  if (!done) return false;
  ++h.fast_calls;
  return true;
}

bool fast_viterbi(timitseg_crf& h, const timitseg_crf_batch& in, const timitseg_tensor& score,
                  const timitseg_tensor& segments, const timitseg_tensor& num_segments) {
  const timitseg_tensor& s = in.scores;
  if (!h.cuda || s.ndim != 3) return false;  // host backends: the general path reads host memory already
  if (h.bound && h.p.phone_bonus != 0.0) return false;  // the bonus table is made on the host (general path)
  const int64_t B = s.shape[0], T = in.cumulative ? s.shape[1] - 1 : s.shape[1];
  if (!fits(h, score, {B}, TIMITSEG_F32, TIMITSEG_F64) || !fits(h, segments, {B, T, 3}, TIMITSEG_I32) ||
      !fits(h, num_segments, {B}, TIMITSEG_I32))
    return false;
  crf::Dims d;
  crf::Params p;
  if (!begin(h, in, d, p)) return false;
  if (h.p.phone_bonus != 0.0) p.transition = h.dev_bonus.as<float>();  // as the general path's add_phone_bonus
  double* sc = h.fast_lz.as<double>();
  int32_t* seg = static_cast<int32_t*>(segments.data);
  const bool done = on_stream(h, in.stream, [&] {
    // rows past num_segments[b] are 0 (the backend writes each utterance's segments only)
    cuda::memset_device(seg, 0, static_cast<size_t>(B * T * 3) * sizeof(int32_t), in.stream);
    h.session->viterbi(d, p, sc, seg, static_cast<int32_t*>(num_segments.data));
    difference(h, d.B, sc, nullptr, score, in.stream);
  });
  if (!done) return false;
  ++h.fast_calls;
  return true;
}

}  // namespace timitseg::capi
