// Long recordings on the GPU executor (model/cuda/cuda_executor_impl.h,
// align_long, decode_long): the encoder in windows so that its GPU memory
// stays that of one window; the constrained Viterbi (in a band) or the
// decoding on the host's cpu backend.
#include <memory>

#include "common/cuda.h"
#include "common/cuda_check.h"
#include "common/progress.h"
#include "crf/cumsum.h"
#include "model/cuda/cuda_executor_impl.h"
#include "model/long_input.h"

namespace timitseg::model::cuda_detail {

void CudaExecutor::long_scores(const Batch& batch, std::vector<float>& x, std::vector<float>& onset) {
  const int T = batch.input.T, C = dims_.num_classes, D = dims_.input_dim;
  const int64_t L = batch.input.lengths[0];
  x.assign(static_cast<size_t>(T) * C, 0.0f);  // projection output [T][C] (padding 0)
  onset.assign(dims_.onset ? static_cast<size_t>(T) * C : 0, 0.0f);
  encoder_->set_training(false);
  ForwardOptions fo;  // dropout 0: evaluation
  Progress bar("encoder (windows of " + std::to_string(kWindowFrames) + " frames)", L, "frame");
  for (const Window& w : windows_of(L)) {
    Batch sub;
    sub.input.B = 1;
    sub.input.T = static_cast<int>(w.wb - w.wa);
    sub.input.lengths = {sub.input.T};
    sub.input.features.assign(batch.input.features.begin() + w.wa * D, batch.input.features.begin() + w.wb * D);
    sub.ids = batch.ids;
    stage(sub, /*with_labels=*/false);
    numerics_->begin_step(false, FaultSpec{}, 0, stream_);  // taps nothing
    cum_.reserve(cum_bytes(1, sub.input.T));
    encoder_->forward(params_.as<float>(), encoder_batch(sub), fo, cum_.as<float>());
    const size_t off = static_cast<size_t>(w.a - w.wa) * C, rows = static_cast<size_t>(w.b - w.a) * C;
    cuda::copy_to_host(x.data() + w.a * C, encoder_->scores() + off, rows * sizeof(float), stream_);
    if (dims_.onset)
      cuda::copy_to_host(onset.data() + w.a * C, encoder_->onset_scores() + off, rows * sizeof(float), stream_);
    TS_CUDA(cudaStreamSynchronize(stream_));
    bar.advance(w.b - w.a);
  }
  bar.finish();
  have_cum_ = false;  // cum_ holds the last window only
}

crf::AlignResult CudaExecutor::align_long(const Batch& batch, int64_t N, const std::vector<int32_t>& phones,
                                          const std::vector<int32_t>& num_phones, const std::vector<int32_t>& optional,
                                          AlignConfidence* confidence) {
  const int T = batch.input.T, C = dims_.num_classes;
  std::vector<float> x, onset;
  long_scores(batch, x, onset);
  std::vector<float> cum(static_cast<size_t>(T + 1) * C);
  crf::centered_cumsum_forward<float>(1, T, C, x.data(), batch.input.lengths.data(), cum.data());
  x = std::vector<float>();
  std::vector<float> hp;
  host_crf_param_copy(hp);
  const crf::Dims dims{1, T, dims_.max_duration, C};
  std::unique_ptr<crf::Backend> cpu = crf::make_backend(crf::BackendKind::cpu, crf::BackendOptions{0, nullptr});
  const crf::Params p = host_crf_params(hp, cum, batch, onset);
  crf::AlignResult r =
      crf::align_host(*cpu, dims, p, N, phones.data(), num_phones.data(), optional.empty() ? nullptr : optional.data());
  if (confidence) {  // windows of the transcript on the host (docs/align.md "Confidence")
    crf::Session session(*cpu);
    fill_align_confidence(session, dims, p, N, phones, num_phones, optional, r, confidence);
  }
  return r;
}

std::vector<std::vector<crf::Segment>> CudaExecutor::decode_long(const Batch& batch, std::vector<float>* scores,
                                                                std::vector<double>* nll) {
  const int T = batch.input.T, C = dims_.num_classes;
  std::vector<float> x, onset;
  long_scores(batch, x, onset);
  std::vector<float> cum(static_cast<size_t>(T + 1) * C);
  crf::centered_cumsum_forward<float>(1, T, C, x.data(), batch.input.lengths.data(), cum.data());
  if (scores) *scores = std::move(x);
  x = std::vector<float>();
  std::vector<float> hp;
  host_crf_param_copy(hp);
  const crf::Dims dims{1, T, dims_.max_duration, C};
  std::unique_ptr<crf::Backend> cpu = crf::make_backend(crf::BackendKind::cpu, crf::BackendOptions{0, nullptr});
  crf::Session session(*cpu);
  const crf::Params p = host_crf_params(hp, cum, batch, onset);
  const int32_t* labels = nll ? batch.labels.data() : nullptr;
  const crf::HostResult r = posterior_ ? posterior_decode_on_host(session, dims, p, labels)
                                       : decode_on_host(session, dims, p, labels, phone_bonus_);
  if (nll) *nll = {r.log_z[0] - r.gold[0]};
  std::vector<std::vector<crf::Segment>> out(1);
  for (const crf::Segment& s : r.segments) out[0].push_back(s);
  return out;
}

}  // namespace timitseg::model::cuda_detail
