// The GPU executor's stages of a training step: the StepDevice that
// model/step.h's run_step drives (the order, the checks and the loss are
// there). Every stage queues its work on the executor's stream; the host
// waits where a value is needed (the batch's staging, the CRF's log Z and
// gold, the one read-back of the scalars and the taps' slots), nowhere else.
//
// One process: begin (staging, taps, poison), forward, crf (its log Z and gold
// read back), frame_ce, backward, penalty, grad_norm (the norm, the scalars'
// and the taps' read-back queued), end_share (poison restored), read_back (the
// step's one cudaStreamSynchronize); after run_step's checks, clip and AdamW
// (one kernel per range of step_update_ranges) on the device.
//
// Several processes (reducer_; docs/multigpu.md "One step"; the CPU executor
// runs the same run_step):
//   this rank's share   the stages above with share_options (the L2 penalty on
//                       rank 0 only) and StepOptions::loss_norm, the global
//                       batch's normalization, up to its read-back: no
//                       synchronization yet. An empty share (a last batch with
//                       fewer utterances than ranks) is a zero gradient.
//   allreduce           grad_sum_ <- the sum over the ranks of grad_
//                       (gpu::DeviceReducer: NCCL, or host-staged through MPI),
//                       queued right behind the backward, then the norm of the
//                       sum; the reducer's wait is the step's one
//                       synchronization. Every rank joins the all-reduce, one
//                       whose share threw too, so no peer waits for it; the
//                       sum of a failed step is never used.
//   agree_on_step       the share's own checks (taps, non-finite log Z, gold,
//                       loss, the norm of its own gradient, still in grad_) on
//                       every rank, then agreed: a failed share stops every
//                       rank at this step, before anything is updated (the
//                       failing rank rethrows its error, the others
//                       dist::PeerFailure); then the loss sums (reduce_step_scalars).
//   update              clip grad_sum_ by the reduced norm and AdamW as in one
//                       process, so every rank updates alike.
// One synchronization and two small MPI reductions a step. The lognormal
// duration chain runs per rank inside the share: it is linear in the
// gradient, so the sum of the ranks' chains is the chain of the sum (up to
// rounding).
#include "model/cuda/cuda_executor_impl.h"

#include "common/cuda.h"
#include "common/cuda_check.h"
#include "crf/device_layers.h"
#include "model/cuda/ops.h"
#include "model/step.h"

namespace timitseg::model::cuda_detail {

class CudaExecutor::Stages final : public StepDevice {
 public:
  explicit Stages(CudaExecutor& e) : e_(e) {}

  dist::Communicator* world() const override { return e_.reducer_ ? e_.world_ : nullptr; }
  const ParamLayout& layout() const override { return e_.layout_; }
  bool times_for_free() const override { return false; }
  void wait() override { TS_CUDA(cudaStreamSynchronize(e_.stream_)); }

  void begin(const Batch& batch, const StepOptions& o) override;
  void empty_share(const Batch&, const StepOptions& o) override {
    e_.numerics_->begin_step(o.check_numerics, o.fault, o.step, e_.stream_);  // this step's (empty) taps
    TS_CUDA(cudaMemsetAsync(e_.grad_.data(), 0, e_.layout_.total() * sizeof(float), e_.stream_));
  }
  void forward(const Batch& batch, const StepOptions& o) override;
  CrfSums crf(const Batch& batch, const StepOptions& o, double scale) override {
    const int B = batch.input.B;
    log_z_.assign(B, 0.0);
    gold_.assign(B, 0.0);
    e_.crf_backward(batch, scale, log_z_, gold_, o.crf_reg);
    return {log_z_.data(), gold_.data()};
  }
  void frame_ce(const Batch& batch, double scale) override {
    e_.frame_ce(batch.input.B, batch.input.T, scale);
    with_ce_ = true;
  }
  void backward(const Batch&, const StepOptions&) override {
    e_.encoder_->backward_with_onset(e_.params_.as<float>(), e_.dcum_.as<float>(),
                                     e_.dims_.onset_input() ? e_.donset_.as<float>() : nullptr, e_.grad_.as<float>(),
                                     with_ce_ ? e_.dce_.as<float>() : nullptr);
  }
  void penalty(const StepOptions& o) override;
  void grad_norm() override {
    const size_t n = e_.layout_.total();
    gpu::global_norm(e_.grad_.as<float>(), n, &scalars()->norm, e_.norm_scratch_.data(), e_.stream_);
    e_.scalars_.download(e_.host_scalars_.reserve(sizeof(StepScalars)), sizeof(StepScalars), e_.stream_);
    e_.numerics_->queue_readback();
  }
  void end_share() noexcept override {
    for (size_t i = 0; i < saved_.size(); ++i) try {
        e_.restore_param(saved_[i].first, saved_[i].second);
      } catch (...) {
      }
  }
  void allreduce() override {
    const size_t n = e_.layout_.total();
    e_.reducer_->enqueue_sum(e_.grad_.as<float>(), e_.grad_sum_.as<float>(), n, e_.stream_);
    gpu::global_norm(e_.grad_sum_.as<float>(), n, &scalars()->reduced_norm, e_.norm_scratch_.data(), e_.stream_);
    e_.scalars_.download(e_.host_scalars_.reserve(sizeof(StepScalars)), sizeof(StepScalars), e_.stream_);
    e_.reducer_->wait(e_.stream_);
  }
  StepReadBack read_back() override {
    if (!e_.reducer_) TS_CUDA(cudaStreamSynchronize(e_.stream_));  // several processes: the reducer's wait
    const StepScalars sc = *e_.host_scalars_.as<StepScalars>();
    return {sc.penalty, sc.norm, sc.reduced_norm};
  }

  void check_taps() override {
    if (auto hit = e_.numerics_->first_hit()) throw NumericsError(*hit);
  }
  void check_crf_gradients() override {}  // through the gradient's norm (throw_nonfinite_gradient names them)
  double frame_ce_sum(int B) override { return e_.frame_ce_sum(B); }
  [[noreturn]] void throw_nonfinite_gradient(bool reduced) override {
    e_.throw_first_nonfinite_gradient(reduced ? e_.grad_sum_ : e_.grad_);
  }

  void clip(double max_norm, double) override {  // by the norm on the device
    StepScalars* dsc = scalars();
    gpu::clip_by_norm(e_.update_grad(), e_.layout_.total(), e_.reducer_ ? &dsc->reduced_norm : &dsc->norm, max_norm,
                      e_.stream_);
  }
  void update(const std::vector<UpdateRange>& ranges) override;

 private:
  StepScalars* scalars() { return e_.scalars_.as<StepScalars>(); }

  CudaExecutor& e_;
  std::vector<double> log_z_, gold_;              // [B] (the CRF's read-back)
  std::vector<std::pair<size_t, float>> saved_;  // StepOptions::poison: (index, value before), restored by end_share
  bool with_ce_ = false;
};

void CudaExecutor::Stages::begin(const Batch& batch, const StepOptions& o) {
  e_.stage(batch, /*with_labels=*/true);
  e_.numerics_->begin_step(o.check_numerics, o.fault, o.step, e_.stream_);
  // debug.inject_nonfinite: set the entries for this step, restored by end_share.
  for (const auto& [index, value] : o.poison) {
    float* at = e_.params_.as<float>() + index;
    float before = 0.f;
    cuda::copy_to_host(&before, at, sizeof(float), e_.stream_);
    TS_CUDA(cudaStreamSynchronize(e_.stream_));
    saved_.emplace_back(index, before);
    cuda::copy_to_device(at, &value, sizeof(float), e_.stream_);
    TS_CUDA(cudaStreamSynchronize(e_.stream_));
  }
}

void CudaExecutor::Stages::forward(const Batch& batch, const StepOptions& o) {
  const int B = batch.input.B, T = batch.input.T;
  ForwardOptions forward_opts;
  forward_opts.dropout = o.dropout;
  forward_opts.seed = o.seed;
  forward_opts.step = static_cast<uint64_t>(e_.opt_.step + 1);
  e_.encoder_->set_training(true);
  e_.cum_.reserve(e_.cum_bytes(B, T));
  e_.dcum_.reserve(e_.cum_bytes(B, T));
  e_.encoder_->forward(e_.params_.as<float>(), e_.encoder_batch(batch), forward_opts, e_.cum_.as<float>());
  e_.have_cum_ = true;
  e_.last_B_ = B;
  e_.last_T_ = T;
}

// The penalty's gradient share (with taps, its value was computed and tapped
// in the forward order, in crf_backward), the penalty backward taps, then the
// lognormal duration chain.
void CudaExecutor::Stages::penalty(const StepOptions& o) {
  const ParamLayout& lay = e_.layout_;
  const CrfParamView& crf = lay.crf();
  const CrfTensor &A = crf.transition, &D = crf.duration_bias;
  float* P = e_.params_.as<float>();
  float* G = e_.grad_.as<float>();
  const bool taps = e_.numerics_->active();
  StepScalars* dsc = scalars();
  crf::device::l2_penalty(o.crf_reg, e_.dims_.num_classes, penalized_durations(e_.dims_), A.in(P), D.in(P), A.in(G),
                          D.in(G), taps ? &dsc->penalty_again : &dsc->penalty, e_.stream_);
  if (taps) {
    // the CRF parameter gradients after the penalty's share
    using gpu::TapTensor;
    e_.numerics_->tap("penalty", config::Pass::backward,
                      {TapTensor::grad_of(A, G), TapTensor::grad_of(D, G), TapTensor::grad_of(crf.start, G),
                       TapTensor::grad_of(crf.end, G)});
  }
  if (e_.dims_.duration_lognormal) {  // d table (loss + penalty) -> d crf.duration_lognormal; the table's own entry 0
    const CrfTensor& LN = crf.duration_lognormal;
    crf::device::lognormal_duration_backward(e_.dims_.max_duration, e_.dims_.num_classes, LN.in(P), D.in(G), LN.in(G),
                                             e_.stream_);
  }
}

// AdamW: one kernel per range (model/optim.h update_ranges: crf.lr_scale's
// groups, the held parameters left out), then the lognormal table, then the
// optimizer taps (read back at once when checking: after the update by
// definition, a hit here restores nothing).
void CudaExecutor::Stages::update(const std::vector<UpdateRange>& ranges) {
  const size_t n = e_.layout_.total();
  float* g = e_.update_grad();
  AdamW& opt = e_.opt_;
  ++opt.step;
  for (const UpdateRange& r : ranges)
    gpu::adamw_update(e_.params_.as<float>() + r.begin, e_.m_.as<float>() + r.begin, e_.v_.as<float>() + r.begin,
                      g + r.begin, r.end - r.begin, r.lr, opt.beta1, opt.beta2, opt.eps, opt.weight_decay, opt.step,
                      e_.stream_);
  if (e_.dims_.duration_lognormal)  // the table follows the updated log-normal parameters
    crf::device::lognormal_duration_table(e_.dims_.max_duration, e_.dims_.num_classes,
                                          e_.layout_.crf().duration_lognormal.in(e_.params_.as<float>()),
                                          e_.layout_.crf().duration_bias.in(e_.params_.as<float>()),
                                          e_.stream_);
  if (e_.numerics_->active()) {
    using gpu::TapTensor;
    e_.numerics_->tap("optimizer", config::Pass::backward,
                      {TapTensor::f32("params", e_.params_.as<float>(), n),
                       TapTensor::f32("exp_avg", e_.m_.as<float>(), n),
                       TapTensor::f32("exp_avg_sq", e_.v_.as<float>(), n)});
    if (e_.numerics_->checking()) {
      e_.numerics_->queue_readback();
      TS_CUDA(cudaStreamSynchronize(e_.stream_));
      if (auto hit = e_.numerics_->first_hit()) throw NumericsError(*hit);
    }
  }
}

StepResult CudaExecutor::train_step(const Batch& batch, const StepOptions& o) {
  Stages stages(*this);
  return run_step(stages, batch, o, /*update=*/true);
}

StepResult CudaExecutor::gradients(const Batch& batch, const StepOptions& o, std::vector<float>& grad) {
  Stages stages(*this);
  StepResult r = run_step(stages, batch, o, /*update=*/false);
  grad.resize(layout_.total());
  cuda::copy_to_host(grad.data(), update_grad(), grad.size() * sizeof(float), stream_);
  TS_CUDA(cudaStreamSynchronize(stream_));
  return r;
}

}  // namespace timitseg::model::cuda_detail
