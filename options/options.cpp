// A validated Config turned into dims and options (options/options.h).
#include "options/options.h"

namespace timitseg::options {

model::ModelDims model_dims(const config::Config& cfg, int input_dim, int num_classes) {
  model::ModelDims d;
  d.input_dim = input_dim;
  d.hidden_dim = cfg.model_hidden_dim;
  d.num_layers = cfg.model_num_layers;
  d.num_classes = num_classes;
  d.max_duration = cfg.crf_max_duration;
  d.onset = cfg.onset_enabled();
  d.duration_lognormal = cfg.duration_lognormal();
  return d;
}

model::ExecutorOptions executor_options(const config::Config& cfg, const DeviceChoice& choice, int threads) {
  model::ExecutorOptions xo;
  xo.threads = threads;
  xo.crf_backend = choice.crf_backend;
  xo.rnn_algo = choice.rnn_algo;  // resolved: never auto
  xo.deterministic = cfg.debug_deterministic;
  xo.phone_bonus = cfg.crf_phone_bonus;
  xo.decode = cfg.crf_decode;
  return xo;
}

crf::BackendKind inference_crf_backend(model::Device device, crf::BackendKind chosen) {
  if (device == model::Device::cuda) return crf::BackendKind::cuda;
  return chosen == crf::BackendKind::cuda ? crf::BackendKind::cpu : chosen;
}

model::ExecutorOptions inference_executor_options(const config::Config& cfg, const DeviceChoice& choice,
                                                  int threads) {
  model::ExecutorOptions xo = executor_options(cfg, choice, threads);
  xo.crf_backend = inference_crf_backend(choice.device, choice.crf_backend);
  xo.deterministic = false;
  return xo;
}

model::StepOptions step_options(const config::Config& cfg) {
  model::StepOptions so;
  so.crf_lr_scale = cfg.crf_lr_scale;
  so.dropout = cfg.model_dropout;
  so.clip_norm = cfg.train_clip_norm;
  so.crf_reg = cfg.crf_reg;
  so.frame_normalization = cfg.crf_loss_normalization == config::LossNormalization::frame;
  so.frame_ce_weight = cfg.crf_frame_ce_weight;
  so.check_numerics = cfg.debug_check_numerics;
  so.seed = cfg.train_seed;
  return so;
}

void set_optimizer_settings(const config::Config& cfg, model::AdamW& optimizer) {
  optimizer.beta1 = cfg.train_beta1;
  optimizer.beta2 = cfg.train_beta2;
  optimizer.eps = cfg.train_eps;
  optimizer.weight_decay = cfg.train_weight_decay;
}

}  // namespace timitseg::options
