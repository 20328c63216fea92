// Random model-level problems shared by the model and GPU tests: a padded
// batch with labels made of runs (one utterance of full length, one of a
// single frame), initial parameters with random CRF parameters, and the
// batches of the legacy checkpoint fixture (tests/model/fixtures/legacy).
#pragma once

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/safetensors.h"
#include "model/batch.h"
#include "model/checkpoint.h"
#include "model/executor.h"
#include "model/make_executor.h"
#include "model/params.h"

namespace timitseg::testsupport {

// The small model of the executor tests: 13 inputs, 32 hidden units, 2
// layers, 9 classes, K = 6 (K = 12 with lognormal durations, whose table needs
// room for its tail).
inline model::ModelDims small_dims(bool lognormal = false) {
  model::ModelDims d;
  d.input_dim = 13;
  d.hidden_dim = 32;
  d.num_layers = 2;
  d.num_classes = 9;
  d.max_duration = lognormal ? 12 : 6;
  d.duration_lognormal = lognormal;
  return d;
}

// N(0,1) features [B][T][D]; lengths: row 0 = T, row 1 = 1 (when B > 1), the
// rest uniform in [1, T]; labels in runs, a new label with probability 1/5 per frame.
inline model::Batch random_model_batch(const model::ModelDims& d, int B, int T, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n01(0.f, 1.f);
  model::Batch b;
  b.input.B = B;
  b.input.T = T;
  b.input.features.resize(static_cast<size_t>(B) * T * d.input_dim);
  for (float& x : b.input.features) x = n01(rng);
  b.labels.assign(static_cast<size_t>(B) * T, 0);
  for (int i = 0; i < B; ++i) {
    const int L = i == 0 ? T : (i == 1 ? 1 : 1 + static_cast<int>(rng() % T));
    b.input.lengths.push_back(L);
    b.frames += L;
    b.ids.push_back("u" + std::to_string(i));
    int lab = static_cast<int>(rng() % d.num_classes);
    for (int t = 0; t < T; ++t) {
      if (t < L && rng() % 5 == 0) lab = static_cast<int>(rng() % d.num_classes);
      b.labels[static_cast<size_t>(i) * T + t] = lab;
    }
  }
  return b;
}

// init_params (PyTorch's initialisation) with the given seed; with crf_sd > 0
// the CRF parameters (transition, duration_bias, start, end) are N(0, crf_sd).
inline std::vector<float> random_model_params(const model::ModelDims& d, uint64_t seed, float crf_sd = 0.f) {
  const model::ParamLayout lay(d);
  std::mt19937_64 rng(seed);
  std::vector<float> p;
  model::init_params(lay, rng, p);
  if (crf_sd > 0) {
    std::normal_distribution<float> n(0.f, crf_sd);
    for (const char* name : {"crf.transition", "crf.duration_bias", "crf.start", "crf.end"}) {
      const model::ParamInfo& info = lay.get(name);
      for (size_t i = 0; i < info.size; ++i) p[info.offset + i] = n(rng);
    }
  }
  return p;
}

// A tiny model state for checkpoint tests: D=3, W=4, one layer, 39 classes,
// K=4, every parameter 0.25, fresh AdamW moments; with_cmvn adds a CMVN of
// mean {0.5, -1, 2} and variance {1, 0.25, 4}.
inline model::ModelState tiny_model_state(bool with_cmvn) {
  model::ModelState s;
  s.dims.input_dim = 3;
  s.dims.hidden_dim = 4;
  s.dims.num_layers = 1;
  s.dims.num_classes = 39;
  s.dims.max_duration = 4;
  s.labels = model::LabelSet::make(39);
  s.params.assign(model::ParamLayout(s.dims).total(), 0.25f);
  s.optimizer.reset(s.params.size());
  s.rng_state = "x";
  if (with_cmvn) {
    s.has_cmvn = true;
    s.cmvn.mean = {0.5, -1.0, 2.0};
    s.cmvn.var = {1.0, 0.25, 4.0};
  }
  return s;
}

// The legacy fixture: the checkpoint written before issue 11 and, per
// utterance, what that binary's `evaluate --dump-scores` wrote.
inline std::string legacy_fixture_dir() { return std::string(TIMITSEG_SOURCE_DIR) + "/tests/model/fixtures/legacy/"; }
inline const std::vector<std::string>& legacy_utterances() {
  static const std::vector<std::string> u{"test_dr2_fjmg0_si1002", "test_dr2_fjmg0_sx6"};
  return u;
}
// A one-utterance batch of the dumped (already normalized) features.
inline model::Batch legacy_batch(const st::File& dump, const std::string& utt) {
  const st::Tensor& feats = dump.tensors.at("features");
  const int T = static_cast<int>(feats.shape[0]);
  model::Batch b;
  b.input.B = 1;
  b.input.T = T;
  b.input.features = feats.to<float>();
  b.input.lengths = {T};
  b.labels.assign(T, 0);
  b.ids = {utt};
  b.frames = T;
  return b;
}

// An executor on DEVICE (cpu or cuda) with the CRF backend CRF, holding PARAMS
// and fresh AdamW moments (step 0); 2 CPU threads.
inline std::unique_ptr<model::Executor> executor_with(const std::string& device, const model::ModelDims& d,
                                                      const std::vector<float>& params, const std::string& crf,
                                                      const std::string& algo = "standard",
                                                      double phone_bonus = 0.0) {
  model::ExecutorOptions xo;
  xo.threads = 2;
  xo.crf_backend = timitseg::crf::backend_kind(crf);
  xo.rnn_algo = config::enum_value<config::RnnAlgo>(algo, "algo");
  xo.phone_bonus = phone_bonus;
  auto ex = model::make_executor(model::resolve_device(config::enum_value<config::DeviceSetting>(device, "device")), d, xo);
  model::AdamW opt;
  opt.reset(params.size());
  ex->set_state(params, opt);
  return ex;
}

// crf.duration_lognormal rows [3][C] (mu in [0.5, 3], log sigma in [-1.5, 0.3],
// offset in [-1, 1]); below_clamp_label >= 0: that label's log sigma is -7,
// below the clamp of crf/duration.h.
inline std::vector<float> random_lognormal_rows(int C, uint64_t seed, int below_clamp_label = -1) {
  std::mt19937_64 rng(seed);
  std::vector<float> ln(static_cast<size_t>(3) * C);
  for (int c = 0; c < C; ++c) {
    ln[c] = static_cast<float>(0.5 + 2.5 * model::uniform01(rng));
    ln[C + c] = static_cast<float>(c == below_clamp_label ? -7.0 : -1.5 + 1.8 * model::uniform01(rng));
    ln[2 * C + c] = static_cast<float>(2.0 * model::uniform01(rng) - 1.0);
  }
  return ln;
}

// Step options that make a CPU and a GPU step comparable: no dropout (its
// masks are drawn per device), lr 1e-3, clip 5, CRF L2 1e-3.
inline model::StepOptions no_dropout_step() {
  model::StepOptions o;
  o.lr = 1e-3;
  o.dropout = 0.0;
  o.clip_norm = 5.0;
  o.crf_reg = 1e-3;
  return o;
}

}  // namespace timitseg::testsupport
