// CPU executor: loss step, decoding and the optimizer on the host.
#include "model/cpu/cpu_executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "common/parallel.h"
#include "crf/cumsum.h"
#include "crf/posterior.h"
#include "model/cpu/long_forward.h"
#include "model/dist_step.h"
#include "model/frame_ce.h"
#include "model/step_recipe.h"

namespace timitseg::model {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

const float* param_ptr(const ParamLayout& layout, const std::vector<float>& params, const std::string& name) {
  return params.data() + layout.get(name).offset;
}

bool any_nonfinite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) return true;
  return false;
}

// onset: the network's onset scores [B][T][C] (crf.onset_features), empty = none.
crf::Params crf_params(const ParamLayout& layout, const std::vector<float>& params, const std::vector<float>& cum,
                       const Batch& batch, const std::vector<float>& onset) {
  crf::Params p;
  if (!onset.empty()) p.onset = onset.data();
  p.cum_scores = cum.data();
  p.transition = param_ptr(layout, params, "crf.transition");
  p.duration_bias = param_ptr(layout, params, "crf.duration_bias");
  p.start = param_ptr(layout, params, "crf.start");
  p.end = param_ptr(layout, params, "crf.end");
  p.lengths = batch.input.lengths.data();
  return p;
}

// crf.frame_ce_weight: sum over the batch's valid frames of the frame CE of
// act.scores (time-major rows t*B + b) and grad_scale * its gradient into dce
// [B][T][C]; throws NonFiniteError when the sum is not finite.
double frame_ce_step(const Activations<float>& act, const Batch& batch, int C, double grad_scale,
                     std::vector<float>& dce) {
  const int B = batch.input.B, T = batch.input.T;
  dce.resize(static_cast<size_t>(B) * T * C);
  const double ce = frame_cross_entropy<float>(B, T, C, act.scores.data(), C, int64_t(B) * C,
                                               batch.input.lengths.data(), batch.labels.data(), grad_scale, nullptr,
                                               dce.data());
  return check_frame_ce(ce);
}

}  // namespace

// ---- CpuEncoder --------------------------------------------------------------

CpuEncoder::CpuEncoder(const ModelDims& dims, int threads) : net_(dims, threads) {}

void CpuEncoder::forward(const float* params, const EncoderBatch& batch, const ForwardOptions& opt, float* cum) {
  const ModelDims& d = dims();
  const size_t n = net_.layout().total();
  params_copy_.assign(params, params + n);
  in_.B = batch.B;
  in_.T = batch.T;
  in_.features.assign(batch.features, batch.features + static_cast<size_t>(batch.B) * batch.T * d.input_dim);
  in_.lengths.assign(batch.lengths, batch.lengths + batch.B);
  net_.forward(params_copy_, in_, opt.dropout, opt.rng, act_, nullptr);
  std::copy(act_.cum.begin(), act_.cum.end(), cum);
}

void CpuEncoder::forward_with_onset(const float* params, const EncoderBatch& batch, const ForwardOptions& opt,
                                    float* cum, float* onset) {
  forward(params, batch, opt, cum);
  if (onset) std::copy(act_.onset.begin(), act_.onset.end(), onset);
}

void CpuEncoder::backward(const float* params, const float* dcum, float* grad, const float* dscores) {
  backward_with_onset(params, dcum, nullptr, grad, dscores);
}

void CpuEncoder::backward_with_onset(const float* params, const float* dcum, const float* donset, float* grad,
                                     const float* dscores) {
  const ParamLayout& lay = net_.layout();
  params_copy_.assign(params, params + lay.total());
  dcum_copy_.assign(dcum, dcum + act_.cum.size());
  if (dscores) dscores_copy_.assign(dscores, dscores + size_t(act_.B) * act_.T * lay.dims().num_classes);
  if (donset) donset_copy_.assign(donset, donset + act_.onset.size());
  net_.backward(params_copy_, act_, dcum_copy_, grad_copy_, nullptr, nullptr, dscores ? &dscores_copy_ : nullptr,
                donset ? &donset_copy_ : nullptr);
  // The interface leaves the CRF parameters' gradient entries untouched.
  for (const ParamInfo& p : lay.params())
    if (p.name.rfind("encoder.", 0) == 0 || p.name.rfind("crf.projection.", 0) == 0 ||
        p.name.rfind("crf.onset_projection.", 0) == 0)
      std::copy(grad_copy_.begin() + p.offset, grad_copy_.begin() + p.offset + p.size, grad + p.offset);
}

// ---- the loss step (the stages of model/step_recipe.h) -------------------------

namespace {

// Stage 2, the CRF: log Z, gold and the CRF gradients scaled by 1 / norm; the
// crf and penalty forward taps (the penalty's value into res.penalty: its
// gradient share is added after the encoder backward).
crf::HostResult crf_stage(const Network<float>& net, const std::vector<float>& params, const Batch& batch,
                          crf::Session& session, const StepOptions& o, double norm, const Activations<float>& act,
                          Probe* pr, StepResult& res) {
  const ModelDims& d = net.layout().dims();
  const ParamLayout& lay = net.layout();
  const int C = d.num_classes, K = d.max_duration;
  const crf::Dims dims{batch.input.B, batch.input.T, K, C};
  crf::HostRunOptions hro;
  hro.gradients = true;
  hro.viterbi = false;
  hro.scale = 1.0 / norm;
  crf::HostResult r;
  try {
    r = session.run_host(dims, crf_params(lay, params, act.cum, batch, act.onset), batch.labels.data(), hro);
  } catch (const std::invalid_argument& e) {
    // validate_host names the tensor (e.g. a non-finite cum_scores entry)
    throw NonFiniteError("CRF input", e.what());
  }
  if (pr) {
    pr->tap("crf", Pass::forward, "log_z", r.log_z.data(), r.log_z.size());
    pr->tap("crf", Pass::forward, "gold", r.gold.data(), r.gold.size());
    std::vector<float> gt(static_cast<size_t>(C) * C, 0.f), gd(static_cast<size_t>(K) * C, 0.f);
    double pen = crf::l2_penalty<float>(o.crf_reg, C, penalized_durations(d), param_ptr(lay, params, "crf.transition"),
                                        param_ptr(lay, params, "crf.duration_bias"), gt.data(), gd.data());
    pr->tap("penalty", Pass::forward, "penalty", &pen, 1);
    res.penalty = pen;
  }
  return r;
}

// Stage 4, the output checks: log Z and gold (check_crf_outputs, the NLL sum
// into res), then the CRF gradients (their backward taps first).
void check_crf_stage(crf::HostResult& r, int B, Probe* pr, StepResult& res) {
  res.nll_sum = check_crf_outputs(r.log_z.data(), r.gold.data(), B);
  const std::pair<const char*, std::vector<float>*> crf_grads[] = {
      {"grad_cum_scores", &r.grad_cum_scores}, {"grad_transition", &r.grad_transition},
      {"grad_duration_bias", &r.grad_duration_bias}, {"grad_start", &r.grad_start}, {"grad_end", &r.grad_end}};
  if (pr) {
    const char* tap_names[] = {"d_cum_scores", "d_crf.transition", "d_crf.duration_bias", "d_crf.start", "d_crf.end"};
    for (int i = 0; i < 5; ++i)
      pr->tap("crf", Pass::backward, tap_names[i], crf_grads[i].second->data(), crf_grads[i].second->size());
  }
  if (pr && !r.grad_onset.empty()) pr->tap("crf", Pass::backward, "d_onset", r.grad_onset.data(), r.grad_onset.size());
  for (auto& [name, v] : crf_grads)
    if (any_nonfinite(*v)) throw NonFiniteError(name, std::string("non-finite value in CRF backward ") + name);
  if (any_nonfinite(r.grad_onset)) throw NonFiniteError("grad_onset", "non-finite value in CRF backward grad_onset");
}

// Stage 5, the penalty's gradient share on top of the CRF gradients in grad
// (its value into res.penalty unless tapped), its backward taps, then the
// lognormal duration chain.
void penalty_stage(const ParamLayout& lay, const std::vector<float>& params, const StepOptions& o, Probe* pr,
                   std::vector<float>& grad, StepResult& res) {
  const ModelDims& d = lay.dims();
  const double penalty = crf::l2_penalty<float>(o.crf_reg, d.num_classes, penalized_durations(d),
                                                param_ptr(lay, params, "crf.transition"),
                                                param_ptr(lay, params, "crf.duration_bias"),
                                                grad.data() + lay.get("crf.transition").offset,
                                                grad.data() + lay.get("crf.duration_bias").offset);
  if (!pr) res.penalty = penalty;  // else: the tapped value (a planted fault included)
  if (pr)
    for (const char* name : {"crf.transition", "crf.duration_bias"}) {
      const ParamInfo& p = lay.get(name);
      pr->tap("penalty", Pass::backward, std::string("d_") + name, grad.data() + p.offset, p.size);
    }
  // crf.duration_model = lognormal: d table (loss + penalty) -> d crf.duration_lognormal; the table's own entry 0
  chain_duration_gradient(lay, params.data(), grad.data());
}

}  // namespace

StepResult loss_and_grad(const Network<float>& net, const std::vector<float>& params, const Batch& batch,
                         crf::Session& session, const StepOptions& o, std::vector<float>& grad,
                         Activations<float>& act, Probe* probe) {
  const ParamLayout& lay = net.layout();
  const int C = lay.dims().num_classes;
  Probe* const pr = probe && probe->enabled() ? probe : nullptr;  // null: taps cost nothing
  StepResult res;
  auto t0 = std::chrono::steady_clock::now();
  net.forward(params, batch.input, o.dropout, o.rng, act, pr);  // 1 forward
  res.times.encoder_forward = seconds_since(t0);

  t0 = std::chrono::steady_clock::now();
  const double norm = step_norm(o, batch);  // 3 (the global batch's with several processes)
  crf::HostResult r = crf_stage(net, params, batch, session, o, norm, act, pr, res);  // 2 CRF
  check_crf_stage(r, batch.input.B, pr, res);                                         // 4 output checks
  // crf.frame_ce_weight: the frame CE of the scores and its gradient [B][T][C] (kept per thread)
  static thread_local std::vector<float> dce;
  const bool with_ce = o.frame_ce_weight > 0.0;
  if (with_ce) res.frame_ce_sum = frame_ce_step(act, batch, C, o.frame_ce_weight / norm, dce);
  res.times.crf = seconds_since(t0);

  t0 = std::chrono::steady_clock::now();
  // 6 backward; d features only for the input layer's backward tap (a buffer
  // kept per thread: no allocation per step)
  static thread_local std::vector<float> dfeatures;
  net.backward(params, act, r.grad_cum_scores, grad, pr && pr->wants("input", Pass::backward) ? &dfeatures : nullptr,
               pr, with_ce ? &dce : nullptr, r.grad_onset.empty() ? nullptr : &r.grad_onset);
  auto add = [&](const std::string& name, const std::vector<float>& g) {
    const ParamInfo& p = lay.get(name);
    std::copy(g.begin(), g.end(), grad.begin() + p.offset);
  };
  add("crf.transition", r.grad_transition);
  add("crf.duration_bias", r.grad_duration_bias);
  add("crf.start", r.grad_start);
  add("crf.end", r.grad_end);
  penalty_stage(lay, params, o, pr, grad, res);  // 5 penalty (its gradient share)
  res.loss = step_loss(res, o, norm);
  res.times.encoder_backward = seconds_since(t0);
  if (!std::isfinite(res.loss)) throw NonFiniteError("loss", "non-finite loss");
  check_gradient_finite(lay, grad.data());
  return res;  // 7 clip and 8 update: CpuExecutor::train_step
}

StepResult loss_and_grad(const Network<float>& net, const std::vector<float>& params, const Batch& batch,
                         crf::Session& session, const StepOptions& o, std::vector<float>& grad,
                         Activations<float>& act) {
  Probe probe(o.check_numerics, o.fault, o.step);
  return loss_and_grad(net, params, batch, session, o, grad, act, &probe);
}

StepResult loss_and_grad(const Network<float>& net, const std::vector<float>& params, const Batch& batch,
                         crf::Backend& backend, const StepOptions& o, std::vector<float>& grad,
                         Activations<float>& act) {
  crf::Session session(backend);
  return loss_and_grad(net, params, batch, session, o, grad, act);
}

namespace {
// The forward of inference (no dropout) into act: a long recording's encoder
// in windows (bounded memory, its cumsum centred by centre_frames), else the
// whole batch; a non-finite value is one error naming `what` and the batch.
void inference_forward(const Network<float>& net, const std::vector<float>& params, const Batch& batch,
                       Activations<float>& act, int64_t centre_frames, const char* what) {
  Probe probe(true, FaultSpec{}, 0);
  try {
    if (long_input(batch.input))
      forward_in_windows(net, params, batch.input, act, &probe, kWindowFrames, kContextFrames, centre_frames);
    else
      net.forward(params, batch.input, 0.0, nullptr, act, &probe);
  } catch (const NumericsError& e) {
    throw std::runtime_error(std::string(what) + ": non-finite value: " + e.what() + " (batch starting with " +
                             batch.ids[0] + ")");
  }
}
}  // namespace

std::vector<std::vector<crf::Segment>> decode_batch(const Network<float>& net, const std::vector<float>& params,
                                                    const Batch& batch, crf::Session& session,
                                                    Activations<float>& act, std::vector<double>* nll,
                                                    double phone_bonus, bool posterior, int64_t centre_frames) {
  const ModelDims& d = net.layout().dims();
  const int B = batch.input.B, T = batch.input.T;
  inference_forward(net, params, batch, act, centre_frames, "decode");
  const crf::Dims dims{B, T, d.max_duration, d.num_classes};
  const crf::Params p = crf_params(net.layout(), params, act.cum, batch, act.onset);
  const int32_t* labels = nll ? batch.labels.data() : nullptr;
  const crf::HostResult r = posterior ? posterior_decode_on_host(session, dims, p, labels)
                                      : session.decode_host(dims, p, labels, phone_bonus);
  if (nll) {
    nll->resize(B);
    for (int b = 0; b < B; ++b) (*nll)[b] = r.log_z[b] - r.gold[b];
  }
  std::vector<std::vector<crf::Segment>> out(B);
  for (const crf::Segment& s : r.segments) out.at(s.batch).push_back(s);
  return out;
}

std::vector<std::vector<crf::Segment>> decode_batch(const Network<float>& net, const std::vector<float>& params,
                                                    const Batch& batch, crf::Backend& backend,
                                                    Activations<float>& act) {
  crf::Session session(backend);
  return decode_batch(net, params, batch, session, act);
}

// ---- CpuExecutor -------------------------------------------------------------

namespace {

class CpuExecutor final : public Executor {
 public:
  CpuExecutor(const ModelDims& dims, const ExecutorOptions& o)
      : enc_(dims, o.threads),
        threads_(resolve_threads(o.threads)),
        backend_(crf::make_backend(o.crf_backend, crf::BackendOptions{o.threads, nullptr})),
        session_(*backend_),  // a device CRF backend (cuda) works through the session's copies
        phone_bonus_(o.phone_bonus),
        posterior_(o.decode == DecodeMode::posterior),
        centre_frames_(o.centre_frames),
        world_(o.world) {}
  Device device() const override { return Device::cpu; }
  std::string description() const override {
    return "cpu (" + std::to_string(threads_) + " thread" + (threads_ == 1 ? "" : "s") + "), crf " +
           backend_->name();
  }
  const ModelDims& dims() const override { return enc_.dims(); }
  Encoder& encoder() override { return enc_; }

  void set_state(const std::vector<float>& params, const AdamW& optimizer) override {
    if (params.size() != enc_.network().layout().total())
      throw std::invalid_argument("cpu executor: parameter buffer has the wrong size");
    params_ = params;
    derive_duration_table(enc_.network().layout(), params_.data());  // lognormal: the table follows its parameters
    opt_ = optimizer;
    if (opt_.m.size() != params_.size()) opt_.reset(params_.size());
  }
  void get_state(std::vector<float>& params, AdamW& optimizer) override {
    params = params_;
    optimizer = opt_;
  }

  StepResult train_step(const Batch& batch, const StepOptions& o) override {
    Probe probe(o.check_numerics, o.fault, o.step);
    probe.set_threads(threads_);
    StepResult r = share_loss_and_grad(batch, o, grad_, &probe);
    const auto t0 = std::chrono::steady_clock::now();
    r.grad_norm = clip_global_norm(grad_, o.clip_norm);  // 7 clip, 8 update (model/step_recipe.h)
    const ParamLayout& lay = enc_.network().layout();
    update_holding(opt_, params_, grad_, o.lr, lay.crf_structure_begin(), o.crf_lr_scale, held_parameters(lay, o));
    derive_duration_table(enc_.network().layout(), params_.data());
    if (probe.enabled()) {  // after the update by definition: a hit here restores nothing
      probe.tap("optimizer", Pass::backward, "params", params_.data(), params_.size());
      probe.tap("optimizer", Pass::backward, "exp_avg", opt_.m.data(), opt_.m.size());
      probe.tap("optimizer", Pass::backward, "exp_avg_sq", opt_.v.data(), opt_.v.size());
    }
    r.times.optimizer = seconds_since(t0);
    return r;
  }

  StepResult gradients(const Batch& batch, const StepOptions& o, std::vector<float>& grad) override {
    Probe probe(o.check_numerics, o.fault, o.step);
    StepResult r = share_loss_and_grad(batch, o, grad, &probe);
    r.grad_norm = global_norm(grad);
    return r;
  }
  crf::AlignResult align(const Batch& batch, int64_t N, const std::vector<int32_t>& phones,
                         const std::vector<int32_t>& num_phones, const std::vector<int32_t>& optional,
                         AlignConfidence* confidence) override {
    const Network<float>& net = enc_.network();
    Activations<float>& act = enc_.activations();
    inference_forward(net, params_, batch, act, centre_frames_, "align");
    const ModelDims& d = dims();
    const crf::Dims cd{batch.input.B, batch.input.T, d.max_duration, d.num_classes};
    const crf::Params hp = crf_params(net.layout(), params_, act.cum, batch, act.onset);
    crf::AlignResult r =
        session_.align_host(cd, hp, N, phones.data(), num_phones.data(), optional.empty() ? nullptr : optional.data());
    if (confidence) fill_align_confidence(session_, cd, hp, N, phones, num_phones, optional, r, confidence);
    return r;
  }

  std::vector<double> span_marginals(const Batch& batch, int64_t Q, const std::vector<int32_t>& queries,
                                     const std::vector<int32_t>& num_queries) override {
    const Network<float>& net = enc_.network();
    Activations<float>& act = enc_.activations();
    inference_forward(net, params_, batch, act, centre_frames_, "span_marginals");  // as decode: windows when long
    const ModelDims& d = dims();
    const crf::Dims cd{batch.input.B, batch.input.T, d.max_duration, d.num_classes};
    return session_
        .span_marginals_host(cd, crf_params(net.layout(), params_, act.cum, batch, act.onset), Q, queries.data(),
                             num_queries.data())
        .marginal;
  }

  std::vector<std::vector<crf::Segment>> decode(const Batch& batch, std::vector<float>* scores,
                                                std::vector<double>* nll) override {
    auto segs =
        decode_batch(enc_.network(), params_, batch, session_, enc_.activations(), nll, phone_bonus_, posterior_,
                     centre_frames_);
    if (scores) {
      const Activations<float>& act = enc_.activations();
      const int B = batch.input.B, T = batch.input.T, C = dims().num_classes;
      scores->assign(static_cast<size_t>(B) * T * C, 0.f);
      for (int b = 0; b < B; ++b)
        for (int t = 0; t < T; ++t)
          for (int c = 0; c < C; ++c)
            (*scores)[(static_cast<size_t>(b) * T + t) * C + c] = act.scores(int64_t(t) * B + b, c);
    }
    return segs;
  }

  std::vector<float> last_cum() override { return enc_.activations().cum; }

 private:
  // The loss and the gradient of this process's batch (with o.poison applied
  // for this step only); with several processes (world_) the gradient and the
  // loss sums of every rank's share, reduced (model/dist_step.h). An empty
  // share (a last batch with fewer utterances than ranks) adds zeros.
  StepResult share_loss_and_grad(const Batch& batch, const StepOptions& o, std::vector<float>& grad, Probe* probe) {
    const std::vector<float>* step_params = &params_;
    if (!o.poison.empty()) {
      poisoned_ = params_;
      for (const auto& [i, v] : o.poison) poisoned_.at(i) = v;
      step_params = &poisoned_;
    }
    const bool several = world_ && world_->size() > 1;
    if (!several) return loss_and_grad(enc_.network(), *step_params, batch, session_, o, grad, enc_.activations(), probe);
    StepResult r;
    std::exception_ptr err;
    try {
      if (batch.input.B > 0)
        r = loss_and_grad(enc_.network(), *step_params, batch, session_, share_options(o, world_), grad,
                          enc_.activations(), probe);
      else {
        grad.assign(params_.size(), 0.f);
        enc_.network().skip_dropout_draws(batch.input.global_B, batch.input.global_T, o.dropout, o.rng);
      }
    } catch (const std::exception&) {
      err = std::current_exception();
    }
    agree_on_step(*world_, err, o.step);
    const auto t0 = std::chrono::steady_clock::now();
    world_->allreduce_sum(grad.data(), grad.size(), "the gradient all-reduce");
    reduce_step_scalars(*world_, r, o, step_norm(o, batch));
    r.times.optimizer += seconds_since(t0);  // the reduction, counted with the update
    if (!std::isfinite(r.loss)) throw NonFiniteError("loss", "non-finite loss (summed over the ranks)");
    return r;
  }

  CpuEncoder enc_;
  int threads_;
  std::unique_ptr<crf::Backend> backend_;
  crf::Session session_;  // keeps the CRF workspace across steps
  double phone_bonus_ = 0.0;  // ExecutorOptions::phone_bonus (decode only)
  bool posterior_ = false;    // ExecutorOptions::decode == DecodeMode::posterior
  int64_t centre_frames_ = 0;  // ExecutorOptions::centre_frames (long recordings)
  dist::Communicator* world_ = nullptr;  // ExecutorOptions::world
  std::vector<float> params_, grad_, poisoned_;
  AdamW opt_;
};

}  // namespace

std::unique_ptr<Executor> make_cpu_executor(const ModelDims& dims, const ExecutorOptions& options) {
  return std::make_unique<CpuExecutor>(dims, options);
}

}  // namespace timitseg::model
