// The GPU executor's class (model/cuda/cuda_executor.h has the interface;
// the design of a step: model/cuda/cuda_executor.cpp). Internal to
// model/cuda/: the step and the state here, decoding and forced alignment
// in cuda_executor_decode.cpp.
#pragma once

#include "model/cuda/cuda_executor.h"

#include "model/duration_model.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/buffer.h"
#include "common/cuda.h"
#include "common/cuda_check.h"
#include "crf/posterior.h"
#include "crf/session.h"
#include "model/cuda/cuda_encoder.h"
#include "model/cuda/device_reducer.h"
#include "model/cuda/frame_ce.h"
#include "model/cuda/numerics_taps.h"
#include "model/cuda/ops.h"
#include "model/dist_step.h"

namespace timitseg::model::cuda_detail {


using Clock = std::chrono::steady_clock;
inline double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Page-locked host memory (cudaMallocHost), grown on demand; async copies
// from it overlap with host work.
class Pinned {
 public:
  Pinned() = default;
  ~Pinned() { cuda::pinned_free(ptr_); }
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
  void* reserve(size_t bytes) {
    if (bytes > cap_) {
      cuda::pinned_free(ptr_);
      ptr_ = nullptr;
      cap_ = 0;
      ptr_ = cuda::pinned_alloc(bytes);
      cap_ = bytes;
    }
    return ptr_;
  }
  template <class T>
  T* as() {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  size_t cap_ = 0;
};

// Scalars read back once per step.
struct StepScalars {
  double norm = 0, penalty = 0;
  double penalty_again = 0;  // with taps: the value of the second (gradient) penalty call, unused
  double reduced_norm = 0;   // several processes: the norm of the gradient summed over the ranks
};

// Slots of one step at most: forward 8 + 2L, backward 21 + 9L (model/numerics.h).
inline int max_numeric_slots(const ModelDims& d) { return 32 + 12 * d.num_layers + (d.onset ? 5 : 0); }

inline ExecutorOptions checked(const ExecutorOptions& o) {
  if (o.deterministic && (o.rnn_algo == "persist_static" || o.rnn_algo == "persist_dynamic"))
    throw std::invalid_argument("cuda executor: --deterministic refuses rnn_algo '" + o.rnn_algo +
                                "' (the determinism of cuDNN's persistent algorithms is not established); use "
                                "train.rnn_algo=standard or fused");
  return o;
}

class CudaExecutor final : public Executor {
 public:
  // collectives: "" chooses the gradient all-reduce from the environment
  // (model/cuda/device_reducer.h) for a world of several processes and none
  // otherwise; "nccl" or "mpi" forces that one even for a world of one (tests).
  CudaExecutor(const ModelDims& dims, const ExecutorOptions& options, const std::string& collectives = "")
      : dims_(dims),
        layout_(dims),
        rnn_algo_(options.rnn_algo),
        crf_name_(options.crf_backend),
        phone_bonus_(options.phone_bonus),
        posterior_(options.decode == "posterior") {
    const ExecutorOptions o = checked(options);
    cuda::require_device("; train on the CPU with train.device=cpu");
    TS_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CudaEncoderOptions eo;
    eo.rnn_algo = o.rnn_algo;
    eo.stream = stream_;
    eo.deterministic = o.deterministic;
    encoder_ = make_cuda_encoder(dims, eo);
    numerics_ = std::make_unique<gpu::DeviceNumerics>(max_numeric_slots(dims));
    encoder_->set_numerics(numerics_.get());
    crf::BackendOptions bo;
    bo.threads = o.threads;
    bo.stream = stream_;
    backend_ = crf::make_backend(o.crf_backend, bo);
    session_ = std::make_unique<crf::Session>(*backend_, stream_);
    device_name_ = cuda::device_name();
    const size_t n = layout_.total();
    params_.reserve(n * sizeof(float));
    grad_.reserve(n * sizeof(float));
    m_.reserve(n * sizeof(float));
    v_.reserve(n * sizeof(float));
    scalars_.reserve(sizeof(StepScalars));
    norm_scratch_.reserve(std::max<size_t>(1, gpu::global_norm_scratch_bytes(n)));
    host_scalars_.reserve(sizeof(StepScalars));
    world_ = o.world;
    if (world_ && (world_->size() > 1 || !collectives.empty())) {
      reducer_ = gpu::make_device_reducer(*world_, collectives.empty() ? gpu::collectives_from_environment()
                                                                       : collectives);
      grad_sum_.reserve(n * sizeof(float));
    }
  }
  ~CudaExecutor() override {
    reducer_.reset();
    encoder_.reset();
    numerics_.reset();
    session_.reset();
    backend_.reset();
    if (stream_) cudaStreamDestroy(stream_);
  }

  Device device() const override { return Device::cuda; }
  std::string description() const override {
    return "cuda: " + device_name_ + ", cuDNN LSTM (" + rnn_algo_ + "), crf " + backend_->name() +
           (reducer_ ? ", allreduce " + reducer_->name() : "");
  }
  const ModelDims& dims() const override { return dims_; }
  Encoder& encoder() override { return *encoder_; }

  void set_state(const std::vector<float>& params, const AdamW& opt) override {
    const size_t n = layout_.total();
    if (params.size() != n) throw std::invalid_argument("cuda executor: parameter buffer has the wrong size");
    opt_ = opt;
    if (opt_.m.size() != n) opt_.reset(n);
    std::vector<float> derived = params;  // crf.duration_model = lognormal: the table follows its parameters
    derive_duration_table(layout_, derived.data());
    params_.upload(derived.data(), n * sizeof(float), nullptr);
    m_.upload(opt_.m.data(), n * sizeof(float), nullptr);
    v_.upload(opt_.v.data(), n * sizeof(float), nullptr);
    opt_.m.clear();
    opt_.v.clear();  // the device copies are the state from here on
  }

  void get_state(std::vector<float>& params, AdamW& opt) override {
    const size_t n = layout_.total();
    TS_CUDA(cudaStreamSynchronize(stream_));
    params.resize(n);
    opt = opt_;
    opt.m.resize(n);
    opt.v.resize(n);
    params_.download(params.data(), n * sizeof(float), nullptr);
    m_.download(opt.m.data(), n * sizeof(float), nullptr);
    v_.download(opt.v.data(), n * sizeof(float), nullptr);
  }

  // Loss and gradients into grad_ (device), scalars read back; no update.
  StepResult forward_backward(const Batch& batch, const StepOptions& o) {
    QueuedStep q = queue_forward_backward(batch, o);
    TS_CUDA(cudaStreamSynchronize(stream_));
    return finish_forward_backward(q, o);
  }

  // What queue_forward_backward leaves for finish_forward_backward.
  struct QueuedStep {
    StepResult res;                  // the part timings so far
    std::vector<double> log_z, gold;  // [B] (the CRF's read-back)
    double norm = 1;                  // step_norm
    Clock::time_point t0;             // the encoder backward's start (time_parts)
  };

  // forward_backward up to its one synchronization: the batch staged, the
  // forward, the CRF (log Z and gold read back), the backward, the penalty,
  // the gradient norm and the scalars' and taps' read-back queued on stream_.
  QueuedStep queue_forward_backward(const Batch& batch, const StepOptions& o) {
    QueuedStep q;
    StepResult& res = q.res;
    const int B = batch.input.B, T = batch.input.T, C = dims_.num_classes, K = dims_.max_duration;
    const size_t n = layout_.total();
    auto mark = [&](double& slot, Clock::time_point& t0) {
      if (!o.time_parts) return;
      TS_CUDA(cudaStreamSynchronize(stream_));
      slot += since(t0);
      t0 = Clock::now();
    };
    auto t0 = Clock::now();
    stage(batch, /*with_labels=*/true);
    numerics_->begin_step(o.check_numerics, o.fault, o.step, stream_);
    const bool taps = numerics_->active();
    // debug.inject_nonfinite: set the entries for this step, restored below.
    std::vector<float> saved(o.poison.size());
    for (size_t i = 0; i < o.poison.size(); ++i) {
      float* at = params_.as<float>() + o.poison[i].first;
      cuda::copy_to_host(&saved[i], at, sizeof(float), stream_);
      TS_CUDA(cudaStreamSynchronize(stream_));
      cuda::copy_to_device(at, &o.poison[i].second, sizeof(float), stream_);
      TS_CUDA(cudaStreamSynchronize(stream_));
    }
    struct Restore {
      CudaExecutor* self;
      const StepOptions& o;
      std::vector<float>& saved;
      ~Restore() {
        for (size_t i = 0; i < o.poison.size(); ++i)
          try {
            self->restore_param(o.poison[i].first, saved[i]);
          } catch (...) {
          }
      }
    } restore{this, o, saved};

    ForwardOptions fo;
    fo.dropout = o.dropout;
    fo.seed = o.seed;
    fo.step = static_cast<uint64_t>(opt_.step + 1);
    encoder_->set_training(true);
    cum_.reserve(cum_bytes(B, T));
    dcum_.reserve(cum_bytes(B, T));
    encoder_->forward(params_.as<float>(), encoder_batch(batch), fo, cum_.as<float>());
    have_cum_ = true;
    last_B_ = B;
    last_T_ = T;
    mark(res.times.encoder_forward, t0);

    const double norm = step_norm(o, batch);  // the global batch's with several processes (model/dist_step.h)
    q.norm = norm;
    std::vector<double>& log_z = q.log_z;
    std::vector<double>& gold = q.gold;
    log_z.assign(B, 0.0);
    gold.assign(B, 0.0);
    const ParamInfo& A = layout_.get("crf.transition");
    const ParamInfo& D = layout_.get("crf.duration_bias");
    StepScalars* dsc = scalars_.as<StepScalars>();
    crf_backward(batch, 1.0 / norm, log_z, gold, o.crf_reg);
    const bool with_ce = o.frame_ce_weight > 0.0;
    if (with_ce) frame_ce(B, T, o.frame_ce_weight / norm);
    mark(res.times.crf, t0);

    encoder_->backward_with_onset(params_.as<float>(), dcum_.as<float>(), dims_.onset ? donset_.as<float>() : nullptr,
                                  grad_.as<float>(), with_ce ? dce_.as<float>() : nullptr);
    // with taps, the value was computed (and tapped) in the forward order, in crf_backward
    gpu::l2_penalty(o.crf_reg, C, penalized_durations(dims_), params_.as<float>() + A.offset, params_.as<float>() + D.offset,
                    grad_.as<float>() + A.offset, grad_.as<float>() + D.offset,
                    taps ? &dsc->penalty_again : &dsc->penalty, stream_);
    if (taps) {
      // the CRF parameter gradients after the penalty's share
      using gpu::TapTensor;
      float* G = grad_.as<float>();
      const ParamInfo& S = layout_.get("crf.start");
      const ParamInfo& E = layout_.get("crf.end");
      numerics_->tap("penalty", Pass::backward,
                     {TapTensor::f32("d_crf.transition", G + A.offset, A.size),
                      TapTensor::f32("d_crf.duration_bias", G + D.offset, D.size),
                      TapTensor::f32("d_crf.start", G + S.offset, S.size),
                      TapTensor::f32("d_crf.end", G + E.offset, E.size)});
    }
    if (dims_.duration_lognormal) {  // d table (loss + penalty) -> d crf.duration_lognormal; the table's own entry 0
      const ParamInfo& LN = layout_.get("crf.duration_lognormal");
      gpu::lognormal_duration_backward(K, C, params_.as<float>() + LN.offset, grad_.as<float>() + D.offset,
                                       grad_.as<float>() + LN.offset, stream_);
    }
    gpu::global_norm(grad_.as<float>(), n, &dsc->norm, norm_scratch_.data(), stream_);
    scalars_.download(host_scalars_.reserve(sizeof(StepScalars)), sizeof(StepScalars), stream_);
    numerics_->queue_readback();
    q.t0 = t0;
    return q;
  }

  // forward_backward after its synchronization: the taps' first hit, the
  // non-finite checks and the loss from the read-back.
  StepResult finish_forward_backward(QueuedStep& q, const StepOptions& o) {
    StepResult res = q.res;
    const int B = static_cast<int>(q.log_z.size());
    const double norm = q.norm;
    const StepScalars sc = *host_scalars_.as<StepScalars>();
    if (o.time_parts) res.times.encoder_backward += since(q.t0);
    if (auto hit = numerics_->first_hit()) throw NumericsError(*hit);
    const std::vector<double>& log_z = q.log_z;
    const std::vector<double>& gold = q.gold;
    const bool with_ce = o.frame_ce_weight > 0.0;
    for (int b = 0; b < B; ++b) {
      if (!std::isfinite(log_z[b]))
        throw NonFiniteError("log_partition", "non-finite log partition for batch row " + std::to_string(b));
      if (!std::isfinite(gold[b]))
        throw NonFiniteError("gold_score", "non-finite gold score for batch row " + std::to_string(b));
      res.nll_sum += log_z[b] - gold[b];
    }
    res.penalty = sc.penalty;
    res.loss = res.nll_sum / norm + res.penalty;
    if (with_ce) {
      res.frame_ce_sum = frame_ce_sum(B);
      res.loss += o.frame_ce_weight * res.frame_ce_sum / norm;
    }
    res.grad_norm = sc.norm;
    if (!std::isfinite(res.loss)) throw NonFiniteError("loss", "non-finite loss");
    if (!std::isfinite(sc.norm)) throw_first_nonfinite_gradient(grad_);
    return res;
  }

  // Several processes (reducer_): this rank's share, the agreed status, the
  // gradient all-reduce and the global norm of the reduced gradient
  // (cuda_executor_dist.cpp). The result is the global batch's on every rank.
  StepResult share_forward_backward(const Batch& batch, const StepOptions& o);

  StepResult train_step(const Batch& batch, const StepOptions& o) override {
    StepResult res = reducer_ ? share_forward_backward(batch, o) : forward_backward(batch, o);
    const size_t n = layout_.total();
    StepScalars* dsc = scalars_.as<StepScalars>();
    const auto t_opt = Clock::now();
    float* g = update_grad();
    if (o.clip_norm > 0) gpu::clip_by_norm(g, n, reducer_ ? &dsc->reduced_norm : &dsc->norm, o.clip_norm, stream_);
    ++opt_.step;
    // two parameter groups when crf.lr_scale != 1, as AdamW::update (model/optim.h)
    const size_t split = o.crf_lr_scale == 1.0 ? n : layout_.crf_structure_begin();
    gpu::adamw_update(params_.as<float>(), m_.as<float>(), v_.as<float>(), g, split, o.lr,
                      opt_.beta1, opt_.beta2, opt_.eps, opt_.weight_decay, opt_.step, stream_);
    gpu::adamw_update(params_.as<float>() + split, m_.as<float>() + split, v_.as<float>() + split,
                      g + split, n - split, o.lr * o.crf_lr_scale, opt_.beta1, opt_.beta2, opt_.eps,
                      opt_.weight_decay, opt_.step, stream_);
    if (dims_.duration_lognormal)  // the table follows the updated log-normal parameters
      gpu::lognormal_duration_table(dims_.max_duration, dims_.num_classes,
                                    params_.as<float>() + layout_.get("crf.duration_lognormal").offset,
                                    params_.as<float>() + layout_.get("crf.duration_bias").offset, stream_);
    if (numerics_->active()) {
      // after the update by definition: a hit here restores nothing
      using gpu::TapTensor;
      numerics_->tap("optimizer", Pass::backward,
                     {TapTensor::f32("params", params_.as<float>(), n), TapTensor::f32("exp_avg", m_.as<float>(), n),
                      TapTensor::f32("exp_avg_sq", v_.as<float>(), n)});
      if (numerics_->checking()) {
        numerics_->queue_readback();
        TS_CUDA(cudaStreamSynchronize(stream_));
        if (auto hit = numerics_->first_hit()) throw NumericsError(*hit);
      }
    }
    if (o.time_parts) {
      TS_CUDA(cudaStreamSynchronize(stream_));
      res.times.optimizer += since(t_opt);  // (+ the all-reduce with several processes)
    }
    return res;
  }

  StepResult gradients(const Batch& batch, const StepOptions& o, std::vector<float>& grad) override {
    StepResult r = reducer_ ? share_forward_backward(batch, o) : forward_backward(batch, o);
    grad.resize(layout_.total());
    cuda::copy_to_host(grad.data(), update_grad(), grad.size() * sizeof(float), stream_);
    TS_CUDA(cudaStreamSynchronize(stream_));
    return r;
  }

  // Viterbi (or crf.decode = posterior) segments of a batch (model/cuda/cuda_executor_decode.cpp).
  std::vector<std::vector<crf::Segment>> decode(const Batch& batch, std::vector<float>* scores,
                                                std::vector<double>* nll) override;
  // Forced alignment of the phone sequences (cuda_executor_decode.cpp).
  crf::AlignResult align(const Batch& batch, int64_t N, const std::vector<int32_t>& phones,
                         const std::vector<int32_t>& num_phones, const std::vector<int32_t>& optional) override;

  // crf.decode = posterior for the cum_ of the last forward (crf/posterior.h).
  // cuda backend: d log Z / d cum on the device (one backward without labels,
  // scale 1, parameter gradients not wanted), copied to the host for the
  // marginals and the per-frame argmax; the dev loss from log_partition and
  // gold_score on the device. Host backends: posterior_decode_on_host on host copies.
  std::vector<crf::Segment> posterior_decode(const Batch& batch, std::vector<double>* nll);

  int numerics_slots() const { return numerics_->slots(); }
  std::vector<NumericsHit> numerics_report() const {
    std::vector<NumericsHit> out;
    for (int i = 0; i < numerics_->slots(); ++i) {
      NumericsHit h = numerics_->slot_name(i);
      h.stats = numerics_->stats(i);
      out.push_back(std::move(h));
    }
    return out;
  }

  std::vector<float> last_cum() override {
    std::vector<float> out;
    if (!have_cum_) return out;
    out.resize(static_cast<size_t>(last_B_) * (last_T_ + 1) * dims_.num_classes);
    cum_.download(out.data(), out.size() * sizeof(float), stream_);
    TS_CUDA(cudaStreamSynchronize(stream_));
    return out;
  }

  void restore_param(size_t index, float value) {
    cuda::copy_to_device(params_.as<float>() + index, &value, sizeof(float), stream_);
    TS_CUDA(cudaStreamSynchronize(stream_));
  }

 private:
  size_t cum_bytes(int B, int T) const {
    return static_cast<size_t>(B) * (T + 1) * dims_.num_classes * sizeof(float);
  }

  // Batch -> pinned staging -> device (features, lengths, labels), async.
  void stage(const Batch& batch, bool with_labels) {
    const int B = batch.input.B, T = batch.input.T, D = dims_.input_dim;
    const size_t fbytes = static_cast<size_t>(B) * T * D * sizeof(float);
    const size_t lbytes = static_cast<size_t>(B) * sizeof(int32_t);
    const size_t labbytes = static_cast<size_t>(B) * T * sizeof(int32_t);
    // The previous step's copies out of the staging buffer must be done.
    TS_CUDA(cudaStreamSynchronize(stream_));
    char* h = static_cast<char*>(staging_.reserve(fbytes + lbytes + labbytes));
    std::memcpy(h, batch.input.features.data(), fbytes);
    std::memcpy(h + fbytes, batch.input.lengths.data(), lbytes);
    if (with_labels) std::memcpy(h + fbytes + lbytes, batch.labels.data(), labbytes);
    features_.upload(h, fbytes, stream_);
    lengths_.upload(h + fbytes, lbytes, stream_);
    if (with_labels) labels_.upload(h + fbytes + lbytes, labbytes, stream_);
    lengths_host_ = batch.input.lengths;
  }

  EncoderBatch encoder_batch(const Batch& batch) const {
    EncoderBatch eb;
    eb.B = batch.input.B;
    eb.T = batch.input.T;
    eb.features = features_.as<float>();
    eb.lengths = lengths_host_.data();
    eb.lengths_dev = lengths_.as<int32_t>();
    if (!batch.input.share_rows.empty()) {  // a rank's share: the global batch's dropout masks
      eb.share_rows = batch.input.share_rows.data();
      eb.global_B = batch.input.global_B;
      eb.global_T = batch.input.global_T;
    }
    return eb;
  }

  crf::Params device_crf_params() {
    crf::Params p;
    const float* P = params_.as<float>();
    p.cum_scores = cum_.as<float>();
    p.transition = P + layout_.get("crf.transition").offset;
    p.duration_bias = P + layout_.get("crf.duration_bias").offset;
    p.start = P + layout_.get("crf.start").offset;
    p.end = P + layout_.get("crf.end").offset;
    p.lengths = lengths_.as<int32_t>();
    p.onset = encoder_->onset_scores();  // nullptr without crf.onset_features
    return p;
  }

  // crf.onset_features: the onset scores [B][T][C] of the last forward on the host; empty without.
  std::vector<float> last_onset() {
    std::vector<float> out;
    if (!dims_.onset || !have_cum_) return out;
    out.resize(static_cast<size_t>(last_B_) * last_T_ * dims_.num_classes);
    cuda::copy_to_host(out.data(), encoder_->onset_scores(), out.size() * sizeof(float), stream_);
    TS_CUDA(cudaStreamSynchronize(stream_));
    return out;
  }

  // transition [C][C] + crf.phone_bonus off the diagonal (crf::add_phone_bonus),
  // in a device buffer of its own; the parameters are not touched.
  const float* biased_transition(const float* transition_dev) {
    const int64_t C = dims_.num_classes;
    const size_t bytes = static_cast<size_t>(C) * C * sizeof(float);
    std::vector<float> a(static_cast<size_t>(C) * C), biased(a.size());
    cuda::copy_to_host(a.data(), transition_dev, bytes, stream_);
    TS_CUDA(cudaStreamSynchronize(stream_));
    crf::add_phone_bonus(a.data(), C, static_cast<float>(phone_bonus_), biased.data());
    vit_transition_.reserve(bytes);
    cuda::copy_to_device(vit_transition_.as<float>(), biased.data(), bytes, stream_);
    TS_CUDA(cudaStreamSynchronize(stream_));  // `biased` is freed on return
    return vit_transition_.as<float>();
  }

  // The CRF parameters (transition..end, contiguous at the end of the layout) on the host.
  void host_crf_param_copy(std::vector<float>& hp) {
    hp.assign(layout_.total(), 0.f);
    const size_t from = layout_.get("crf.transition").offset;
    cuda::copy_to_host(hp.data() + from, params_.as<float>() + from, (layout_.total() - from) * sizeof(float),
                       stream_);
    TS_CUDA(cudaStreamSynchronize(stream_));
  }
  // onset: the host copy of the onset scores [B][T][C] (last_onset()), empty = none.
  crf::Params host_crf_params(const std::vector<float>& hp, const std::vector<float>& cum, const Batch& batch,
                              const std::vector<float>& onset) {
    crf::Params p;
    if (!onset.empty()) p.onset = onset.data();
    p.cum_scores = cum.data();
    p.transition = hp.data() + layout_.get("crf.transition").offset;
    p.duration_bias = hp.data() + layout_.get("crf.duration_bias").offset;
    p.start = hp.data() + layout_.get("crf.start").offset;
    p.end = hp.data() + layout_.get("crf.end").offset;
    p.lengths = batch.input.lengths.data();
    return p;
  }

  // The forward taps of crf (log Z, gold in lz_) and penalty (its value, computed here
  // with reg), then the backward taps of crf; only while taps are active.
  void crf_taps(int B, int T, double reg) {
    using gpu::TapTensor;
    const int C = dims_.num_classes;
    numerics_->tap("crf", Pass::forward,
                   {TapTensor::f64("log_z", lz_.as<double>(), B),
                    TapTensor::f64("gold", lz_.as<double>() + B, B)});
    const ParamInfo& A = layout_.get("crf.transition");
    const ParamInfo& D = layout_.get("crf.duration_bias");
    StepScalars* dsc = scalars_.as<StepScalars>();
    gpu::l2_penalty(reg, C, penalized_durations(dims_), params_.as<float>() + A.offset, params_.as<float>() + D.offset, nullptr, nullptr,
                    &dsc->penalty, stream_);
    numerics_->tap("penalty", Pass::forward, {TapTensor::f64("penalty", &dsc->penalty, 1)});
    float* G = grad_.as<float>();
    const size_t ncum = static_cast<size_t>(B) * (T + 1) * C;
    const ParamInfo& S = layout_.get("crf.start");
    const ParamInfo& E = layout_.get("crf.end");
    numerics_->tap("crf", Pass::backward,
                   {TapTensor::f32("d_cum_scores", dcum_.as<float>(), ncum),
                    TapTensor::f32("d_crf.transition", G + A.offset, A.size),
                    TapTensor::f32("d_crf.duration_bias", G + D.offset, D.size),
                    TapTensor::f32("d_crf.start", G + S.offset, S.size),
                    TapTensor::f32("d_crf.end", G + E.offset, E.size)});
    if (dims_.onset)  // crf.onset_features: d onset [B][T][C]
      numerics_->tap("crf", Pass::backward,
                     {TapTensor::f32("d_onset", donset_.as<float>(), static_cast<size_t>(B) * T * C)});
  }

  // The CRF backend threw (it validates its inputs): a bad slot before the CRF
  // is the cause to report; else the backend's own error.
  [[noreturn]] void crf_failed(const std::invalid_argument& e) {
    if (numerics_->checking()) {
      numerics_->queue_readback();
      TS_CUDA(cudaStreamSynchronize(stream_));
      if (auto hit = numerics_->first_hit()) throw NumericsError(*hit);
    }
    throw NonFiniteError("CRF input", e.what());  // the backend names the tensor (e.g. cum_scores)
  }

  // log Z, gold (host) and d cum / d CRF parameters (device) for the staged batch;
  // with taps active, the crf and penalty taps (crf_taps), reg = crf.reg.
  void crf_backward(const Batch& batch, double scale, std::vector<double>& log_z, std::vector<double>& gold,
                    double reg) {
    const int B = batch.input.B, T = batch.input.T;
    const crf::Dims dims{B, T, dims_.max_duration, dims_.num_classes};
    const ParamInfo& A = layout_.get("crf.transition");
    const ParamInfo& D = layout_.get("crf.duration_bias");
    const ParamInfo& S = layout_.get("crf.start");
    const ParamInfo& E = layout_.get("crf.end");
    float* G = grad_.as<float>();
    if (backend_->on_device()) {
      const crf::Params p = device_crf_params();
      lz_.reserve(2 * B * sizeof(double));
      crf::Grads g{dcum_.as<float>(), G + A.offset, G + D.offset, G + S.offset, G + E.offset};
      if (dims_.onset) {
        donset_.reserve(static_cast<size_t>(B) * T * dims_.num_classes * sizeof(float));
        g.onset = donset_.as<float>();
      }
      try {
        session_->backward(dims, p, labels_.as<int32_t>(), scale, lz_.as<double>(), lz_.as<double>() + B, g);
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
    crf::HostRunOptions ro;
    ro.gradients = true;
    ro.viterbi = false;
    ro.scale = scale;
    crf::HostResult r;
    try {
      r = session_->run_host(dims, host_crf_params(hp, cum, batch, onset), batch.labels.data(), ro);
    } catch (const std::invalid_argument& e) {
      crf_failed(e);
    }
    log_z = r.log_z;
    gold = r.gold;
    // Synchronous copies from pageable memory, then the stream continues.
    dcum_.upload(r.grad_cum_scores.data(), r.grad_cum_scores.size() * sizeof(float), stream_);
    cuda::copy_to_device(G + A.offset, r.grad_transition.data(), A.size * sizeof(float), stream_);
    cuda::copy_to_device(G + D.offset, r.grad_duration_bias.data(), D.size * sizeof(float), stream_);
    cuda::copy_to_device(G + S.offset, r.grad_start.data(), S.size * sizeof(float), stream_);
    cuda::copy_to_device(G + E.offset, r.grad_end.data(), E.size * sizeof(float), stream_);
    if (dims_.onset) donset_.upload(r.grad_onset.data(), r.grad_onset.size() * sizeof(float), stream_);
    if (numerics_->active()) {
      // log Z and gold to the device for their taps (a fault planted there comes back)
      std::vector<double> both(r.log_z);
      both.insert(both.end(), r.gold.begin(), r.gold.end());
      lz_.reserve(2 * B * sizeof(double));
      lz_.upload(both.data(), both.size() * sizeof(double), stream_);
      crf_taps(B, T, reg);
      if (numerics_->plants("crf", Pass::forward)) {
        lz_.download(both.data(), both.size() * sizeof(double), stream_);
        TS_CUDA(cudaStreamSynchronize(stream_));
        std::copy(both.begin(), both.begin() + B, log_z.begin());
        std::copy(both.begin() + B, both.end(), gold.begin());
      }
    }
    TS_CUDA(cudaStreamSynchronize(stream_));
  }

  // crf.frame_ce_weight: the frame CE of the encoder's scores [B][T][C] against
  // the staged labels (model/cuda/frame_ce.h), queued on the stream: its
  // gradient times grad_scale into dce_ [B][T][C], the per-utterance sums into
  // ce_utt_ [B].
  void frame_ce(int B, int T, double grad_scale) {
    const size_t frames = static_cast<size_t>(B) * T;
    dce_.reserve(frames * dims_.num_classes * sizeof(float));
    ce_frames_.reserve(frames * sizeof(double));
    ce_utt_.reserve(static_cast<size_t>(B) * sizeof(double));
    gpu::frame_cross_entropy(B, T, dims_.num_classes, encoder_->scores(), lengths_.as<int32_t>(),
                             labels_.as<int32_t>(), grad_scale, ce_frames_.as<double>(), ce_utt_.as<double>(),
                             dce_.as<float>(), stream_);
  }
  // The sum over b = 0..B-1 (in order) of ce_utt_ (one read-back; after frame_ce()).
  double frame_ce_sum(int B) {
    std::vector<double> per(B);
    ce_utt_.download(per.data(), per.size() * sizeof(double), stream_);
    TS_CUDA(cudaStreamSynchronize(stream_));
    double sum = 0.0;
    for (double v : per) sum += v;
    if (!std::isfinite(sum)) throw NonFiniteError("frame_ce", "non-finite frame cross-entropy (crf.frame_ce_weight)");
    return sum;
  }

  // The gradient that clip and AdamW use: the sum over the ranks with several processes, else grad_.
  float* update_grad() { return reducer_ ? grad_sum_.as<float>() : grad_.as<float>(); }

  // The first non-finite entry of `grad` (grad_, or grad_sum_), in layout order, as one NonFiniteError.
  [[noreturn]] void throw_first_nonfinite_gradient(Buffer& grad) {
    std::vector<float> g(layout_.total());
    grad.download(g.data(), g.size() * sizeof(float), stream_);
    TS_CUDA(cudaStreamSynchronize(stream_));
    for (const ParamInfo& p : layout_.params())
      for (size_t i = 0; i < p.size; ++i)
        if (!std::isfinite(g[p.offset + i]))
          throw NonFiniteError("gradient of " + p.name,
                               "non-finite gradient of " + p.name + " at flat index " + std::to_string(i));
    throw NonFiniteError("gradient norm", "non-finite global gradient norm (every gradient entry is finite: overflow)");
  }

  ModelDims dims_;
  ParamLayout layout_;
  std::string rnn_algo_, crf_name_, device_name_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<CudaEncoder> encoder_;
  std::unique_ptr<crf::Backend> backend_;
  std::unique_ptr<crf::Session> session_;  // keeps the CRF workspace (and host-backend copies) across steps
  std::unique_ptr<gpu::DeviceNumerics> numerics_;  // the step's numeric taps (shared with encoder_)
  AdamW opt_;  // hyperparameters and step; the moments live in m_, v_
  Buffer params_{Memory::device, 0}, grad_{Memory::device, 0}, m_{Memory::device, 0}, v_{Memory::device, 0};
  Buffer grad_sum_{Memory::device, 0};  // several processes: grad_ summed over the ranks (clip and AdamW use it)
  Buffer features_{Memory::device, 0}, lengths_{Memory::device, 0}, labels_{Memory::device, 0};
  Buffer cum_{Memory::device, 0}, dcum_{Memory::device, 0}, lz_{Memory::device, 0};
  Buffer donset_{Memory::device, 0};  // [B][T][C] d loss / d onset (crf.onset_features only)
  Buffer scalars_{Memory::device, 0}, norm_scratch_{Memory::device, 0};
  Buffer vit_score_{Memory::device, 0}, vit_segs_{Memory::device, 0}, vit_nseg_{Memory::device, 0};
  Buffer align_phones_{Memory::device, 0}, align_nph_{Memory::device, 0};   // align: [B][N], [B]
  Buffer align_opt_{Memory::device, 0};                                     // align: optional [B][N]
  Buffer align_score_{Memory::device, 0}, align_spans_{Memory::device, 0};  // align: [B], [B][N][2]
  Buffer vit_transition_{Memory::device, 0};  // [C][C] transition + phone bonus (decode)
  // crf.frame_ce_weight: d CE / d scores [B][T][C], per-frame CE [B][T], per-utterance sums [B]
  Buffer dce_{Memory::device, 0}, ce_frames_{Memory::device, 0}, ce_utt_{Memory::device, 0};
  double phone_bonus_ = 0.0;                   // ExecutorOptions::phone_bonus
  bool posterior_ = false;                     // ExecutorOptions::decode == "posterior"
  Pinned staging_, host_scalars_;
  std::vector<int32_t> lengths_host_;
  bool have_cum_ = false;
  int last_B_ = 0, last_T_ = 0;
  dist::Communicator* world_ = nullptr;          // ExecutorOptions::world
  std::unique_ptr<gpu::DeviceReducer> reducer_;  // several processes (or forced): the gradient all-reduce
};

}  // namespace timitseg::model::cuda_detail
