// Decoding on the GPU executor (model/cuda/cuda_executor_impl.h): Viterbi
// on the device (cuda backend) or through host copies, and crf.decode =
// posterior, with the dev loss from the same forward; forced alignment.
#include "model/cuda/cuda_executor_impl.h"

#include <algorithm>
#include <cmath>

#include "common/cuda.h"
#include "common/cuda_check.h"
#include "crf/posterior.h"
#include "crf/segments.h"
#include "crf/validate.h"
#include "model/cuda/ops.h"
#include "model/dist_step.h"
#include "model/long_input.h"

namespace timitseg::model::cuda_detail {

std::vector<std::vector<crf::Segment>> CudaExecutor::decode(const Batch& batch, std::vector<float>* scores,
                                                           std::vector<double>* nll) {
  const int B = batch.input.B, T = batch.input.T;
  if (B == 1 && batch.input.lengths[0] > kWindowFrames) return decode_long(batch, scores, nll);
  stage(batch, /*with_labels=*/nll != nullptr);
  numerics_->begin_step(false, config::FaultSpec{}, 0, stream_);  // decoding taps nothing
  cum_.reserve(cum_bytes(B, T));
  ForwardOptions forward_opts;  // dropout 0: evaluation
  encoder_->set_training(false);
  encoder_->forward(params_.as<float>(), encoder_batch(batch), forward_opts, cum_.as<float>());
  if (scores) {
    scores->resize(static_cast<size_t>(B) * T * dims_.num_classes);
    cuda::copy_to_host(scores->data(), encoder_->scores(), scores->size() * sizeof(float), stream_);
  }
  have_cum_ = true;
  last_B_ = B;
  last_T_ = T;
  const crf::Dims dims = dims_.crf_dims(B, T);
  std::vector<crf::Segment> segs;
  if (posterior_) {
    segs = posterior_decode(batch, nll);
  } else if (backend_->on_device()) {
    segs = viterbi_on_device(dims, device_crf_params(), nll);
  } else {
    const std::vector<float> cum = last_cum();
    const std::vector<float> onset = last_onset();
    std::vector<float> hp;
    host_crf_param_copy(hp);
    crf::HostResult r = session_->decode_host(dims, host_crf_params(hp, cum, batch, onset),
                                              nll ? batch.labels.data() : nullptr, phone_bonus_);
    segs = std::move(r.segments);
    if (nll) {
      nll->resize(B);
      for (int b = 0; b < B; ++b) (*nll)[b] = r.log_z[b] - r.gold[b];
    }
  }
  std::vector<std::vector<crf::Segment>> out(B);
  for (const crf::Segment& s : segs) out.at(s.batch).push_back(s);
  return out;
}

// The Viterbi of the cuda backend on device inputs p (cum [B][T+1][C] and the
// lengths on the device): segments read back; with nll, log Z and the gold
// score of the staged labels_ [B][T] from the same inputs, nll [B] = log Z - gold.
std::vector<crf::Segment> CudaExecutor::viterbi_on_device(const crf::Dims& dims, const crf::Params& p,
                                                          std::vector<double>* nll) {
  const int B = static_cast<int>(dims.B), T = static_cast<int>(dims.T);
  vit_score_.reserve(B * sizeof(double));
  vit_segs_.reserve(static_cast<size_t>(B) * T * 3 * sizeof(int32_t));
  vit_nseg_.reserve(B * sizeof(int32_t));
  // crf.phone_bonus: Viterbi on a biased copy of transition [C][C]
  session_->viterbi(dims, p, phone_bonus_, vit_score_.as<double>(), vit_segs_.as<int32_t>(), vit_nseg_.as<int32_t>());
  if (nll) {  // the dev loss from the same forward: log Z and gold score [B] on the device
    lz_.reserve(2 * B * sizeof(double));
    session_->log_partition(dims, p, lz_.as<double>());
    session_->gold_score(dims, p, labels_.as<int32_t>(), lz_.as<double>() + B);
    std::vector<double> both(2 * B);
    lz_.download(both.data(), both.size() * sizeof(double), stream_);
    TS_CUDA(cudaStreamSynchronize(stream_));
    nll->resize(B);
    for (int b = 0; b < B; ++b) (*nll)[b] = both[b] - both[B + b];
  }
  std::vector<int32_t> hs(static_cast<size_t>(B) * T * 3), hn(B);
  vit_segs_.download(hs.data(), hs.size() * sizeof(int32_t), stream_);
  vit_nseg_.download(hn.data(), hn.size() * sizeof(int32_t), stream_);
  TS_CUDA(cudaStreamSynchronize(stream_));
  return crf::collect_segments(dims, hs.data(), hn.data());
}

// crf.decode = posterior for the cum_ of the last forward (crf/posterior.h).
// cuda backend: d log Z / d cum on the device (one backward without labels,
// scale 1, parameter gradients not wanted), copied to the host for the
// marginals and the per-frame argmax; the dev loss from log_partition and
// gold_score on the device. Host backends: posterior_decode_on_host on host copies.
std::vector<crf::Segment> CudaExecutor::posterior_decode(const Batch& batch, std::vector<double>* nll) {
  const int B = batch.input.B, T = batch.input.T;
  const crf::Dims dims = dims_.crf_dims(B, T);
  if (!backend_->on_device()) {
    const std::vector<float> cum = last_cum();
    const std::vector<float> onset = last_onset();
    std::vector<float> hp;
    host_crf_param_copy(hp);
    crf::HostResult r = posterior_decode_on_host(*session_, dims, host_crf_params(hp, cum, batch, onset),
                                                 nll ? batch.labels.data() : nullptr);
    if (nll) {
      nll->resize(B);
      for (int b = 0; b < B; ++b) (*nll)[b] = r.log_z[b] - r.gold[b];
    }
    return std::move(r.segments);
  }
  const crf::Params p = device_crf_params();
  const size_t ncum = static_cast<size_t>(B) * (T + 1) * dims_.num_classes;
  dcum_.reserve(ncum * sizeof(float));
  lz_.reserve(2 * B * sizeof(double));
  crf::Grads g{};
  g.cum_scores = dcum_.as<float>();
  session_->backward(dims, p, nullptr, 1.0, lz_.as<double>(), nullptr, g);
  if (nll) session_->gold_score(dims, p, labels_.as<int32_t>(), lz_.as<double>() + B);
  std::vector<float> grad(ncum);
  std::vector<double> both(2 * B);
  dcum_.download(grad.data(), ncum * sizeof(float), stream_);
  lz_.download(both.data(), both.size() * sizeof(double), stream_);
  TS_CUDA(cudaStreamSynchronize(stream_));
  if (nll) {
    nll->resize(B);
    for (int b = 0; b < B; ++b) (*nll)[b] = both[b] - both[B + b];
  }
  std::vector<double> marginals(static_cast<size_t>(B) * T * dims_.num_classes);
  crf::frame_marginals(dims, grad.data(), lengths_host_.data(), marginals.data());
  return crf::posterior_segments(dims, marginals.data(), lengths_host_.data());
}

// The forward of inference (no dropout, no labels staged, nothing tapped) of
// a batch that fits: cum_ [B][T+1][C] on the device, kept as the last forward.
void CudaExecutor::inference_forward(const Batch& batch) {
  const int B = batch.input.B, T = batch.input.T;
  stage(batch, /*with_labels=*/false);
  numerics_->begin_step(false, config::FaultSpec{}, 0, stream_);
  cum_.reserve(cum_bytes(B, T));
  ForwardOptions forward_opts;  // dropout 0: evaluation
  encoder_->set_training(false);
  encoder_->forward(params_.as<float>(), encoder_batch(batch), forward_opts, cum_.as<float>());
  have_cum_ = true;
  last_B_ = B;
  last_T_ = T;
}

// Forced alignment of the phone sequences [B][N] (crf::Session::align on the
// device, or align_host on host copies for a host backend or a long recording).
namespace {
constexpr double kDeviceAlignTableBytes = 1024.0 * 1024.0 * 1024.0;  // 1 GiB
}  // namespace

crf::AlignResult CudaExecutor::align(const Batch& batch, int64_t N, const std::vector<int32_t>& phones,
                                     const std::vector<int32_t>& num_phones, const std::vector<int32_t>& optional,
                                     crf::AlignConfidence* confidence, crf::AlignBoundaries boundaries) {
  const int32_t* host_opt = optional.empty() ? nullptr : optional.data();
  const int B = batch.input.B, T = batch.input.T;
  if (B == 1 && batch.input.lengths[0] > kWindowFrames)
    return align_long(batch, N, phones, num_phones, optional, confidence, boundaries);
  inference_forward(batch);
  const crf::Dims dims = dims_.crf_dims(B, T);
  // The cuda backend keeps the full table, B (T+1) N x 24 bytes of GPU memory;
  // above kDeviceAlignTableBytes (long recordings) the cpu backend aligns the
  // host copies in a band instead (crf/cpu/align_banded.h, docs/align.md).
  const bool long_audio =
      static_cast<double>(B) * static_cast<double>(T + 1) * static_cast<double>(N) * 24.0 > kDeviceAlignTableBytes;
  if (!backend_->on_device() || long_audio) {
    const std::vector<float> cum = last_cum();
    const std::vector<float> onset = last_onset();
    std::vector<float> hp;
    host_crf_param_copy(hp);
    const crf::Params host_p = host_crf_params(hp, cum, batch, onset);
    crf::AlignResult r;
    if (backend_->on_device()) {
      std::unique_ptr<crf::Backend> cpu = crf::make_backend(crf::BackendKind::cpu, crf::BackendOptions{0, nullptr});
      r = crf::align_host(*cpu, dims, host_p, N, phones.data(), num_phones.data(), host_opt);
    } else {
      r = session_->align_host(dims, host_p, N, phones.data(), num_phones.data(), host_opt);
    }
    finish_alignment(*session_, dims, host_p, N, phones, num_phones, optional, boundaries, &r, confidence);
    return r;
  }
  crf::validate_align_host(dims, N, phones.data(), num_phones.data(), host_opt);
  const crf::Params p = device_crf_params();
  align_phones_.upload(phones.data(), phones.size() * sizeof(int32_t), stream_);
  align_nph_.upload(num_phones.data(), num_phones.size() * sizeof(int32_t), stream_);
  if (host_opt) align_opt_.upload(host_opt, optional.size() * sizeof(int32_t), stream_);
  align_score_.reserve(B * sizeof(double));
  align_spans_.reserve(static_cast<size_t>(B) * N * 2 * sizeof(int32_t));
  session_->align(dims, p, N, align_phones_.as<int32_t>(), align_nph_.as<int32_t>(),
                  host_opt ? align_opt_.as<int32_t>() : nullptr, align_score_.as<double>(), align_spans_.as<int32_t>());
  crf::AlignResult r;
  r.score.resize(B);
  r.spans.resize(static_cast<size_t>(B) * N * 2);
  align_score_.download(r.score.data(), B * sizeof(double), stream_);
  align_spans_.download(r.spans.data(), r.spans.size() * sizeof(int32_t), stream_);
  TS_CUDA(cudaStreamSynchronize(stream_));
  if (confidence || boundaries != crf::AlignBoundaries::viterbi) {  // on host copies of this forward (the
    const std::vector<float> cum = last_cum();                        // session uploads them for the cuda backend)
    const std::vector<float> onset = last_onset();
    std::vector<float> hp;
    host_crf_param_copy(hp);
    finish_alignment(*session_, dims, host_crf_params(hp, cum, batch, onset), N, phones, num_phones, optional,
                     boundaries, &r, confidence);
  }
  return r;
}

// Span marginals of queries [B][Q][3] after one forward without dropout: the
// session's host path on copies of this forward (it uploads them for the cuda backend).
std::vector<double> CudaExecutor::span_marginals(const Batch& batch, int64_t Q, const std::vector<int32_t>& queries,
                                                 const std::vector<int32_t>& num_queries) {
  const int B = batch.input.B, T = batch.input.T;
  if (B == 1 && batch.input.lengths[0] > kWindowFrames) return span_marginals_long(batch, Q, queries, num_queries);
  inference_forward(batch);
  const crf::Dims dims = dims_.crf_dims(B, T);
  const std::vector<float> cum = last_cum();
  const std::vector<float> onset = last_onset();
  std::vector<float> hp;
  host_crf_param_copy(hp);
  return session_
      ->span_marginals_host(dims, host_crf_params(hp, cum, batch, onset), Q, queries.data(), num_queries.data())
      .marginal;
}

}  // namespace timitseg::model::cuda_detail
