// crf.onset_features: the second projection crf.onset_projection (Linear
// W -> C on the encoder output) whose raw output is the CRF's onset score.
// Finite differences through the whole CPU network in float64 (features ->
// encoder -> projection + onset projection -> cumsum / onset -> semi-CRF NLL of
// the float64 reference backend, itself checked against brute force with onset
// in tests/crf/test_onset.cpp), the float training step against that oracle,
// the parameter layout (onset parameters in the encoder's optimizer group,
// nothing changed without the key), a checkpoint round trip, the config key
// (fixed on --resume), and a short CPU training run that lowers the loss.
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
#include "model/make_executor.h"
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

}  // namespace

TEST(OnsetModel, FiniteDifferencesWholeNetworkFloat64) {
  Tiny tc(true, false);
  Network<double> net(tc.dims);
  const std::vector<double> params = tiny_params(net);
  std::vector<double> grad, dfeat;
  const double loss = total_loss(net, params, tc, tc.features, &grad, &dfeat);
  ASSERT_TRUE(std::isfinite(loss));
  ASSERT_GT(loss, 0.0);
  const double h = 1e-6;
  double worst = 0, onset_grad = 0;
  for (const ParamInfo& p : net.layout().params())
    for (size_t k = 0; k < p.size; ++k) {
      std::vector<double> pp = params, pm = params;
      pp[p.offset + k] += h;
      pm[p.offset + k] -= h;
      const double fd = (total_loss(net, pp, tc, tc.features, nullptr, nullptr) -
                         total_loss(net, pm, tc, tc.features, nullptr, nullptr)) /
                        (2 * h);
      const double err = std::abs(grad[p.offset + k] - fd);
      EXPECT_LE(err, 1e-6 * (1.0 + std::abs(fd))) << p.name << "[" << k << "]: analytic " << grad[p.offset + k]
                                                   << " vs FD " << fd;
      worst = std::max(worst, err);
      if (p.name.rfind("crf.onset_projection.", 0) == 0) onset_grad = std::max(onset_grad, std::abs(fd));
    }
  EXPECT_GT(onset_grad, 1e-2);  // the onset path carries a real gradient
  for (int b = 0; b < tc.B; ++b)
    for (int t = 0; t < tc.T; ++t)
      for (int d = 0; d < tc.dims.input_dim; ++d) {
        const size_t idx = (size_t(b) * tc.T + t) * tc.dims.input_dim + d;
        std::vector<double> fp = tc.features, fm = tc.features;
        fp[idx] += h;
        fm[idx] -= h;
        const double fd =
            (total_loss(net, params, tc, fp, nullptr, nullptr) - total_loss(net, params, tc, fm, nullptr, nullptr)) /
            (2 * h);
        if (t >= tc.lengths[b]) {
          EXPECT_EQ(dfeat[idx], 0.0);
          EXPECT_EQ(fd, 0.0) << "padding frame influences the loss";
        } else {
          EXPECT_LE(std::abs(dfeat[idx] - fd), 1e-6 * (1.0 + std::abs(fd))) << "features[" << idx << "]";
        }
      }
  RecordProperty("max_abs_err", std::to_string(worst));
}

// The float training step (CPU executor's loss_and_grad, reference and cpu CRF
// backends) against the float64 oracle (tests/support/heads_oracle.h).
TEST(OnsetModel, TrainingStepMatchesFloat64Oracle) { testsupport::expect_float_step_matches_oracle(Tiny(true, false)); }

TEST(OnsetModel, LayoutAddsTheProjectionToTheEncoderGroupOnly) {
  ModelDims off;
  off.input_dim = 5;
  off.hidden_dim = 8;
  off.num_layers = 2;
  off.num_classes = 7;
  off.max_duration = 4;
  ModelDims on = off;
  on.onset = true;
  const ParamLayout a(off), b(on);
  EXPECT_EQ(b.total(), a.total() + 7 * 8 + 7);
  EXPECT_EQ(b.crf_structure_begin(), a.crf_structure_begin() + 7 * 8 + 7);
  const ParamInfo& w = b.get("crf.onset_projection.weight");
  EXPECT_EQ(w.shape, (std::vector<int64_t>{7, 8}));
  EXPECT_EQ(b.get("crf.onset_projection.bias").shape, (std::vector<int64_t>{7}));
  EXPECT_EQ(w.offset, a.crf_structure_begin());  // right after crf.projection.bias
  EXPECT_LT(b.get("crf.onset_projection.bias").offset, b.crf_structure_begin());
  EXPECT_THROW(a.get("crf.onset_projection.weight"), std::invalid_argument);
  // Without onset the names, shapes and offsets are unchanged; the encoder's
  // initialisation draws are the same with and without (onset drawn after).
  for (const ParamInfo& p : a.params()) {
    const ParamInfo& q = b.get(p.name);
    EXPECT_EQ(q.shape, p.shape) << p.name;
    if (p.offset < a.crf_structure_begin()) EXPECT_EQ(q.offset, p.offset) << p.name;
  }
  std::mt19937_64 r1(5), r2(5);
  std::vector<float> pa, pb;
  init_params(a, r1, pa);
  init_params(b, r2, pb);
  for (size_t i = 0; i < a.crf_structure_begin(); ++i) ASSERT_EQ(pa[i], pb[i]) << i;
  const float bound = 1.0f / std::sqrt(8.0f);  // like crf.projection: U(-1/sqrt(W), 1/sqrt(W))
  double maxabs = 0;
  for (size_t i = 0; i < w.size; ++i) maxabs = std::max(maxabs, double(std::abs(pb[w.offset + i])));
  EXPECT_LE(maxabs, bound);
  EXPECT_GT(maxabs, 0.5 * bound);
  EXPECT_EQ(dims_json(off).find("onset"), std::string::npos);  // checkpoints without onset: as before
}

TEST(OnsetModel, CheckpointRoundTripKeepsDimsAndParameters) {
  ModelState s = testsupport::tiny_model_state(false);
  s.dims.onset = true;
  const ParamLayout lay(s.dims);
  s.params.resize(lay.total());
  for (size_t i = 0; i < s.params.size(); ++i) s.params[i] = 0.001f * static_cast<float>(i % 997) - 0.3f;
  s.optimizer.reset(s.params.size());
  s.config.crf_onset_features = OnsetFeatures::on;
  const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     ("timitseg_onset_ckpt_" + std::to_string(::getpid()) + ".safetensors");
  save_checkpoint(path.string(), s);
  const ModelState r = load_checkpoint(path.string());
  std::filesystem::remove(path);
  EXPECT_TRUE(r.dims.onset);
  EXPECT_TRUE(r.config.onset_enabled());
  EXPECT_EQ(r.params, s.params);
  const ParamInfo& w = ParamLayout(r.dims).get("crf.onset_projection.weight");
  EXPECT_EQ(r.params[w.offset + 3], s.params[w.offset + 3]);
}

TEST(OnsetModel, ConfigKeyParsesAndIsFixedOnResume) {
  Config c;
  EXPECT_FALSE(c.onset_enabled());
  c.set("crf.onset_features=true", "test");
  EXPECT_TRUE(c.onset_enabled());
  EXPECT_EQ(Config::from_json(c.to_json(), "json").crf_onset_features, OnsetFeatures::on);
  // auto: on for the semi-CRF (K > 1), off for the linear CRF (K = 1)
  c.set("crf.onset_features=auto", "test");
  c.set("crf.max_duration=60", "test");
  EXPECT_TRUE(c.onset_enabled());
  c.set("crf.max_duration=1", "test");
  EXPECT_FALSE(c.onset_enabled());
  c.set("crf.onset_features=false", "test");
  c.set("crf.max_duration=60", "test");
  EXPECT_FALSE(c.onset_enabled());
  {
    Config bad;
    bad.set("crf.onset_features=maybe", "test");
    try {
      bad.validate();
      ADD_FAILURE() << "no error";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("crf.onset_features"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("one of false, true, auto"), std::string::npos) << e.what();
    }
  }
  try {
    c.set_on_resume("crf.onset_features=false", "o");
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'crf.onset_features' cannot be changed on --resume"), std::string::npos)
        << e.what();
  }
}

// A short CPU training run with onset on: 30 AdamW steps on one batch lower the loss.
TEST(OnsetModel, ShortCpuTrainingLowersTheLoss) {
  ModelDims d;
  d.input_dim = 6;
  d.hidden_dim = 16;
  d.num_layers = 1;
  d.num_classes = 5;
  d.max_duration = 5;
  d.onset = true;
  const std::vector<float> params = testsupport::random_model_params(d, 3, 0.1f);
  const Batch batch = testsupport::random_model_batch(d, 4, 30, 4);
  ExecutorOptions xo;
  xo.threads = 2;
  xo.crf_backend = crf::BackendKind::cpu;
  auto ex = make_executor(Device::cpu, d, xo);
  AdamW opt;
  opt.reset(params.size());
  ex->set_state(params, opt);
  StepOptions o;
  o.lr = 1e-2;
  o.clip_norm = 5.0;
  double first = 0, last = 0;
  for (int step = 1; step <= 30; ++step) {
    o.step = step;
    const StepResult r = ex->train_step(batch, o);
    ASSERT_TRUE(std::isfinite(r.loss));
    if (step == 1) first = r.loss;
    last = r.loss;
  }
  EXPECT_LT(last, 0.7 * first) << "first " << first << " last " << last;
  std::vector<float> after;
  AdamW oa;
  ex->get_state(after, oa);
  const ParamInfo& w = ParamLayout(d).get("crf.onset_projection.weight");
  double moved = 0;
  for (size_t i = 0; i < w.size; ++i) moved += std::abs(after[w.offset + i] - params[w.offset + i]);
  EXPECT_GT(moved, 1e-3);  // the onset projection trains
  // Decoding uses the onset too: one segmentation per utterance tiling [0, length).
  const auto segs = ex->decode(batch, nullptr, nullptr);
  for (int b = 0; b < 4; ++b) {
    int next = 0;
    for (const crf::Segment& s : segs[b]) {
      EXPECT_EQ(s.start, next);
      next += s.duration;
    }
    EXPECT_EQ(next, batch.input.lengths[b]);
  }
  RecordProperty("loss_first", std::to_string(first));
  RecordProperty("loss_last", std::to_string(last));
}

// --check-numerics with onset: the layer list has onset_projection after
// projection; a fault planted there is named (forward: the onset scores;
// backward: its weight gradient, the first tensor that layer taps).
TEST(OnsetModel, NumericTapsNameTheOnsetProjection) {
  const std::vector<std::string> with = numerics_layers(1, true), without = numerics_layers(1);
  ASSERT_EQ(with.size(), without.size() + 1);
  EXPECT_EQ(with[4], "projection");
  EXPECT_EQ(with[5], "onset_projection");
  EXPECT_THROW(FaultSpec::parse("layer=onset_projection,pass=forward,step=1,value=nan", 1), std::invalid_argument);
  Tiny tc(true, false);
  Network<float> net(tc.dims);
  Network<double> netd(tc.dims);
  const std::vector<double> pd = tiny_params(netd);
  const std::vector<float> pf(pd.begin(), pd.end());
  Batch batch;
  batch.input.B = tc.B;
  batch.input.T = tc.T;
  batch.input.features.assign(tc.features.begin(), tc.features.end());
  batch.input.lengths = tc.lengths;
  batch.labels = tc.labels;
  batch.ids = {"a", "b", "c"};
  for (int32_t l : tc.lengths) batch.frames += l;
  auto backend = crf::make_backend(crf::BackendKind::cpu);
  for (const Pass pass : {Pass::forward, Pass::backward}) {
    StepOptions o;
    o.check_numerics = true;
    o.step = 1;
    o.fault = FaultSpec::parse(std::string("layer=onset_projection,pass=") + pass_name(pass) + ",step=1,value=nan", 1,
                               true);
    std::vector<float> grad;
    Activations<float> act;
    try {
      loss_and_grad(net, pf, batch, *backend, o, grad, act);
      ADD_FAILURE() << "no NumericsError, pass " << pass_name(pass);
    } catch (const NumericsError& e) {
      EXPECT_EQ(e.hit().layer, "onset_projection");
      EXPECT_EQ(e.hit().pass, pass);
      EXPECT_EQ(e.hit().tensor, pass == Pass::forward ? "onset_scores" : "d_crf.onset_projection.weight");
    }
  }
}
