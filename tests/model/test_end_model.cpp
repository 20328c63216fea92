// crf.end_features: the projection crf.end_projection (Linear W -> C on the
// encoder output) whose raw output is the CRF's end score, added at each
// segment's last frame by a fold into cum_scores and onset (crf/end_scores.h,
// checked against brute force in tests/crf/test_end_scores.cpp). Here, through
// the whole CPU network: finite differences in float64 with the end head alone
// and beside the onset head; a zero end head gives exactly the model without
// it; the float training step against the float64 oracle; the layout (the
// heads' tensors adjacent), the checkpoint and the config key.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "crf/reference/reference.h"
#include "model/cpu/cpu_executor.h"
#include "model/cpu/network.h"
#include "model/model.h"
#include "tests/support/model_problems.h"

using namespace timitseg;
using namespace timitseg::model;
using namespace timitseg::config;

namespace {

struct Tiny {
  ModelDims dims;
  int B = 3, T = 6;
  std::vector<int32_t> lengths{6, 4, 1};
  std::vector<int32_t> labels{0, 0, 0, 0, 2, 1, 1, 2, 2, 0, 0, 0, 2, 0, 0, 1, 1, 1};  // a run of 4 > K = 3
  std::vector<double> features;
  double reg = 0.05;
  Tiny(bool onset, bool end) {
    dims.input_dim = 3;
    dims.hidden_dim = 4;
    dims.num_layers = 1;
    dims.num_classes = 3;
    dims.max_duration = 3;
    dims.onset = onset;
    dims.end = end;
    std::mt19937_64 rng(7);
    features.resize(size_t(B) * T * dims.input_dim);
    for (double& f : features) f = 2.0 * uniform01(rng) - 1.0;
  }
};

// mean_b NLL_b (float64 reference CRF on the network's folded inputs) + reg (|A|^2 + |D|^2); gradients when asked.
double total_loss(const Network<double>& net, const std::vector<double>& params, const Tiny& tc,
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

std::vector<double> tiny_params(const Network<double>& net) {
  std::mt19937_64 rng(3);
  std::vector<double> params;
  init_params(net.layout(), rng, params);
  const CrfParamView& crf = net.layout().crf();
  for (const CrfTensor* t : {&crf.transition, &crf.duration_bias, &crf.start, &crf.end})
    for (size_t k = 0; k < t->size; ++k) t->in(params)[k] = 2.0 * uniform01(rng) - 1.0;
  for (size_t k = 0; k < crf.projection_weight.offset; ++k) params[k] *= 2.0;
  for (const CrfTensor* t : {&crf.onset_weight, &crf.onset_bias, &crf.end_weight, &crf.end_bias})
    if (t->present)
      for (size_t k = 0; k < t->size; ++k) t->in(params)[k] *= 3.0;  // head scores of order 1
  return params;
}

void expect_gradients_match_finite_differences(bool onset) {
  Tiny tc(onset, true);
  Network<double> net(tc.dims);
  const std::vector<double> params = tiny_params(net);
  std::vector<double> grad, dfeat;
  const double loss = total_loss(net, params, tc, tc.features, &grad, &dfeat);
  ASSERT_TRUE(std::isfinite(loss));
  const double h = 1e-6;
  double end_grad = 0;
  for (const ParamInfo& p : net.layout().params())
    for (size_t k = 0; k < p.size; ++k) {
      std::vector<double> pp = params, pm = params;
      pp[p.offset + k] += h;
      pm[p.offset + k] -= h;
      const double fd = (total_loss(net, pp, tc, tc.features, nullptr, nullptr) -
                         total_loss(net, pm, tc, tc.features, nullptr, nullptr)) /
                        (2 * h);
      EXPECT_LE(std::abs(grad[p.offset + k] - fd), 1e-6 * (1.0 + std::abs(fd)))
          << p.name << "[" << k << "]: analytic " << grad[p.offset + k] << " vs FD " << fd;
      if (p.offset >= net.layout().crf().end_weight.offset &&
          p.offset < net.layout().crf().end_weight.offset + net.layout().crf().end_weight.size)
        end_grad = std::max(end_grad, std::abs(fd));
    }
  EXPECT_GT(end_grad, 1e-2);  // the end path carries a real gradient
  for (size_t idx = 0; idx < tc.features.size(); ++idx) {
    std::vector<double> fp = tc.features, fm = tc.features;
    fp[idx] += h;
    fm[idx] -= h;
    const double fd =
        (total_loss(net, params, tc, fp, nullptr, nullptr) - total_loss(net, params, tc, fm, nullptr, nullptr)) / (2 * h);
    EXPECT_LE(std::abs(dfeat[idx] - fd), 1e-6 * (1.0 + std::abs(fd))) << "features[" << idx << "]";
  }
}

}  // namespace

TEST(EndModel, FiniteDifferencesWholeNetworkFloat64EndAlone) { expect_gradients_match_finite_differences(false); }
TEST(EndModel, FiniteDifferencesWholeNetworkFloat64BesideOnset) { expect_gradients_match_finite_differences(true); }

// With its weight and bias at 0 the end head changes nothing: the loss equals
// that of the model without it bitwise (0 is added), every shared gradient to rounding.
TEST(EndModel, ZeroEndHeadIsTheModelWithoutIt) {
  Tiny with(true, true), without(true, false);
  Network<double> nw(with.dims), no(without.dims);
  std::vector<double> pw = tiny_params(nw);
  const CrfParamView& cw = nw.layout().crf();
  for (const CrfTensor* t : {&cw.end_weight, &cw.end_bias})
    for (size_t k = 0; k < t->size; ++k) t->in(pw)[k] = 0.0;
  std::vector<double> pn;  // the same values, without the end tensors
  for (const ParamInfo& p : no.layout().params()) {
    const ParamInfo& q = nw.layout().get(p.name);
    pn.insert(pn.end(), pw.begin() + q.offset, pw.begin() + q.offset + q.size);
  }
  std::vector<double> gw, gn;
  const double lw = total_loss(nw, pw, with, with.features, &gw, nullptr);
  const double ln = total_loss(no, pn, without, without.features, &gn, nullptr);
  EXPECT_EQ(lw, ln);
  for (const ParamInfo& p : no.layout().params()) {
    const ParamInfo& q = nw.layout().get(p.name);
    for (size_t k = 0; k < p.size; ++k)  // to rounding: the heads' products are 2C wide
      EXPECT_NEAR(gw[q.offset + k], gn[p.offset + k], 1e-13 * (1.0 + std::abs(gn[p.offset + k])))
          << p.name << "[" << k << "]";
  }
}

// The float training step (CPU executor, reference and cpu CRF backends) against the float64 oracle.
TEST(EndModel, TrainingStepMatchesFloat64Oracle) {
  Tiny tc(true, true);
  Network<double> netd(tc.dims);
  Network<float> netf(tc.dims);
  const std::vector<double> pd = tiny_params(netd);
  const std::vector<float> pf(pd.begin(), pd.end());
  std::vector<float> ff(tc.features.begin(), tc.features.end());
  std::vector<double> gd;
  const double loss_d = total_loss(netd, std::vector<double>(pf.begin(), pf.end()), tc,
                                   std::vector<double>(ff.begin(), ff.end()), &gd, nullptr);
  Batch batch;
  batch.input.B = tc.B;
  batch.input.T = tc.T;
  batch.input.features = ff;
  batch.input.lengths = tc.lengths;
  batch.labels = tc.labels;
  batch.ids = {"a", "b", "c"};
  for (int32_t l : tc.lengths) batch.frames += l;
  StepOptions o;
  o.crf_reg = tc.reg;
  for (const char* name : {"reference", "cpu"}) {
    auto backend = crf::make_backend(crf::backend_kind(name));
    std::vector<float> gf;
    Activations<float> act;
    const StepResult r = loss_and_grad(netf, pf, batch, *backend, o, gf, act);
    EXPECT_NEAR(r.loss, loss_d, 1e-5 * std::abs(loss_d)) << name;
    double num = 0, den = 0;
    for (size_t i = 0; i < gd.size(); ++i) num += (gf[i] - gd[i]) * (gf[i] - gd[i]), den += gd[i] * gd[i];
    EXPECT_LT(std::sqrt(num / den), 1e-5) << name << ": relative gradient error";
  }
}

TEST(EndModel, LayoutKeepsTheHeadsAdjacentAndTheModelWithoutEndUnchanged) {
  ModelDims off;
  off.input_dim = 5;
  off.hidden_dim = 8;
  off.num_layers = 2;
  off.num_classes = 7;
  off.max_duration = 4;
  off.onset = true;
  ModelDims on = off;
  on.end = true;
  const ParamLayout a(off), b(on);
  EXPECT_EQ(b.total(), a.total() + 7 * 8 + 7);
  const CrfParamView& v = b.crf();
  EXPECT_EQ(v.end_weight.offset, v.onset_weight.offset + 7 * 8);  // the heads' weights [2C][W]
  EXPECT_EQ(v.end_bias.offset, v.onset_bias.offset + 7);           // and biases [2C]
  EXPECT_LT(v.end_bias.offset, b.crf_structure_begin());           // the encoder's optimizer group
  const AnchoredHeads h = v.heads();
  ASSERT_EQ(h.count(), 2);
  EXPECT_EQ(h.anchors[0], Anchor::first_frame);
  EXPECT_EQ(h.anchors[1], Anchor::last_frame);
  EXPECT_FALSE(h.fold_is_identity());
  EXPECT_TRUE(a.crf().heads().fold_is_identity());
  ModelDims end_only = off;
  end_only.onset = false;
  end_only.end = true;
  EXPECT_EQ(ParamLayout(end_only).crf().heads().count(), 1);
  EXPECT_FALSE(ParamLayout(end_only).crf().heads().fold_is_identity());
  EXPECT_TRUE(end_only.onset_input());
  EXPECT_EQ(dims_json(off).find("end_features"), std::string::npos);  // checkpoints without end: as before
  EXPECT_NE(dims_json(on).find("\"end_features\":true"), std::string::npos);
}

TEST(EndModel, CheckpointRoundTripAndConfigKey) {
  ModelState s = testsupport::tiny_model_state(false);
  s.dims.end = true;
  const ParamLayout lay(s.dims);
  s.params.resize(lay.total());
  for (size_t i = 0; i < s.params.size(); ++i) s.params[i] = 0.001f * static_cast<float>(i % 997) - 0.3f;
  s.optimizer.reset(s.params.size());
  s.config.crf_end_features = OnsetFeatures::on;
  const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     ("timitseg_end_ckpt_" + std::to_string(::getpid()) + ".safetensors");
  save_checkpoint(path.string(), s);
  const ModelState r = load_checkpoint(path.string());
  std::filesystem::remove(path);
  EXPECT_TRUE(r.dims.end);
  EXPECT_FALSE(r.dims.onset);
  EXPECT_TRUE(r.config.end_enabled());
  EXPECT_EQ(r.params, s.params);
  Config c;
  EXPECT_FALSE(c.end_enabled());
  c.set("crf.end_features=auto", "test");
  c.set("crf.max_duration=30", "test");
  EXPECT_TRUE(c.end_enabled());
  c.set("crf.max_duration=1", "test");
  EXPECT_FALSE(c.end_enabled());  // the linear CRF
  Config bad;
  bad.set("crf.end_features=maybe", "test");
  EXPECT_THROW(bad.validate(), std::invalid_argument);
  try {
    c.set_on_resume("crf.end_features=true", "o");
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'crf.end_features' cannot be changed on --resume"), std::string::npos)
        << e.what();
  }
}
