// options/options.h: a Config turned into dims and options in one place. Each
// case sets keys away from their defaults and checks that exactly those
// values arrive (the oracle: the keys as written), and the inference
// backend rule over every device and configured backend.
#include <gtest/gtest.h>

#include <string>

#include "config/config.h"
#include "options/options.h"

using namespace timitseg::model;
using namespace timitseg::config;
using namespace timitseg::options;

namespace {

Config non_default() {
  Config c;
  c.model_hidden_dim = 48;
  c.model_num_layers = 2;
  c.model_dropout = 0.125;
  c.crf_max_duration = 7;
  c.crf_onset_features = OnsetFeatures::automatic;  // K > 1: on
  c.crf_duration_model = DurationModel::lognormal;
  c.crf_reg = 0.25;
  c.crf_loss_normalization = LossNormalization::frame;
  c.crf_frame_ce_weight = 0.5;
  c.crf_lr_scale = 3.0;
  c.crf_phone_bonus = -1.5;
  c.crf_decode = DecodeMode::posterior;
  c.train_clip_norm = 2.5;
  c.train_seed = 77;
  c.train_beta1 = 0.8;
  c.train_beta2 = 0.95;
  c.train_eps = 1e-6;
  c.train_weight_decay = 0.01;
  c.debug_check_numerics = false;
  c.debug_deterministic = true;
  return c;
}

}  // namespace

TEST(Options, ModelDimsFromTheConfig) {
  const ModelDims d = model_dims(non_default(), 39, 48);
  EXPECT_EQ(d.input_dim, 39);
  EXPECT_EQ(d.hidden_dim, 48);
  EXPECT_EQ(d.num_layers, 2);
  EXPECT_EQ(d.num_classes, 48);
  EXPECT_EQ(d.max_duration, 7);
  EXPECT_TRUE(d.onset);
  EXPECT_TRUE(d.duration_lognormal);
  Config linear;
  linear.crf_max_duration = 1;
  linear.crf_onset_features = OnsetFeatures::automatic;  // K = 1: off
  const ModelDims l = model_dims(linear, 13, 39);
  EXPECT_FALSE(l.onset);
  EXPECT_FALSE(l.duration_lognormal);
  EXPECT_EQ(l.hidden_dim, 256);  // the defaults
  EXPECT_EQ(l.num_layers, 3);
}

TEST(Options, StepOptionsFromTheConfig) {
  const StepOptions so = step_options(non_default());
  EXPECT_EQ(so.crf_lr_scale, 3.0);
  EXPECT_EQ(so.dropout, 0.125);
  EXPECT_EQ(so.clip_norm, 2.5);
  EXPECT_EQ(so.crf_reg, 0.25);
  EXPECT_TRUE(so.frame_normalization);
  EXPECT_EQ(so.frame_ce_weight, 0.5);
  EXPECT_FALSE(so.check_numerics);
  EXPECT_EQ(so.seed, 77u);
  // the per-step fields stay the caller's
  EXPECT_EQ(so.step, 0);
  EXPECT_EQ(so.loss_norm, 0.0);
  EXPECT_EQ(so.rng, nullptr);
  EXPECT_TRUE(so.poison.empty());
  EXPECT_FALSE(step_options(Config{}).frame_normalization);  // crf.loss_normalization: utterance
}

TEST(Options, ExecutorAndOptimizerFromTheConfig) {
  DeviceChoice choice;
  choice.device = Device::cuda;
  choice.crf_backend = timitseg::crf::BackendKind::reference;
  choice.rnn_algo = RnnAlgo::fused;
  const ExecutorOptions xo = executor_options(non_default(), choice, 5);
  EXPECT_EQ(xo.threads, 5);
  EXPECT_EQ(xo.crf_backend, timitseg::crf::BackendKind::reference);
  EXPECT_EQ(xo.rnn_algo, RnnAlgo::fused);
  EXPECT_TRUE(xo.deterministic);
  EXPECT_EQ(xo.phone_bonus, -1.5);
  EXPECT_EQ(xo.decode, DecodeMode::posterior);
  EXPECT_EQ(xo.world, nullptr);
  const ExecutorOptions io = inference_executor_options(non_default(), choice, 5);
  EXPECT_EQ(io.crf_backend, timitseg::crf::BackendKind::cuda);  // the GPU decodes with the cuda backend
  EXPECT_FALSE(io.deterministic);
  EXPECT_EQ(io.decode, DecodeMode::posterior);
  AdamW opt;
  opt.reset(4);
  opt.step = 9;
  opt.m[2] = 1.f;
  set_optimizer_settings(non_default(), opt);
  EXPECT_EQ(opt.beta1, 0.8);
  EXPECT_EQ(opt.beta2, 0.95);
  EXPECT_EQ(opt.eps, 1e-6);
  EXPECT_EQ(opt.weight_decay, 0.01);
  EXPECT_EQ(opt.step, 9);  // the state is left alone
  EXPECT_EQ(opt.m[2], 1.f);
}

TEST(Options, OneRulePicksTheInferenceBackend) {
  // (device, configured crf.backend) -> backend: the GPU always cuda; the CPU the host backend, cpu for cuda and auto
  using B = timitseg::crf::BackendKind;
  using S = CrfBackendSetting;
  const struct {
    Device device;
    S configured;
    B want;
  } cases[] = {{Device::cuda, S::cuda, B::cuda},          {Device::cuda, S::cpu, B::cuda},
               {Device::cuda, S::reference, B::cuda},     {Device::cuda, S::automatic, B::cuda},
               {Device::cpu, S::cuda, B::cpu},            {Device::cpu, S::automatic, B::cpu},
               {Device::cpu, S::reference, B::reference}, {Device::cpu, S::cpu, B::cpu}};
  for (const auto& c : cases)
    EXPECT_EQ(inference_crf_backend(c.device, choose_crf_backend(c.configured, c.device)), c.want)
        << device_name(c.device) << " " << to_string(c.configured);
}
