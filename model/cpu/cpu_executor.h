// The CPU executor: Network<float> (Eigen) for the encoder, a host CRF backend
// (cpu or reference), the L2 penalty, clipping and AdamW of model/optim.h.
// It is the oracle the GPU executor is tested against.
#pragma once

#include <memory>
#include <random>
#include <vector>

#include "crf/backend.h"
#include "crf/session.h"
#include "model/cpu/network.h"
#include "model/executor.h"

namespace timitseg::model {

// Encoder on the host: Network<float> and the activations of the last forward.
class CpuEncoder final : public Encoder {
 public:
  CpuEncoder(const ModelDims& dims, int threads);
  Device device() const override { return Device::cpu; }
  const ModelDims& dims() const override { return net_.layout().dims(); }
  // Pointer form (the interface): copies params into the network's vector form.
  void forward(const float* params, const EncoderBatch& batch, const ForwardOptions& opt, float* cum) override;
  void backward(const float* params, const float* dcum, float* grad, const float* dscores = nullptr) override;
  void forward_with_onset(const float* params, const EncoderBatch& batch, const ForwardOptions& opt, float* cum,
                          float* onset) override;
  void backward_with_onset(const float* params, const float* dcum, const float* donset, float* grad,
                           const float* dscores = nullptr) override;

  const Network<float>& network() const { return net_; }
  Activations<float>& activations() { return act_; }

 private:
  Network<float> net_;
  Activations<float> act_;
  std::vector<float> params_copy_, grad_copy_, dcum_copy_, dscores_copy_, donset_copy_;
  BatchInput<float> in_;
};

// One loss + gradient evaluation on the host (no update). grad is overwritten
// (layout of params). Throws NonFiniteError naming the first non-finite tensor
// (CRF input, log Z / gold, CRF gradients, loss, parameter gradients), or
// NumericsError with opt.check_numerics (the per-layer taps); `act`
// keeps the batch's activations (cum for the replay file).
StepResult loss_and_grad(const Network<float>& net, const std::vector<float>& params, const Batch& batch,
                         crf::Session& session, const StepOptions& opt, std::vector<float>& grad,
                         Activations<float>& act);
// The same with the step's probe (taps input .. penalty; model/numerics.h):
// a non-finite tapped tensor throws NumericsError before any other check.
StepResult loss_and_grad(const Network<float>& net, const std::vector<float>& params, const Batch& batch,
                         crf::Session& session, const StepOptions& opt, std::vector<float>& grad,
                         Activations<float>& act, Probe* probe);
StepResult loss_and_grad(const Network<float>& net, const std::vector<float>& params, const Batch& batch,
                         crf::Backend& backend, const StepOptions& opt, std::vector<float>& grad,
                         Activations<float>& act);

// Viterbi segments per utterance on the host; act receives the activations.
// nll (optional): per utterance [B], log Z - gold score of batch.labels (of
// the model's own parameters). phone_bonus: crf.phone_bonus, added to the
// Viterbi score at each label change (crf::add_phone_bonus); with 0 one CRF
// call serves both, otherwise the NLL takes a second call. posterior:
// crf.decode = posterior (posterior_decode_on_host; phone_bonus unused).
// centre_frames: a long recording's centring (ExecutorOptions::centre_frames).
std::vector<std::vector<crf::Segment>> decode_batch(const Network<float>& net, const std::vector<float>& params,
                                                    const Batch& batch, crf::Session& session,
                                                    Activations<float>& act, std::vector<double>* nll = nullptr,
                                                    double phone_bonus = 0.0, bool posterior = false,
                                                    int64_t centre_frames = 0);
std::vector<std::vector<crf::Segment>> decode_batch(const Network<float>& net, const std::vector<float>& params,
                                                    const Batch& batch, crf::Backend& backend,
                                                    Activations<float>& act);

std::unique_ptr<Executor> make_cpu_executor(const ModelDims& dims, const ExecutorOptions& options);

}  // namespace timitseg::model
