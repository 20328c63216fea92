// Long recordings on the GPU executor (model/cuda/cuda_executor_impl.h,
// align_long, decode_long): the encoder in windows so that its GPU memory
// stays that of one batch of windows, the kept rows of every window gathered into
// scores [1][T][C] on the device; `decode` centres the cumsum and runs the
// Viterbi there (cuda backend), `align` runs the constrained Viterbi in a band
// on the host's cpu backend (crf/cpu/align_banded.h) and the confidences by
// batches of transcript windows on the cuda backend (batched_window_confidence).
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include <spdlog/spdlog.h>

#include "common/cuda.h"
#include "common/cuda_check.h"
#include "settings/env.h"
#include "common/progress.h"
#include "crf/cumsum.h"
#include "crf/posterior.h"
#include "model/cuda/cuda_executor_impl.h"
#include "model/cuda/heads_fold.h"
#include "model/heads_fold.h"
#include "crf/device_layers.h"
#include "model/long_input.h"

namespace timitseg::model::cuda_detail {
namespace {

// Encoder windows forwarded together (one batched forward of [n][16,384 +
// 2 x 512] frames): the LSTM's steps are sequential in time, so n windows
// take about the time of one; the GPU memory of the forward grows with n and
// not with the recording's length. TIMITSEG_LONG_WINDOW_BATCH replaces it
// (a measurement knob, docs/align.md; 1: one window at a time).
constexpr size_t kWindowsPerBatch = 4;

size_t windows_per_batch() {
  const std::optional<long long> v = env::integer("TIMITSEG_LONG_WINDOW_BATCH");  // [1, 64]: settings/env.cpp
  return v ? static_cast<size_t>(*v) : kWindowsPerBatch;
}

}  // namespace

void CudaExecutor::long_scores_device(const Batch& batch) {
  const auto t0 = Clock::now();
  const int T = batch.input.T, C = dims_.num_classes, D = dims_.input_dim;
  const int64_t L = batch.input.lengths[0];
  const size_t tc_bytes = static_cast<size_t>(T) * C * sizeof(float);
  long_x_.reserve(tc_bytes);  // projection output [T][C] (padding rows t >= L: 0)
  long_x_.zero(tc_bytes, stream_);
  const int AC = layout_.crf().heads().count() * C;  // the anchored heads' scores per frame, [A][C]
  if (AC > 0) {
    const size_t bytes = static_cast<size_t>(T) * AC * sizeof(float);
    long_heads_.reserve(bytes);
    long_heads_.zero(bytes, stream_);
  }
  encoder_->set_training(false);
  ForwardOptions forward_opts;  // dropout 0: evaluation
  Progress bar("encoder (windows of " + std::to_string(kWindowFrames) + " frames)", L, "frame");
  const std::vector<Window> ws = windows_of(L);
  const size_t per_batch = windows_per_batch();
  for (size_t i0 = 0; i0 < ws.size(); i0 += per_batch) {  // a batch of windows [i0, i1): rows [nb][Tw]
    const size_t i1 = std::min(ws.size(), i0 + per_batch), nb = i1 - i0;
    int Tw = 1;
    for (size_t i = i0; i < i1; ++i) Tw = std::max(Tw, static_cast<int>(ws[i].wb - ws[i].wa));
    Batch sub;
    sub.input.B = static_cast<int>(nb);
    sub.input.T = Tw;
    sub.input.features.assign(nb * Tw * D, 0.f);  // [nb][Tw][D], padding rows 0
    for (size_t i = i0; i < i1; ++i) {
      sub.input.lengths.push_back(static_cast<int32_t>(ws[i].wb - ws[i].wa));
      std::copy(batch.input.features.begin() + ws[i].wa * D, batch.input.features.begin() + ws[i].wb * D,
                sub.input.features.begin() + (i - i0) * Tw * D);
      sub.ids.push_back(batch.ids.empty() ? std::string() : batch.ids[0]);
    }
    stage(sub, /*with_labels=*/false);
    numerics_->begin_step(false, config::FaultSpec{}, 0, stream_);  // taps nothing
    cum_.reserve(cum_bytes(sub.input.B, Tw));
    encoder_->forward(params_.as<float>(), encoder_batch(sub), forward_opts, cum_.as<float>());
    for (size_t i = i0; i < i1; ++i) {  // each window's kept rows [a, b) out of its row of scores [nb][Tw][C]
      const Window& w = ws[i];
      const size_t off = ((i - i0) * Tw + static_cast<size_t>(w.a - w.wa)) * C;
      const size_t rows = static_cast<size_t>(w.b - w.a) * C;
      cuda::copy_device_to_device(long_x_.as<float>() + w.a * C, encoder_->scores() + off, rows * sizeof(float),
                                  stream_);
      if (AC > 0)
        cuda::copy_device_to_device(long_heads_.as<float>() + w.a * AC, encoder_->head_scores() + off / C * AC,
                                    rows / C * AC * sizeof(float), stream_);
      bar.advance(w.b - w.a);
    }
    TS_CUDA(cudaStreamSynchronize(stream_));  // `sub`'s staging is reused by the next batch
  }
  bar.finish();
  have_cum_ = false;  // cum_ holds the last window only
  lengths_host_ = batch.input.lengths;
  // lengths_ [1] of the whole recording again (stage() left the last window's)
  lengths_.upload(batch.input.lengths.data(), sizeof(int32_t), stream_);
  spdlog::info("{} frames: encoder in {} window(s), {} a batch, in {:.2f} s", L, ws.size(), per_batch, since(t0));
}

void CudaExecutor::long_scores(const Batch& batch, std::vector<float>& x, std::vector<float>& heads) {
  const int T = batch.input.T, C = dims_.num_classes;
  long_scores_device(batch);
  x.resize(static_cast<size_t>(T) * C);
  heads.resize(static_cast<size_t>(T) * layout_.crf().heads().count() * C);
  long_x_.download(x.data(), x.size() * sizeof(float), stream_);
  if (!heads.empty()) long_heads_.download(heads.data(), heads.size() * sizeof(float), stream_);
  TS_CUDA(cudaStreamSynchronize(stream_));
}

// The long recording's CRF inputs on the host: scores through the encoder in
// windows, the cumsum centred by centre_frames_ (model::long_cumsum), the CRF
// parameters; `p` points into this struct's vectors.
void CudaExecutor::long_host_inputs(const Batch& batch, LongHost& h) {
  const int T = batch.input.T, C = dims_.num_classes;
  std::vector<float> x, heads;
  long_scores(batch, x, heads);
  const auto t0 = Clock::now();
  h.cum.assign(static_cast<size_t>(T + 1) * C, 0.f);
  long_cumsum(T, C, x.data(), batch.input.lengths[0], centre_frames_, h.cum.data());
  fold_heads(layout_.crf().heads(), 1, T, C, batch.input.lengths, heads, h.cum, h.onset);
  host_crf_param_copy(h.hp);
  spdlog::info("{} frames: cumsum on the host in {:.2f} s", batch.input.lengths[0], since(t0));
  h.dims = dims_.crf_dims(1, T);
  h.p = host_crf_params(h.hp, h.cum, batch, h.onset);
}

crf::AlignResult CudaExecutor::align_long(const Batch& batch, int64_t N, const std::vector<int32_t>& phones,
                                          const std::vector<int32_t>& num_phones, const std::vector<int32_t>& optional,
                                          crf::AlignConfidence* confidence, crf::AlignBoundaries boundaries) {
  LongHost h;
  long_host_inputs(batch, h);
  std::unique_ptr<crf::Backend> cpu = crf::make_backend(crf::BackendKind::cpu, crf::BackendOptions{0, nullptr});
  crf::AlignResult r = crf::align_host(*cpu, h.dims, h.p, N, phones.data(), num_phones.data(),
                                       optional.empty() ? nullptr : optional.data());
  if (backend_->on_device()) {  // confidences: windows of the transcript as batches on the device (cuda backend)
    finish_alignment(*session_, h.dims, h.p, N, phones, num_phones, optional, boundaries, &r, confidence);
  } else {  // a host crf backend: windows of the transcript on the host's threads
    crf::Session session(*cpu);
    finish_alignment(session, h.dims, h.p, N, phones, num_phones, optional, boundaries, &r, confidence);
  }
  return r;
}

// decode's segment posteriors of a long recording: the same scores and
// centring as decode_long, the span marginals on the host's cpu backend (its
// tables [T+1][C] float64: 0.2 GB at T = 360,000, C = 39).
std::vector<double> CudaExecutor::span_marginals_long(const Batch& batch, int64_t Q, const std::vector<int32_t>& queries,
                                                      const std::vector<int32_t>& num_queries) {
  LongHost h;
  long_host_inputs(batch, h);
  std::unique_ptr<crf::Backend> cpu = crf::make_backend(crf::BackendKind::cpu, crf::BackendOptions{0, nullptr});
  crf::Session session(*cpu);
  return session.span_marginals_host(h.dims, h.p, Q, queries.data(), num_queries.data()).marginal;
}

// crf.decode = viterbi with the cuda backend: the cumsum centred over the
// recording and the Viterbi on the device (its workspace 32 T C bytes and
// back pointers inside it; 0.55 GB at T = 360,000, C = 48). Otherwise (a host
// backend, crf.decode = posterior) the decoding runs on host copies.
std::vector<std::vector<crf::Segment>> CudaExecutor::decode_long(const Batch& batch, std::vector<float>* scores,
                                                                std::vector<double>* nll) {
  const int T = batch.input.T, C = dims_.num_classes;
  const crf::Dims dims = dims_.crf_dims(1, T);
  std::vector<std::vector<crf::Segment>> out(1);
  if (backend_->on_device() && !posterior_) {
    long_scores_device(batch);
    const auto t0 = Clock::now();
    const size_t ncum = static_cast<size_t>(T + 1) * C;
    long_cum_.reserve(ncum * sizeof(float));
    if (centre_frames_ == 0) {  // the whole recording's mean: the device cumsum (bitwise the host's)
      crf::device::centered_cumsum_forward(1, T, C, long_x_.as<float>(), lengths_.as<int32_t>(),
                                           long_cum_.as<float>(), stream_);
    } else {  // a running mean: model::long_cumsum on the host (as the CPU executor), uploaded
      std::vector<float> x(static_cast<size_t>(T) * C), cum(ncum);
      long_x_.download(x.data(), x.size() * sizeof(float), stream_);
      TS_CUDA(cudaStreamSynchronize(stream_));
      long_cumsum(T, C, x.data(), batch.input.lengths[0], centre_frames_, cum.data());
      long_cum_.upload(cum.data(), ncum * sizeof(float), stream_);
      TS_CUDA(cudaStreamSynchronize(stream_));  // `cum` is freed at the end of this block
    }
    if (scores) {
      scores->resize(static_cast<size_t>(T) * C);
      long_x_.download(scores->data(), scores->size() * sizeof(float), stream_);
    }
    if (nll) labels_.upload(batch.labels.data(), batch.labels.size() * sizeof(int32_t), stream_);
    crf::Params p = device_crf_params();
    p.cum_scores = long_cum_.as<float>();
    const AnchoredHeads heads = layout_.crf().heads();
    if (!heads.fold_is_identity()) long_onset_.reserve(static_cast<size_t>(T) * C * sizeof(float));
    p.onset = gpu::fold_heads(heads, 1, T, C, lengths_.as<int32_t>(), long_heads_.as<float>(), long_cum_.as<float>(),
                              long_onset_.as<float>(), stream_);
    out[0] = viterbi_on_device(dims, p, nll);
    spdlog::info("{} frames: cumsum and Viterbi on the device in {:.2f} s", batch.input.lengths[0], since(t0));
    return out;
  }
  std::vector<float> x, heads, onset;
  long_scores(batch, x, heads);
  std::vector<float> cum(static_cast<size_t>(T + 1) * C);
  long_cumsum(T, C, x.data(), batch.input.lengths[0], centre_frames_, cum.data());
  fold_heads(layout_.crf().heads(), 1, T, C, batch.input.lengths, heads, cum, onset);
  if (scores) *scores = std::move(x);
  x = std::vector<float>();
  std::vector<float> hp;
  host_crf_param_copy(hp);
  std::unique_ptr<crf::Backend> cpu = crf::make_backend(crf::BackendKind::cpu, crf::BackendOptions{0, nullptr});
  crf::Session session(*cpu);
  const crf::Params p = host_crf_params(hp, cum, batch, onset);
  const int32_t* labels = nll ? batch.labels.data() : nullptr;
  const crf::HostResult r = posterior_ ? posterior_decode_on_host(session, dims, p, labels)
                                       : session.decode_host(dims, p, labels, phone_bonus_);
  if (nll) *nll = {r.log_z[0] - r.gold[0]};
  for (const crf::Segment& s : r.segments) out[0].push_back(s);
  return out;
}

}  // namespace timitseg::model::cuda_detail
