// The float64 path (capi/crf_f64.h).
#include "capi/crf_f64.h"

#include <cmath>

#include "capi/crf_fast.h"
#include "crf/cumsum.h"
#include "crf/reference/reference.h"
#include "crf/score.h"
#include "crf/duration.h"

namespace timitseg::capi {
namespace {

namespace ref = crf::reference;

// The reference backend's float64 inputs of a batch's kept rows.
struct Inputs {
  std::vector<double> cum, onset, A, D, s, e;
  ref::ParamsF64 p;
  Inputs(const timitseg_crf& h, const Batch& b) {
    if (b.f64) {
      cum = b.cum64, onset = b.onset64;
      A = h.transition64, D = h.duration_bias64, s = h.start64, e = h.end64;
    } else {  // the float32 values as they are (segment posteriors of F32 scores)
      cum.assign(b.cum.begin(), b.cum.end());
      onset.assign(b.onset.begin(), b.onset.end());
      A.assign(h.transition.begin(), h.transition.end());
      D.assign(h.duration_bias.begin(), h.duration_bias.end());
      s.assign(h.start.begin(), h.start.end());
      e.assign(h.end.begin(), h.end.end());
    }
    p = ref::ParamsF64{cum.data(), A.data(), D.data(), s.data(), e.data(), b.len.data(),
                       onset.empty() ? nullptr : onset.data()};
  }
};

// The score of kept row k's gold segments (docs/crf.md) in double; with g, scale times its indicator is
// subtracted from the gradients (cum [B'][T+1][C], A, D, start, end, onset [B'][T][C]).
double gold_of_segments(const Batch& b, const Inputs& in, size_t k, const std::vector<crf::Segment>& segs,
                        double scale, const ref::GradsF64* g) {
  const int64_t C = b.C, T = b.T;
  const double* cum = in.cum.data() + k * (T + 1) * C;
  const double* on = in.onset.empty() ? nullptr : in.onset.data() + k * T * C;
  const crf::ScoreParams<double> p{C, in.A.data(), in.D.data(), in.s.data(), in.e.data(), on};
  const double s = crf::segmentation_score(segs, cum, p, [&](size_t i) {
    const crf::Segment& x = segs[i];
    const int64_t c = x.label, u = x.start, d = x.duration;
    if (!g) return;
    g->cum_scores[(k * (T + 1) + u + d) * C + c] -= scale;
    g->cum_scores[(k * (T + 1) + u) * C + c] += scale;
    g->duration_bias[(d - 1) * C + c] -= scale;
    if (i > 0) g->transition[segs[i - 1].label * C + c] -= scale;
    if (on && g->onset) g->onset[(k * T + u) * C + c] -= scale;
  });
  if (g) {
    g->start[segs.front().label] -= scale;
    g->end[segs.back().label] -= scale;
  }
  if (!std::isfinite(s))
    throw ApiError(TIMITSEG_ERR_RUNTIME, "utterance " + std::to_string(b.rows[k]) +
                                             ": the gold segmentation scores -inf (a forbidden transition, duration, start or end)");
  return s;
}

// d loss / d cum [B'][T+1][C] (double) -> the caller's grads.scores, through the centering in double.
void write_score_grad64(const Batch& b, const std::vector<double>& gcum, const timitseg_tensor& out) {
  const int64_t T = b.T, C = b.C, rows = b.cumulative ? T + 1 : T;
  std::vector<double> all(static_cast<size_t>(b.B * rows * C), 0.0);
  for (size_t k = 0; k < b.rows.size(); ++k) {
    double* dst = all.data() + b.rows[k] * rows * C;
    const double* g = gcum.data() + k * (T + 1) * C;
    if (b.cumulative)
      std::copy(g, g + (T + 1) * C, dst);
    else
      crf::centered_cumsum_backward<double>(1, T, C, g, &b.len[k], dst);
  }
  write_f64(out, all, b.stream);
}

void write_param(const Batch& b, const timitseg_tensor& t, const std::vector<double>& v) {
  if (present(&t)) write_f64(t, v, b.stream);
}

// The kept rows of an upstream gradient [B][inner] (empty when absent), checked F32/F64, shape and device.
std::vector<double> upstream(const Batch& b, const timitseg_tensor* t, const char* name,
                             const std::vector<int64_t>& shape) {
  if (!present(t)) return {};
  check_float(*t, name);
  check_shape(*t, name, shape);
  check_device(*t, name, b.device, b.device_index);
  int64_t inner = 1;
  for (size_t i = 1; i < shape.size(); ++i) inner *= shape[i];
  const std::vector<double> all = read_f64(*t, b.stream);
  std::vector<double> kept(static_cast<size_t>(b.dims.B * inner));
  for (size_t k = 0; k < b.rows.size(); ++k)
    std::copy(all.begin() + b.rows[k] * inner, all.begin() + (b.rows[k] + 1) * inner, kept.begin() + k * inner);
  return kept;
}

}  // namespace

void write_grads64(const timitseg_crf& h, const Batch& b, const timitseg_crf_grads& g, const std::vector<double>& gcum,
                   const std::vector<double>& gA, const std::vector<double>& gD, const std::vector<double>& gs,
                   const std::vector<double>& ge, const std::vector<double>& go);

void log_partition_f64(const timitseg_crf& h, const Batch& b, const timitseg_tensor& log_z) {
  std::vector<double> lz(b.rows.size());
  if (b.dims.B > 0) {
    const Inputs in(h, b);
    on_kept(b, [&] { ref::log_partition_f64(b.dims, in.p, lz.data()); });
  }
  write_rows(b, lz, 1, log_z, "log_z", {b.B});
}

void nll_f64(const timitseg_crf& h, const Batch& b, const std::vector<int32_t>* labels,
             const std::vector<std::vector<crf::Segment>>* segs, double scale, const timitseg_tensor& out,
             const timitseg_crf_grads* grads) {
  const int64_t Bk = b.dims.B, T = b.T, C = b.C, K = b.K;
  const bool ln = h.p.duration_model == TIMITSEG_DURATION_LOGNORMAL;
  std::vector<double> lz(Bk), gold(Bk), gcum, gA(C * C, 0.0), gD(K * C, 0.0), gs(C, 0.0), ge(C, 0.0), go;
  ref::GradsF64 g;
  if (grads) {
    gcum.assign(static_cast<size_t>(Bk * (T + 1) * C), 0.0);
    if (!b.onset64.empty()) go.assign(static_cast<size_t>(Bk * T * C), 0.0);
    g = ref::GradsF64{gcum.data(), gA.data(), gD.data(), gs.data(), ge.data(), go.empty() ? nullptr : go.data()};
  }
  if (Bk > 0) {
    const Inputs in(h, b);
    const int32_t* lab = labels ? labels->data() : nullptr;
    on_kept(b, [&] {
      if (grads)
        ref::backward_f64(b.dims, in.p, lab, scale, lz.data(), lab ? gold.data() : nullptr, g);
      else
        ref::log_partition_f64(b.dims, in.p, lz.data());
      if (lab && !grads) ref::gold_score_f64(b.dims, in.p, lab, gold.data());
    });
    if (!lab && segs)
      for (size_t k = 0; k < b.rows.size(); ++k) gold[k] = gold_of_segments(b, in, k, (*segs)[k], scale, grads ? &g : nullptr);
  }
  std::vector<double> v(b.rows.size());
  for (size_t k = 0; k < b.rows.size(); ++k) v[k] = lz[k] - gold[k];
  write_rows(b, v, 1, out, "nll", {b.B});
  if (!grads) return;
  if (h.p.reg != 0.0 && (labels || segs))  // no gold: log Z and its gradients, no penalty
    crf::l2_penalty<double>(h.p.reg, C, ln ? 0 : K, h.transition64.data(), h.duration_bias64.data(), gA.data(), gD.data());
  write_grads64(h, b, *grads, gcum, gA, gD, gs, ge, go);
}

void transcript_f64(const timitseg_crf& h, const Batch& b, int64_t N, const std::vector<int32_t>& phones,
                    const std::vector<int32_t>& num_phones, const std::vector<int32_t>& optional,
                    const std::vector<int32_t>& links, double scale, const timitseg_tensor& out,
                    const timitseg_crf_grads* grads) {
  const int64_t Bk = b.dims.B, T = b.T, C = b.C, K = b.K;
  std::vector<double> lz(Bk), lzc(Bk), gcum(static_cast<size_t>(Bk * (T + 1) * C), 0.0), gA(C * C, 0.0),
      gD(K * C, 0.0), gs(C, 0.0), ge(C, 0.0), go(b.onset64.empty() ? 0 : static_cast<size_t>(Bk * T * C), 0.0);
  if (Bk > 0) {
    const Inputs in(h, b);
    const ref::GradsF64 g{gcum.data(), gA.data(), gD.data(), gs.data(), ge.data(), go.empty() ? nullptr : go.data()};
    on_kept(b, [&] {
      ref::transcript_backward_f64(b.dims, in.p, N, phones.data(), num_phones.data(),
                                   optional.empty() ? nullptr : optional.data(), links.empty() ? nullptr : links.data(),
                                   scale, lz.data(), lzc.data(), g);
    });
  }
  std::vector<double> v(b.rows.size());
  for (size_t k = 0; k < b.rows.size(); ++k) v[k] = lz[k] - lzc[k];
  write_rows(b, v, 1, out, "nll", {b.B});
  if (!grads) return;
  if (h.p.reg != 0.0)
    crf::l2_penalty<double>(h.p.reg, C, h.p.duration_model == TIMITSEG_DURATION_LOGNORMAL ? 0 : K,
                            h.transition64.data(), h.duration_bias64.data(), gA.data(), gD.data());
  write_grads64(h, b, *grads, gcum, gA, gD, gs, ge, go);
}

// The float64 gradients into the caller's grads (the scores' through the centering, the log-normal's chained).
void write_grads64(const timitseg_crf& h, const Batch& b, const timitseg_crf_grads& g, const std::vector<double>& gcum,
                   const std::vector<double>& gA, const std::vector<double>& gD, const std::vector<double>& gs,
                   const std::vector<double>& ge, const std::vector<double>& go) {
  const int64_t T = b.T, C = b.C, K = b.K;
  const timitseg_crf_grads* grads = &g;
  if (present(&grads->scores)) write_score_grad64(b, gcum, grads->scores);
  write_param(b, grads->transition, gA);
  write_param(b, grads->duration_bias, gD);
  write_param(b, grads->start, gs);
  write_param(b, grads->end, ge);
  if (present(&grads->duration_lognormal)) {
    std::vector<double> table = gD, gl(static_cast<size_t>(3 * C));
    crf::lognormal_duration_backward<double>(static_cast<int>(K), static_cast<int>(C), h.duration_lognormal64.data(),
                                               table.data(), gl.data());
    write_param(b, grads->duration_lognormal, gl);
  }
  if (present(&grads->onset)) write_rows(b, go, T * C, grads->onset, "grads.onset", {b.B, T, C});
}

void marginals_f64(const timitseg_crf& h, const Batch& b, const timitseg_tensor* boundaries,
                   const timitseg_tensor* frames) {
  const int64_t Bk = b.dims.B, T = b.T, C = b.C;
  const Inputs in(h, b);
  if (present(boundaries)) {
    std::vector<double> bp(static_cast<size_t>(Bk * (T + 1)));
    if (Bk > 0) on_kept(b, [&] { ref::boundary_posteriors_f64(b.dims, in.p, bp.data()); });
    write_rows(b, bp, T + 1, *boundaries, "boundaries", {b.B, T + 1});
  }
  if (present(frames)) {
    // P(frame t in a segment of label c) = d log Z / d x[t][c] before the centering: the reverse cumsum of d log Z / d cum
    std::vector<double> gcum(static_cast<size_t>(Bk * (T + 1) * C), 0.0), m(static_cast<size_t>(Bk * T * C), 0.0);
    std::vector<double> lz(Bk);
    if (Bk > 0) {
      ref::GradsF64 g;
      g.cum_scores = gcum.data();
      on_kept(b, [&] { ref::backward_f64(b.dims, in.p, nullptr, 1.0, lz.data(), nullptr, g); });
    }
    for (int64_t k = 0; k < Bk; ++k)
      for (int64_t c = 0; c < C; ++c) {
        double run = 0.0;
        for (int64_t t = b.len[k] - 1; t >= 0; --t) {
          run += gcum[(k * (T + 1) + t + 1) * C + c];
          m[(k * T + t) * C + c] = run;
        }
      }
    write_rows(b, m, T * C, *frames, "frames", {b.B, T, C});
  }
}

void marginals_backward(timitseg_crf& h, const timitseg_crf_batch& in, const timitseg_tensor* grad_boundaries,
                        const timitseg_tensor* grad_frames, const timitseg_tensor* grad_segments,
                        const timitseg_crf_grads& grads) {
  settle(h);                        // the general path shares the session's buffers with the zero-copy path
  refresh_bound(h, in.stream);      // the parameters are read on the host
  const Batch b = prepare(h, in);
  const int64_t Bk = b.dims.B, T = b.T, C = b.C, K = b.K;
  const bool ln = h.p.duration_model == TIMITSEG_DURATION_LOGNORMAL;
  auto out = [&](const timitseg_tensor& t, const char* name, const std::vector<int64_t>& shape) {
    if (!present(&t)) return;
    check_float(t, name);
    check_shape(t, name, shape);
    check_device(t, name, b.device, b.device_index);
  };
  out(grads.scores, "grads.scores", {b.B, b.cumulative ? T + 1 : T, C});
  out(grads.transition, "grads.transition", {C, C});
  out(grads.duration_bias, "grads.duration_bias", {K, C});
  out(grads.start, "grads.start", {C});
  out(grads.end, "grads.end", {C});
  out(grads.duration_lognormal, "grads.duration_lognormal", {3, C});
  out(grads.onset, "grads.onset", {b.B, T, C});
  if (present(&grads.duration_lognormal) && !ln)
    throw ApiError(TIMITSEG_ERR_ARGUMENT, "grads.duration_lognormal given, but the duration model is TABLE");
  if (present(&grads.onset) && b.onset.empty())
    throw ApiError(TIMITSEG_ERR_ARGUMENT, "grads.onset given, but the batch has no onset");
  const std::vector<double> gb = upstream(b, grad_boundaries, "grad_boundaries", {b.B, T + 1}),
                            gf = upstream(b, grad_frames, "grad_frames", {b.B, T, C}),
                            gs = upstream(b, grad_segments, "grad_segments", {b.B, T, K, C});
  std::vector<double> gcum(static_cast<size_t>(Bk * (T + 1) * C), 0.0), gA(C * C, 0.0), gD(K * C, 0.0), gst(C, 0.0),
      ge(C, 0.0), go(b.onset.empty() ? 0 : static_cast<size_t>(Bk * T * C), 0.0);
  if (Bk > 0) {
    const Inputs inp(h, b);
    const ref::MarginalGradsF64 up{gb.empty() ? nullptr : gb.data(), gf.empty() ? nullptr : gf.data(),
                                   gs.empty() ? nullptr : gs.data()};
    const ref::GradsF64 g{gcum.data(), gA.data(), gD.data(), gst.data(), ge.data(), go.empty() ? nullptr : go.data()};
    on_kept(b, [&] { ref::marginals_backward_f64(b.dims, inp.p, up, g); });
  }
  if (present(&grads.scores)) write_score_grad64(b, gcum, grads.scores);
  write_param(b, grads.transition, gA);
  write_param(b, grads.duration_bias, gD);
  write_param(b, grads.start, gst);
  write_param(b, grads.end, ge);
  if (present(&grads.duration_lognormal)) {  // the log-normal rows the table was derived from, as Inputs reads it
    std::vector<double> rows = h.duration_lognormal64, table = gD, gl(static_cast<size_t>(3 * C));
    if (!b.f64) rows.assign(h.duration_lognormal.begin(), h.duration_lognormal.end());
    crf::lognormal_duration_backward<double>(static_cast<int>(K), static_cast<int>(C), rows.data(), table.data(),
                                               gl.data());
    write_param(b, grads.duration_lognormal, gl);
  }
  if (present(&grads.onset)) write_rows(b, go, T * C, grads.onset, "grads.onset", {b.B, T, C});
}

std::vector<double> segment_posteriors_kept(const timitseg_crf& h, const Batch& b) {
  std::vector<double> kept(static_cast<size_t>(b.dims.B * b.T * b.K * b.C), 0.0);
  if (b.dims.B > 0) {
    const Inputs in(h, b);
    ref::segment_posteriors_f64(b.dims, in.p, kept.data());
  }
  return kept;
}

}  // namespace timitseg::capi
