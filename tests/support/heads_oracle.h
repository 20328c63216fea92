// The float64 oracle of the whole CPU network with its anchored heads (the
// onset and end projections, model/crf_params.h), shared by
// tests/model/test_onset_model.cpp and test_end_model.cpp: a tiny padded
// batch, the mean NLL of the float64 reference CRF on the network's folded
// inputs plus the penalty, its gradient through Network<double>::backward,
// and the float training step checked against it.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "crf/backend_kind.h"
#include "crf/reference/reference.h"
#include "model/cpu/cpu_executor.h"
#include "model/cpu/network.h"
#include "model/model.h"

namespace timitseg::testsupport {

using model::Activations;
using model::BatchInput;
using model::CrfParamView;
using model::CrfTensor;
using model::ModelDims;
using model::Network;

struct Tiny {
  ModelDims dims;
  int B = 3, T = 6;
  std::vector<int32_t> lengths{6, 4, 1};
  std::vector<int32_t> labels{0, 0, 0, 0, 2, 1, 1, 2, 2, 0, 0, 0, 2, 0, 0, 1, 1, 1};  // a run of 4 > K = 3
  std::vector<double> features;
  double reg = 0.05;
  explicit Tiny(bool onset, bool end) {
    dims.input_dim = 3;
    dims.hidden_dim = 4;
    dims.num_layers = 1;
    dims.num_classes = 3;
    dims.max_duration = 3;
    dims.onset = onset;
    dims.end = end;
    std::mt19937_64 rng(7);
    features.resize(size_t(B) * T * dims.input_dim);
    for (double& f : features) f = 2.0 * model::uniform01(rng) - 1.0;
  }
};

// mean_b NLL_b (float64 reference CRF on the network's folded inputs) + reg (|A|^2 + |D|^2); gradients when asked.
inline double total_loss(const Network<double>& net, const std::vector<double>& params, const Tiny& tc,
                  const std::vector<double>& features, std::vector<double>* grad, std::vector<double>* dfeat) {
  BatchInput<double> in;
  in.B = tc.B;
  in.T = tc.T;
  in.features = features;
  in.lengths = tc.lengths;
  Activations<double> act;
  net.forward(params, in, 0.0, nullptr, act);
  const int B = tc.B, T = tc.T, C = tc.dims.num_classes, K = tc.dims.max_duration;
  EXPECT_EQ(act.onset.size(), size_t(B) * T * C);
  const CrfParamView& crf = net.layout().crf();
  crf::reference::ParamsF64 p{act.cum.data(),       crf.transition.in(params), crf.duration_bias.in(params),
                              crf.start.in(params), crf.end.in(params),        tc.lengths.data()};
  p.onset = act.onset.data();
  std::vector<double> lz(B), gold(B), gc(act.cum.size()), gA(C * C), gD(K * C), gs(C), ge(C), go(act.onset.size());
  crf::reference::GradsF64 g{gc.data(), gA.data(), gD.data(), gs.data(), ge.data()};
  g.onset = go.data();
  crf::reference::backward_f64(crf::Dims{B, T, K, C}, p, tc.labels.data(), 1.0 / B, lz.data(), gold.data(), g);
  double loss = 0, pen = 0;
  for (int b = 0; b < B; ++b) loss += (lz[b] - gold[b]) / B;
  for (int i = 0; i < C * C; ++i) pen += crf.transition.in(params)[i] * crf.transition.in(params)[i];
  for (int i = 0; i < K * C; ++i) pen += crf.duration_bias.in(params)[i] * crf.duration_bias.in(params)[i];
  loss += tc.reg * pen;
  if (grad) {
    net.backward(params, act, gc, *grad, dfeat, nullptr, nullptr, &go);
    auto put = [&](const CrfTensor& t, const std::vector<double>& gg, bool penalized) {
      for (size_t k = 0; k < t.size; ++k) t.in(*grad)[k] = gg[k] + (penalized ? 2 * tc.reg * t.in(params)[k] : 0.0);
    };
    put(crf.transition, gA, true);
    put(crf.duration_bias, gD, true);
    put(crf.start, gs, false);
    put(crf.end, ge, false);
  }
  return loss;
}

inline std::vector<double> tiny_params(const Network<double>& net) {
  std::mt19937_64 rng(3);
  std::vector<double> params;
  model::init_params(net.layout(), rng, params);
  const CrfParamView& crf = net.layout().crf();
  for (const CrfTensor* t : {&crf.transition, &crf.duration_bias, &crf.start, &crf.end})
    for (size_t k = 0; k < t->size; ++k) t->in(params)[k] = 2.0 * model::uniform01(rng) - 1.0;
  for (size_t k = 0; k < crf.projection_weight.offset; ++k) params[k] *= 2.0;
  for (const CrfTensor* t : {&crf.onset_weight, &crf.onset_bias, &crf.end_weight, &crf.end_bias})
    if (t->present)
      for (size_t k = 0; k < t->size; ++k) t->in(params)[k] *= 3.0;  // head scores of order 1
  return params;
}

// The float training step (CPU executor's loss_and_grad, reference and cpu CRF
// backends) against total_loss in float64, from the same float parameters.
inline void expect_float_step_matches_oracle(const Tiny& tc) {

  Network<double> netd(tc.dims);
  Network<float> netf(tc.dims);
  const std::vector<double> pd = tiny_params(netd);
  const std::vector<float> pf(pd.begin(), pd.end());
  std::vector<float> ff(tc.features.begin(), tc.features.end());
  std::vector<double> gd;
  const double loss_d = total_loss(netd, std::vector<double>(pf.begin(), pf.end()), tc,
                                   std::vector<double>(ff.begin(), ff.end()), &gd, nullptr);
  model::Batch batch;
  batch.input.B = tc.B;
  batch.input.T = tc.T;
  batch.input.features = ff;
  batch.input.lengths = tc.lengths;
  batch.labels = tc.labels;
  batch.ids = {"a", "b", "c"};
  for (int32_t l : tc.lengths) batch.frames += l;
  model::StepOptions o;
  o.crf_reg = tc.reg;
  for (const char* name : {"reference", "cpu"}) {
    auto backend = crf::make_backend(crf::backend_kind(name));
    std::vector<float> gf;
    Activations<float> act;
    const model::StepResult r = model::loss_and_grad(netf, pf, batch, *backend, o, gf, act);
    EXPECT_NEAR(r.loss, loss_d, 1e-5 * std::abs(loss_d)) << name;
    double num = 0, den = 0;
    for (size_t i = 0; i < gd.size(); ++i) num += (gf[i] - gd[i]) * (gf[i] - gd[i]), den += gd[i] * gd[i];
    EXPECT_LT(std::sqrt(num / den), 1e-5) << name << ": relative gradient error";
  }
}

}  // namespace timitseg::testsupport
