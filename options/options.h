// A validated Config turned into what the layers below it take, in one place
// (docs/design.md "Where things go"): the model's dims, the executor's
// options, a step's options and the optimizer's settings, and the one rule
// that picks the CRF backend of inference. train, replay-step, evaluate /
// decode, compare, the report and bench train call these instead of mapping
// config keys by hand; a new config key that reaches an executor or a step
// is mapped here and nowhere else.
//
// In options/, the room above model/ (docs/design.md), because what it
// returns is model/'s own types; config/ below model/ holds only the settings.
#pragma once

#include <string>

#include "config/config.h"
#include "model/executor.h"
#include "model/optim.h"
#include "model/params.h"
#include "options/device_choice.h"

namespace timitseg::options {

// The model of cfg (model.hidden_dim, model.num_layers, crf.max_duration,
// crf.onset_features, crf.duration_model) on features of input_dim values
// and num_classes labels.
// any_transcript: some train utterance trains on its transcript (crf.gaussian_head = auto turns the head on).
model::ModelDims model_dims(const config::Config& cfg, int input_dim, int num_classes, bool any_transcript = false);

// The executor of a training run (train, replay-step, compare's footprint
// probe, bench train): choice's CRF backend and recurrence (`auto`
// resolved, options/device_choice.h), threads (already resolved by
// set_threads), debug.deterministic, crf.phone_bonus and crf.decode (the dev
// decode of each epoch). ExecutorOptions::world stays the caller's.
model::ExecutorOptions executor_options(const config::Config& cfg, const DeviceChoice& choice, int threads);

// The CRF backend of inference (evaluate, decode, compare's results, the
// report), the one rule: the GPU decodes with the cuda backend; on the CPU the
// chosen host backend (crf.backend, `auto` resolved by choose_crf_backend), cpu
// where it was cuda.
crf::BackendKind inference_crf_backend(model::Device device, crf::BackendKind chosen);

// The executor of inference on choice.device: executor_options with the CRF
// backend of inference_crf_backend and no debug.deterministic (inference has
// no order-dependent reduction to fix).
model::ExecutorOptions inference_executor_options(const config::Config& cfg, const DeviceChoice& choice,
                                                  int threads);

// The part of a step's options that the config sets: crf.lr_scale,
// model.dropout, train.clip_norm, crf.reg, crf.loss_normalization,
// crf.frame_ce_weight, debug.check_numerics, train.seed. The per-step
// fields (lr, step, rng, fault, loss_norm, poison, time_parts) are the caller's.
model::StepOptions step_options(const config::Config& cfg);

// AdamW's hyperparameters from cfg (train.beta1, beta2, eps, weight_decay);
// the moments and the step count are left as they are.
void set_optimizer_settings(const config::Config& cfg, model::AdamW& optimizer);

}  // namespace timitseg::options
