// A validated Config turned into dims and options (options/options.h).
#include "options/options.h"

namespace timitseg::options {

model::ModelDims model_dims(const config::Config& cfg, int input_dim, int num_classes, bool any_transcript) {
  model::ModelDims d;
  d.input_dim = input_dim;
  d.hidden_dim = cfg.model_hidden_dim;
  d.num_layers = cfg.model_num_layers;
  d.num_classes = num_classes;
  d.max_duration = cfg.crf_max_duration;
  d.onset = cfg.onset_enabled();
  d.end = cfg.end_enabled();
  d.duration_lognormal = cfg.duration_lognormal();
  d.gaussian = cfg.gaussian_head_enabled(any_transcript);
  return d;
}

model::ExecutorOptions executor_options(const config::Config& cfg, const DeviceChoice& choice, int threads) {
  model::ExecutorOptions executor_opts;
  executor_opts.threads = threads;
  executor_opts.crf_backend = choice.crf_backend;
  executor_opts.rnn_algo = choice.rnn_algo;  // resolved: never auto
  executor_opts.deterministic = cfg.debug_deterministic;
  executor_opts.phone_bonus = cfg.crf_phone_bonus;
  executor_opts.decode = cfg.crf_decode;
  return executor_opts;
}

crf::BackendKind inference_crf_backend(model::Device device, crf::BackendKind chosen) {
  if (device == model::Device::cuda) return crf::BackendKind::cuda;
  return chosen == crf::BackendKind::cuda ? crf::BackendKind::cpu : chosen;
}

model::ExecutorOptions inference_executor_options(const config::Config& cfg, const DeviceChoice& choice,
                                                  int threads) {
  model::ExecutorOptions executor_opts = executor_options(cfg, choice, threads);
  executor_opts.crf_backend = inference_crf_backend(choice.device, choice.crf_backend);
  executor_opts.deterministic = false;
  return executor_opts;
}

model::StepOptions step_options(const config::Config& cfg) {
  model::StepOptions step_opts;
  step_opts.crf_lr_scale = cfg.crf_lr_scale;
  step_opts.dropout = cfg.model_dropout;
  step_opts.clip_norm = cfg.train_clip_norm;
  step_opts.crf_reg = cfg.crf_reg;
  step_opts.frame_normalization = cfg.crf_loss_normalization == config::LossNormalization::frame;
  step_opts.frame_ce_weight = cfg.crf_frame_ce_weight;
  step_opts.check_numerics = cfg.debug_check_numerics;
  step_opts.seed = cfg.train_seed;
  return step_opts;
}

void set_optimizer_settings(const config::Config& cfg, model::AdamW& optimizer) {
  optimizer.beta1 = cfg.train_beta1;
  optimizer.beta2 = cfg.train_beta2;
  optimizer.eps = cfg.train_eps;
  optimizer.weight_decay = cfg.train_weight_decay;
}

}  // namespace timitseg::options
