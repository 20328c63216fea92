// CPU executor: loss step, decoding and the optimizer on the host.
#include "model/cpu/cpu_executor.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/parallel.h"
#include "crf/cumsum.h"
#include "crf/posterior.h"
#include "model/cpu/long_forward.h"
#include "model/frame_ce.h"
#include "model/step.h"
#include "model/step_recipe.h"
#include "model/transcript_loss.h"

namespace timitseg::model {
namespace {

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
  const CrfParamView& crf = layout.crf();
  p.transition = crf.transition.in(params);
  p.duration_bias = crf.duration_bias.in(params);
  p.start = crf.start.in(params);
  p.end = crf.end.in(params);
  p.lengths = batch.input.lengths.data();
  return p;
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
  in_.head_features.clear();
  if (batch.head_features)
    in_.head_features.assign(batch.head_features,
                             batch.head_features + static_cast<size_t>(batch.B) * batch.T * d.input_dim);
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
  // The interface leaves the CRF structure's gradient entries untouched: the encoder's and the projections'
  // entries lie before it (model/params.h).
  std::copy(grad_copy_.begin(), grad_copy_.begin() + lay.crf_structure_begin(), grad);
}

// ---- the step's stages on the host (model/step.h) -----------------------------

namespace {

// The stages of a step on the host (model/step.h): Network<float>'s forward
// and backward, a host CRF session, the penalty, the norm, clip and AdamW of
// model/optim.h. Each stage is done when it returns; a tap (the step's probe)
// throws where it is. params: the step's parameters (StepOptions::poison
// planted in a copy); the update moves `stored` with `opt` (set_update).
class CpuStepDevice final : public StepDevice {
 public:
  CpuStepDevice(const Network<float>& net, const std::vector<float>& params, crf::Session& session,
                std::vector<float>& grad, Activations<float>& act, Probe* probe, dist::Communicator* world)
      : net_(net), params_(params), session_(session), grad_(grad), act_(act), probe_(probe),
        pr_(probe && probe->enabled() ? probe : nullptr), world_(world && world->size() > 1 ? world : nullptr) {}
  void set_update(std::vector<float>* stored, AdamW* opt) {
    stored_ = stored;
    opt_ = opt;
  }

  dist::Communicator* world() const override { return world_; }
  const ParamLayout& layout() const override { return net_.layout(); }
  bool times_for_free() const override { return true; }
  void wait() override {}
  void begin(const Batch&, const StepOptions&) override {}
  void empty_share(const Batch& batch, const StepOptions& o) override {
    grad_.assign(net_.layout().total(), 0.f);
    net_.skip_dropout_draws(batch.input.global_B, batch.input.global_T, o.dropout, o.rng);
  }
  void forward(const Batch& batch, const StepOptions& o) override {
    net_.forward(params_, batch.input, o.dropout, o.rng, act_, pr_);
  }
  CrfSums crf(const Batch& batch, const StepOptions& o, double scale) override;
  void frame_ce(const Batch& batch, double scale) override;
  void backward(const Batch& batch, const StepOptions& o) override;
  void penalty(const StepOptions& o) override;
  void grad_norm() override { norm_ = global_norm(grad_); }
  void end_share() noexcept override {}
  void allreduce() override {
    grad_.resize(net_.layout().total());  // a share that failed before its backward joins with its size
    world_->allreduce_sum(grad_.data(), grad_.size(), "the gradient all-reduce");
    reduced_norm_ = global_norm(grad_);
  }
  StepReadBack read_back() override { return {penalty_, norm_, reduced_norm_}; }
  void check_taps() override {}
  void check_crf_gradients() override;
  double frame_ce_sum(int) override { return frame_ce_sum_; }
  [[noreturn]] void throw_nonfinite_gradient(bool) override {
    check_gradient_finite(net_.layout(), grad_.data());
    throw NonFiniteError("gradient norm", "non-finite global gradient norm (every gradient entry is finite: overflow)");
  }
  void clip(double max_norm, double norm) override { clip_to_norm(grad_, norm, max_norm); }
  void update(const std::vector<UpdateRange>& ranges) override;

 private:
  const Network<float>& net_;
  const std::vector<float>& params_;
  crf::Session& session_;
  std::vector<float>& grad_;
  Activations<float>& act_;
  Probe* probe_;
  Probe* pr_;  // the probe while it can do anything, else null (taps cost nothing)
  dist::Communicator* world_;
  std::vector<float>* stored_ = nullptr;
  AdamW* opt_ = nullptr;
  crf::HostResult crf_;  // the CRF stage's log Z, gold and gradients
  double penalty_ = 0, norm_ = 0, reduced_norm_ = 0, frame_ce_sum_ = 0;
  bool with_ce_ = false;
};

// Stage 2, the CRF: log Z, gold and the CRF gradients scaled by `scale`; the
// crf and penalty forward taps (the penalty's value: its gradient share is
// added after the encoder backward), then the crf backward taps.
CrfSums CpuStepDevice::crf(const Batch& batch, const StepOptions& o, double scale) {
  const ParamLayout& lay = net_.layout();
  const ModelDims& d = lay.dims();
  const int C = d.num_classes, K = d.max_duration;
  const crf::Dims dims = d.crf_dims(batch.input.B, batch.input.T);
  crf::HostRunOptions run_opts;
  run_opts.gradients = true;
  run_opts.viterbi = false;
  run_opts.scale = scale;
  try {
    const crf::Params p = crf_params(lay, params_, act_.cum, batch, act_.onset);
    crf_ = batch.transcript() ? transcript_crf_host(session_, dims, p, batch, scale)
                              : session_.run_host(dims, p, batch.labels.data(), run_opts);
  } catch (const std::invalid_argument& e) {
    // validate_host names the tensor (e.g. a non-finite cum_scores entry)
    throw NonFiniteError("CRF input", e.what());
  }
  if (pr_) {
    pr_->tap("crf", config::Pass::forward, "log_z", crf_.log_z.data(), crf_.log_z.size());
    pr_->tap("crf", config::Pass::forward, "gold", crf_.gold.data(), crf_.gold.size());
    std::vector<float> gt(static_cast<size_t>(C) * C, 0.f), gd(static_cast<size_t>(K) * C, 0.f);
    const CrfParamView& crf = lay.crf();
    double pen = crf::l2_penalty<float>(o.crf_reg, C, penalized_durations(d), crf.transition.in(params_),
                                        crf.duration_bias.in(params_), gt.data(), gd.data());
    pr_->tap("penalty", config::Pass::forward, "penalty", &pen, 1);
    penalty_ = pen;
    const std::string d_ = "d_";  // the taps of the CRF tensors' gradients: d_ and the checkpoint name
    const std::pair<std::string, std::vector<float>*> grads[] = {
        {"d_cum_scores", &crf_.grad_cum_scores}, {d_ + crf.transition.name, &crf_.grad_transition},
        {d_ + crf.duration_bias.name, &crf_.grad_duration_bias}, {d_ + crf.start.name, &crf_.grad_start},
        {d_ + crf.end.name, &crf_.grad_end}};
    for (const auto& [name, v] : grads) pr_->tap("crf", config::Pass::backward, name, v->data(), v->size());
    if (!crf_.grad_onset.empty()) pr_->tap("crf", config::Pass::backward, "d_onset", crf_.grad_onset.data(), crf_.grad_onset.size());
  }
  return {crf_.log_z.data(), crf_.gold.data()};
}

void CpuStepDevice::check_crf_gradients() {
  const std::pair<const char*, std::vector<float>*> grads[] = {
      {"grad_cum_scores", &crf_.grad_cum_scores}, {"grad_transition", &crf_.grad_transition},
      {"grad_duration_bias", &crf_.grad_duration_bias}, {"grad_start", &crf_.grad_start},
      {"grad_end", &crf_.grad_end}, {"grad_onset", &crf_.grad_onset}};
  for (const auto& [name, v] : grads)
    if (any_nonfinite(*v)) throw NonFiniteError(name, std::string("non-finite value in CRF backward ") + name);
}

// crf.frame_ce_weight: the frame CE of act.scores (time-major rows t*B + b)
// and scale * its gradient [B][T][C] (kept per thread: no allocation per step).
std::vector<float>& frame_ce_gradient() {
  static thread_local std::vector<float> dce;
  return dce;
}

void CpuStepDevice::frame_ce(const Batch& batch, double scale) {
  const int B = batch.input.B, T = batch.input.T, C = net_.layout().dims().num_classes;
  std::vector<float>& dce = frame_ce_gradient();
  dce.resize(static_cast<size_t>(B) * T * C);
  frame_ce_sum_ = frame_cross_entropy<float>(B, T, C, act_.scores.data(), C, int64_t(B) * C,
                                             batch.input.lengths.data(), batch.labels.data(), scale, nullptr,
                                             dce.data());
  with_ce_ = true;
}

// Stage 4: the encoder's backward (d features only for the input layer's
// backward tap, a buffer kept per thread), then the CRF parameters' gradients.
void CpuStepDevice::backward(const Batch&, const StepOptions&) {
  static thread_local std::vector<float> dfeatures;
  net_.backward(params_, act_, crf_.grad_cum_scores, grad_,
                pr_ && pr_->wants("input", config::Pass::backward) ? &dfeatures : nullptr, pr_,
                with_ce_ ? &frame_ce_gradient() : nullptr, crf_.grad_onset.empty() ? nullptr : &crf_.grad_onset);
  const ParamLayout& lay = net_.layout();
  const CrfParamView& crf = lay.crf();
  auto add = [&](const CrfTensor& t, const std::vector<float>& g) { std::copy(g.begin(), g.end(), t.in(grad_)); };
  add(crf.transition, crf_.grad_transition);
  add(crf.duration_bias, crf_.grad_duration_bias);
  add(crf.start, crf_.grad_start);
  add(crf.end, crf_.grad_end);
}

// Stage 5: the penalty's gradient share on top of the CRF gradients (its
// value unless tapped in crf()), its backward taps, the lognormal duration chain.
void CpuStepDevice::penalty(const StepOptions& o) {
  const ParamLayout& lay = net_.layout();
  const ModelDims& d = lay.dims();
  const CrfParamView& crf = lay.crf();
  const double penalty =
      crf::l2_penalty<float>(o.crf_reg, d.num_classes, penalized_durations(d), crf.transition.in(params_),
                             crf.duration_bias.in(params_), crf.transition.in(grad_), crf.duration_bias.in(grad_));
  if (!pr_) penalty_ = penalty;  // else: the tapped value (a planted fault included)
  if (pr_)
    for (const CrfTensor* t : {&crf.transition, &crf.duration_bias})
      pr_->tap("penalty", config::Pass::backward, std::string("d_") + t->name, t->in(grad_), t->size);
  // crf.duration_model = lognormal: d table (loss + penalty) -> d crf.duration_lognormal; the table's own entry 0
  chain_duration_gradient(lay, params_.data(), grad_.data());
}

// Stage 8: AdamW over the ranges, the lognormal table, the optimizer taps.
void CpuStepDevice::update(const std::vector<UpdateRange>& ranges) {
  opt_->update(*stored_, grad_, ranges);
  derive_duration_table(net_.layout(), stored_->data());
  if (probe_ && probe_->enabled()) {  // after the update by definition: a hit here restores nothing
    probe_->tap("optimizer", config::Pass::backward, "params", stored_->data(), stored_->size());
    probe_->tap("optimizer", config::Pass::backward, "exp_avg", opt_->m.data(), opt_->m.size());
    probe_->tap("optimizer", config::Pass::backward, "exp_avg_sq", opt_->v.data(), opt_->v.size());
  }
}

}  // namespace

StepResult loss_and_grad(const Network<float>& net, const std::vector<float>& params, const Batch& batch,
                         crf::Session& session, const StepOptions& o, std::vector<float>& grad,
                         Activations<float>& act, Probe* probe) {
  CpuStepDevice dev(net, params, session, grad, act, probe, nullptr);
  return run_step(dev, batch, o, /*update=*/false);
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
  Probe probe(true, config::FaultSpec{}, 0);
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
  const crf::Dims dims = d.crf_dims(B, T);
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
        posterior_(o.decode == config::DecodeMode::posterior),
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
    CpuStepDevice dev(enc_.network(), step_params(o), session_, grad_, enc_.activations(), &probe, world_);
    dev.set_update(&params_, &opt_);
    return run_step(dev, batch, o, /*update=*/true);  // model/step.h
  }

  StepResult gradients(const Batch& batch, const StepOptions& o, std::vector<float>& grad) override {
    Probe probe(o.check_numerics, o.fault, o.step);
    CpuStepDevice dev(enc_.network(), step_params(o), session_, grad, enc_.activations(), &probe, world_);
    return run_step(dev, batch, o, /*update=*/false);
  }
  crf::AlignResult align(const Batch& batch, int64_t N, const std::vector<int32_t>& phones,
                         const std::vector<int32_t>& num_phones, const std::vector<int32_t>& optional,
                         crf::AlignConfidence* confidence, crf::AlignBoundaries boundaries) override {
    const Network<float>& net = enc_.network();
    Activations<float>& act = enc_.activations();
    inference_forward(net, params_, batch, act, centre_frames_, "align");
    const ModelDims& d = dims();
    const crf::Dims cd = d.crf_dims(batch.input.B, batch.input.T);
    const crf::Params hp = crf_params(net.layout(), params_, act.cum, batch, act.onset);
    crf::AlignResult r =
        session_.align_host(cd, hp, N, phones.data(), num_phones.data(), optional.empty() ? nullptr : optional.data());
    finish_alignment(session_, cd, hp, N, phones, num_phones, optional, boundaries, &r, confidence);
    return r;
  }

  std::vector<double> span_marginals(const Batch& batch, int64_t Q, const std::vector<int32_t>& queries,
                                     const std::vector<int32_t>& num_queries) override {
    const Network<float>& net = enc_.network();
    Activations<float>& act = enc_.activations();
    inference_forward(net, params_, batch, act, centre_frames_, "span_marginals");  // as decode: windows when long
    const ModelDims& d = dims();
    const crf::Dims cd = d.crf_dims(batch.input.B, batch.input.T);
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
  // The parameters of a step: the stored ones, or with o.poison applied for
  // this step only (a copy).
  const std::vector<float>& step_params(const StepOptions& o) {
    if (o.poison.empty()) return params_;
    poisoned_ = params_;
    for (const auto& [i, v] : o.poison) poisoned_.at(i) = v;
    return poisoned_;
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
