// Batches of the C API's CRF calls (crf_batch.h).
#include "capi/crf_batch.h"

#include <algorithm>
#include <cmath>

#include "crf/cumsum.h"

namespace timitseg::capi {

crf::Params Batch::params(const timitseg_crf& h, const float* transition) const {
  crf::Params p;
  p.cum_scores = cum.data();
  p.transition = transition ? transition : h.transition.data();
  p.duration_bias = h.duration_bias.data();
  p.start = h.start.data();
  p.end = h.end.data();
  p.lengths = len.data();
  p.onset = onset.empty() ? nullptr : onset.data();
  return p;
}

std::vector<int32_t> Batch::gather_rows(const std::vector<int64_t>& all, int64_t inner) const {
  std::vector<int32_t> out(rows.size() * static_cast<size_t>(inner));
  for (size_t r = 0; r < rows.size(); ++r)
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t v = all[static_cast<size_t>(rows[r] * inner + i)];
      out[r * inner + i] = v < INT32_MIN || v > INT32_MAX ? INT32_MIN : static_cast<int32_t>(v);
    }
  return out;
}

namespace {

std::vector<int32_t> read_lengths(const timitseg_tensor& t, int64_t B, int64_t T, int device, int index, void* stream) {
  check_int(t, "lengths");
  check_shape(t, "lengths", {B});
  check_device(t, "lengths", device, index);
  const std::vector<int64_t> v = read_i64(t, stream);
  std::vector<int32_t> out(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    if (v[b] < 0 || v[b] > T)
      throw ApiError(TIMITSEG_ERR_LENGTH, "lengths[" + std::to_string(b) + "] = " + std::to_string(v[b]) +
                                              " is outside [0, T = " + std::to_string(T) + "]");
    out[b] = static_cast<int32_t>(v[b]);
  }
  return out;
}

// x [T][C] of one utterance (double values) -> cum [T+1][C] floats (only
// the L valid frames are read: the layer ignores the others).
// cum64 (F = double only): the same rows in double, unrounded (the float64 path).
template <class F>
void centered_row(const double* x, int64_t T, int64_t C, int32_t L, float* cum, double* cum64 = nullptr) {
  std::vector<F> xf(x, x + L * C), cf(static_cast<size_t>((L + 1) * C));
  crf::centered_cumsum_forward<F>(1, L, C, xf.data(), &L, cf.data());
  for (size_t i = 0; i < cf.size(); ++i) cum[i] = static_cast<float>(cf[i]);
  if (cum64) std::copy(cf.begin(), cf.end(), cum64);
  (void)T;
}

void check_finite(const std::vector<double>& v, const char* name, int64_t b, int64_t rows, int64_t C, int64_t first,
                  int64_t stride_b) {
  for (int64_t t = first; t < rows; ++t)
    for (int64_t c = 0; c < C; ++c) {
      const double x = v[static_cast<size_t>(b * stride_b + t * C + c)];
      if (!std::isfinite(x))
        throw ApiError(TIMITSEG_ERR_ARGUMENT, std::string(name) + "[" + std::to_string(b) + "][" + std::to_string(t) +
                                                  "][" + std::to_string(c) + "] = " + std::to_string(x) +
                                                  " is not finite");
    }
}

}  // namespace

Batch prepare(const timitseg_crf& h, const timitseg_crf_batch& in) {
  Batch b;
  b.C = h.p.num_labels;
  b.K = h.p.max_duration;
  b.cumulative = in.cumulative != 0;
  b.stream = in.stream;
  const timitseg_tensor& s = in.scores;
  check_float(s, "scores");
  const std::vector<int64_t> shape = check_shape(s, b.cumulative ? "scores (cumulative)" : "scores", {-1, -1, b.C});
  b.device = s.device;
  b.device_index = h.cuda ? h.cuda_device : -1;
  check_device(s, "scores", h.cuda ? s.device : TIMITSEG_DEVICE_CPU, b.device_index);
  if (b.cumulative && shape[1] < 1)
    throw ApiError(TIMITSEG_ERR_SHAPE, "scores (cumulative) has shape " + shape_str(shape) + ": it needs T+1 >= 1 rows");
  b.B = shape[0];
  b.T = b.cumulative ? shape[1] - 1 : shape[1];
  b.f64 = s.dtype == TIMITSEG_F64;
  if (b.f64 && h.cuda)
    throw ApiError(TIMITSEG_ERR_DTYPE, "scores are F64: the cuda backend computes in float32 (float64 runs on the "
                                       "reference and cpu backends); pass F32 scores or use a reference or cpu handle");
  b.lengths = read_lengths(in.lengths, b.B, b.T, b.device, b.device_index, b.stream);
  const bool has_onset = present(&in.onset);
  if (has_onset) {
    check_float(in.onset, "onset");
    check_shape(in.onset, "onset", {b.B, b.T, b.C});
    check_device(in.onset, "onset", b.device, b.device_index);
  }
  for (int64_t r = 0; r < b.B; ++r)
    if (b.lengths[r] > 0) b.rows.push_back(r);
  const int64_t Bk = static_cast<int64_t>(b.rows.size()), T = b.T, C = b.C;
  b.dims = crf::Dims{Bk, T, b.K, C};
  if (Bk == 0) return b;
  const std::vector<double> x = read_f64(s, b.stream);
  const int64_t in_rows = b.cumulative ? T + 1 : T;
  b.cum.assign(static_cast<size_t>(Bk * (T + 1) * C), 0.0f);
  if (b.f64) b.cum64.assign(b.cum.size(), 0.0);
  for (int64_t k = 0; k < Bk; ++k) {
    const int64_t r = b.rows[k];
    const int32_t L = b.lengths[r];
    b.len.push_back(L);
    check_finite(x, b.cumulative ? "scores (cumulative)" : "scores", r, b.cumulative ? L + 1 : L, C,
                 b.cumulative ? 1 : 0, in_rows * C);
    const double* xr = x.data() + r * in_rows * C;
    float* cr = b.cum.data() + k * (T + 1) * C;
    double* c64 = b.f64 ? b.cum64.data() + k * (T + 1) * C : nullptr;
    if (b.cumulative) {
      for (int64_t i = C; i < (L + 1) * C; ++i) cr[i] = static_cast<float>(xr[i]);  // row 0 stays 0
      if (c64) std::copy(xr + C, xr + (L + 1) * C, c64 + C);
    } else if (b.f64) {
      centered_row<double>(xr, T, C, L, cr, c64);
    } else {
      centered_row<float>(xr, T, C, L, cr);
    }
  }
  if (has_onset) {
    const std::vector<double> o = read_f64(in.onset, b.stream);
    b.onset.assign(static_cast<size_t>(Bk * T * C), 0.0f);
    if (b.f64) b.onset64.assign(b.onset.size(), 0.0);
    for (int64_t k = 0; k < Bk; ++k) {
      const int64_t r = b.rows[k];
      check_finite(o, "onset", r, b.lengths[r], C, 0, T * C);
      for (int64_t i = 0; i < b.lengths[r] * C; ++i) b.onset[k * T * C + i] = static_cast<float>(o[r * T * C + i]);
      if (b.f64) std::copy(o.begin() + r * T * C, o.begin() + r * T * C + b.lengths[r] * C, b.onset64.begin() + k * T * C);
    }
  }
  return b;
}

void write_score_grad(const Batch& b, const std::vector<float>& grad_cum, const timitseg_tensor& out) {
  const int64_t T = b.T, C = b.C, rows = b.cumulative ? T + 1 : T;
  check_float(out, "grads.scores");
  check_shape(out, "grads.scores", {b.B, rows, C});
  check_device(out, "grads.scores", b.device, b.device_index);
  std::vector<double> all(static_cast<size_t>(b.B * rows * C), 0.0);
  for (size_t k = 0; k < b.rows.size(); ++k) {
    double* dst = all.data() + b.rows[k] * rows * C;
    const float* g = grad_cum.data() + k * (T + 1) * C;
    if (b.cumulative) {
      for (int64_t i = 0; i < (T + 1) * C; ++i) dst[i] = g[i];
    } else if (b.f64) {
      std::vector<double> gd(g, g + (T + 1) * C), gx(static_cast<size_t>(T * C));
      crf::centered_cumsum_backward<double>(1, T, C, gd.data(), &b.len[k], gx.data());
      std::copy(gx.begin(), gx.end(), dst);
    } else {
      std::vector<float> gx(static_cast<size_t>(T * C));
      crf::centered_cumsum_backward<float>(1, T, C, g, &b.len[k], gx.data());
      std::copy(gx.begin(), gx.end(), dst);
    }
  }
  write_f64(out, all, b.stream);
}

void write_rows(const Batch& b, const std::vector<double>& kept, int64_t inner, const timitseg_tensor& out,
                const char* name, const std::vector<int64_t>& shape) {
  check_float(out, name);
  check_shape(out, name, shape);
  check_device(out, name, b.device, b.device_index);
  std::vector<double> all(static_cast<size_t>(b.B * inner), 0.0);
  for (size_t k = 0; k < b.rows.size(); ++k)
    std::copy(kept.begin() + k * inner, kept.begin() + (k + 1) * inner, all.begin() + b.rows[k] * inner);
  write_f64(out, all, b.stream);
}

}  // namespace timitseg::capi
