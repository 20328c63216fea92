// The GPU executor's CRF stage (stage 2 and the frame CE of model/step_recipe.h):
// the cuda backend on the device, or a host backend (reference / cpu) through
// copies; the crf and penalty taps. The class: model/cuda/cuda_executor_impl.h.
#include "model/cuda/cuda_executor_impl.h"

#include <algorithm>

#include "common/cuda.h"
#include "common/cuda_check.h"
#include "crf/device_layers.h"
#include "model/cuda/frame_ce.h"
#include "model/cuda/ops.h"
#include "model/transcript_loss.h"

namespace timitseg::model::cuda_detail {

crf::Params CudaExecutor::device_crf_params() {
  crf::Params p;
  const float* P = params_.as<float>();
  p.cum_scores = cum_.as<float>();
  const CrfParamView& crf = layout_.crf();
  p.transition = crf.transition.in(P);
  p.duration_bias = crf.duration_bias.in(P);
  p.start = crf.start.in(P);
  p.end = crf.end.in(P);
  p.lengths = lengths_.as<int32_t>();
  p.onset = encoder_->onset_scores();  // nullptr without crf.onset_features
  return p;
}

std::vector<float> CudaExecutor::last_onset() {
  std::vector<float> out;
  if (!dims_.onset_input() || !have_cum_) return out;
  out.resize(static_cast<size_t>(last_B_) * last_T_ * dims_.num_classes);
  cuda::copy_to_host(out.data(), encoder_->onset_scores(), out.size() * sizeof(float), stream_);
  TS_CUDA(cudaStreamSynchronize(stream_));
  return out;
}

void CudaExecutor::host_crf_param_copy(std::vector<float>& hp) {
  hp.assign(layout_.total(), 0.f);
  const size_t from = layout_.crf_structure_begin();  // crf.transition: the CRF structure group, last
  cuda::copy_to_host(hp.data() + from, params_.as<float>() + from, (layout_.total() - from) * sizeof(float),
                     stream_);
  TS_CUDA(cudaStreamSynchronize(stream_));
}

crf::Params CudaExecutor::host_crf_params(const std::vector<float>& hp, const std::vector<float>& cum, const Batch& batch,
                            const std::vector<float>& onset) {
  crf::Params p;
  if (!onset.empty()) p.onset = onset.data();
  p.cum_scores = cum.data();
  const CrfParamView& crf = layout_.crf();
  p.transition = crf.transition.in(hp);
  p.duration_bias = crf.duration_bias.in(hp);
  p.start = crf.start.in(hp);
  p.end = crf.end.in(hp);
  p.lengths = batch.input.lengths.data();
  return p;
}

void CudaExecutor::crf_taps(int B, int T, double reg) {
  using gpu::TapTensor;
  const int C = dims_.num_classes;
  numerics_->tap("crf", config::Pass::forward,
                 {TapTensor::f64("log_z", lz_.as<double>(), B),
                  TapTensor::f64("gold", lz_.as<double>() + B, B)});
  const CrfParamView& crf = layout_.crf();
  StepScalars* dsc = scalars_.as<StepScalars>();
  crf::device::l2_penalty(reg, C, penalized_durations(dims_), crf.transition.in(params_.as<float>()),
                          crf.duration_bias.in(params_.as<float>()), nullptr, nullptr, &dsc->penalty, stream_);
  numerics_->tap("penalty", config::Pass::forward, {TapTensor::f64("penalty", &dsc->penalty, 1)});
  float* G = grad_.as<float>();
  const size_t ncum = static_cast<size_t>(B) * (T + 1) * C;
  numerics_->tap("crf", config::Pass::backward,
                 {TapTensor::f32("d_cum_scores", dcum_.as<float>(), ncum), TapTensor::grad_of(crf.transition, G),
                  TapTensor::grad_of(crf.duration_bias, G), TapTensor::grad_of(crf.start, G),
                  TapTensor::grad_of(crf.end, G)});
  if (dims_.onset_input())  // crf.onset_features: d onset [B][T][C]
    numerics_->tap("crf", config::Pass::backward,
                   {TapTensor::f32("d_onset", donset_.as<float>(), static_cast<size_t>(B) * T * C)});
}

void CudaExecutor::crf_failed(const std::invalid_argument& e) {
  if (numerics_->checking()) {
    numerics_->queue_readback();
    TS_CUDA(cudaStreamSynchronize(stream_));
    if (auto hit = numerics_->first_hit()) throw NumericsError(*hit);
  }
  throw NonFiniteError("CRF input", e.what());  // the backend names the tensor (e.g. cum_scores)
}

void CudaExecutor::crf_backward(const Batch& batch, double scale, std::vector<double>& log_z, std::vector<double>& gold,
                  double reg) {
  const int B = batch.input.B, T = batch.input.T;
  const crf::Dims dims = dims_.crf_dims(B, T);
  const CrfParamView& crf = layout_.crf();
  float* G = grad_.as<float>();
  if (backend_->on_device()) {
    const crf::Params p = device_crf_params();
    lz_.reserve(2 * B * sizeof(double));
    crf::Grads g{dcum_.as<float>(), crf.transition.in(G), crf.duration_bias.in(G), crf.start.in(G), crf.end.in(G)};
    if (dims_.onset_input()) {
      donset_.reserve(static_cast<size_t>(B) * T * dims_.num_classes * sizeof(float));
      g.onset = donset_.as<float>();
    }
    try {
      if (batch.transcript()) {
        const size_t bn = static_cast<size_t>(B) * batch.N * sizeof(int32_t);
        align_phones_.upload(batch.phones.data(), bn, stream_);
        const std::vector<int32_t> links = batch.graph_links();  // the phone graph (the chain, or alternatives)
        align_opt_.upload(links.data(), bn, stream_);
        align_nph_.upload(batch.num_phones.data(), static_cast<size_t>(B) * sizeof(int32_t), stream_);
        session_->transcript_backward(dims, p, batch.N, align_phones_.as<int32_t>(), align_nph_.as<int32_t>(), nullptr,
                                      align_opt_.as<int32_t>(), scale, lz_.as<double>(), lz_.as<double>() + B, g);
      } else {
        session_->backward(dims, p, labels_.as<int32_t>(), scale, lz_.as<double>(), lz_.as<double>() + B, g);
      }
    } catch (const std::invalid_argument& e) {
      crf_failed(e);
    }
    if (numerics_->active()) crf_taps(B, T, reg);
    std::vector<double> both(2 * B);
    lz_.download(both.data(), both.size() * sizeof(double), stream_);
    TS_CUDA(cudaStreamSynchronize(stream_));
    std::copy(both.begin(), both.begin() + B, log_z.begin());
    std::copy(both.begin() + B, both.end(), gold.begin());
    return;
  }
  // Host backend (reference / cpu): cum to the host, CRF there, gradients back.
  const std::vector<float> cum = last_cum();
  const std::vector<float> onset = last_onset();
  std::vector<float> hp;
  host_crf_param_copy(hp);
  crf::HostRunOptions run_opts;
  run_opts.gradients = true;
  run_opts.viterbi = false;
  run_opts.scale = scale;
  crf::HostResult r;
  try {
    const crf::Params p = host_crf_params(hp, cum, batch, onset);
    r = batch.transcript() ? transcript_crf_host(*session_, dims, p, batch, scale)
                           : session_->run_host(dims, p, batch.labels.data(), run_opts);
  } catch (const std::invalid_argument& e) {
    crf_failed(e);
  }
  log_z = r.log_z;
  gold = r.gold;
  // Synchronous copies from pageable memory, then the stream continues.
  dcum_.upload(r.grad_cum_scores.data(), r.grad_cum_scores.size() * sizeof(float), stream_);
  auto put = [&](const CrfTensor& t, const std::vector<float>& g) {
    cuda::copy_to_device(t.in(G), g.data(), t.size * sizeof(float), stream_);
  };
  put(crf.transition, r.grad_transition);
  put(crf.duration_bias, r.grad_duration_bias);
  put(crf.start, r.grad_start);
  put(crf.end, r.grad_end);
  if (dims_.onset_input()) donset_.upload(r.grad_onset.data(), r.grad_onset.size() * sizeof(float), stream_);
  if (numerics_->active()) {
    // log Z and gold to the device for their taps (a fault planted there comes back)
    std::vector<double> both(r.log_z);
    both.insert(both.end(), r.gold.begin(), r.gold.end());
    lz_.reserve(2 * B * sizeof(double));
    lz_.upload(both.data(), both.size() * sizeof(double), stream_);
    crf_taps(B, T, reg);
    if (numerics_->plants("crf", config::Pass::forward)) {
      lz_.download(both.data(), both.size() * sizeof(double), stream_);
      TS_CUDA(cudaStreamSynchronize(stream_));
      std::copy(both.begin(), both.begin() + B, log_z.begin());
      std::copy(both.begin() + B, both.end(), gold.begin());
    }
  }
  TS_CUDA(cudaStreamSynchronize(stream_));
}

void CudaExecutor::frame_ce(int B, int T, double grad_scale) {
  const size_t frames = static_cast<size_t>(B) * T;
  dce_.reserve(frames * dims_.num_classes * sizeof(float));
  ce_frames_.reserve(frames * sizeof(double));
  ce_utt_.reserve(static_cast<size_t>(B) * sizeof(double));
  gpu::frame_cross_entropy(B, T, dims_.num_classes, encoder_->scores(), lengths_.as<int32_t>(),
                           labels_.as<int32_t>(), grad_scale, ce_frames_.as<double>(), ce_utt_.as<double>(),
                           dce_.as<float>(), stream_);
}

double CudaExecutor::frame_ce_sum(int B) {
  std::vector<double> per(B);
  ce_utt_.download(per.data(), per.size() * sizeof(double), stream_);
  TS_CUDA(cudaStreamSynchronize(stream_));
  double sum = 0.0;
  for (double v : per) sum += v;
  return sum;
}

}  // namespace timitseg::model::cuda_detail
