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
#include "tests/support/heads_oracle.h"
#include "tests/support/model_problems.h"

using namespace timitseg;
using namespace timitseg::model;
using namespace timitseg::config;

namespace {

using testsupport::Tiny;
using testsupport::tiny_params;
using testsupport::total_loss;

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
TEST(EndModel, TrainingStepMatchesFloat64Oracle) { testsupport::expect_float_step_matches_oracle(Tiny(true, true)); }

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
