// crf.duration_model = lognormal (crf/duration.h): the derived
// duration table against the log-normal density written out independently,
// its gradient against central finite differences, the clamp of log sigma,
// the data fit against hand-computed moments, the executor's chain rule
// against the table model's own gradient (the same network and derived
// table: grad_ln must be J^T grad_table), the invariant table ==
// f(crf.duration_lognormal) after every update, the layout, the checkpoint
// round trip and the config key.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "crf/duration.h"
#include "model/make_executor.h"
#include "model/model.h"
#include "tests/support/model_problems.h"

using namespace timitseg;
using namespace timitseg::model;
using namespace timitseg::config;
using crf::fit_lognormal_durations;
using crf::kMaxLogSigma;
using crf::kMinLogSigma;
using crf::lognormal_duration_backward;
using crf::lognormal_duration_table;

namespace {

// The log-normal log-density of d, written as the textbook formula (not the
// implementation's expansion): log( 1 / (d sigma sqrt(2 pi)) exp(-(ln d - mu)^2 / (2 sigma^2)) ),
// plus sqrt(2 pi)'s log (the offset absorbs that constant) and the offset.
double lognormal_log_density(double d, double mu, double sigma, double offset) {
  const double pdf = 1.0 / (d * sigma * std::sqrt(2.0 * M_PI)) *
                     std::exp(-(std::log(d) - mu) * (std::log(d) - mu) / (2.0 * sigma * sigma));
  return std::log(pdf) + 0.5 * std::log(2.0 * M_PI) + offset;
}

}  // namespace

TEST(DurationLognormal, TableIsTheLogNormalLogDensity) {
  const int K = 40, C = 5;
  const std::vector<float> ln = testsupport::random_lognormal_rows(C, 3);
  std::vector<float> table(K * C);
  lognormal_duration_table(K, C, ln.data(), table.data());
  for (int k = 0; k < K; ++k)
    for (int c = 0; c < C; ++c) {
      const double want = lognormal_log_density(k + 1, ln[c], std::exp(double(ln[C + c])), ln[2 * C + c]);
      EXPECT_NEAR(table[k * C + c], want, 2e-6 * std::max(1.0, std::abs(want))) << "k " << k << " c " << c;
    }
  // a hand value: mu = log 4, sigma = 0.5, offset 0, at d = 4: -log 4 - log 0.5 = -log 2
  const std::vector<float> one{float(std::log(4.0)), float(std::log(0.5)), 0.f};
  std::vector<float> t1(8);
  lognormal_duration_table(8, 1, one.data(), t1.data());
  EXPECT_NEAR(t1[3], -std::log(2.0), 1e-6);
  // the mode of the log-normal density is exp(mu - sigma^2): with mu = log 4 + 0.25, d = 4 is the largest entry
  const std::vector<float> peak{float(std::log(4.0) + 0.25), float(std::log(0.5)), 0.f};
  lognormal_duration_table(8, 1, peak.data(), t1.data());
  for (int k = 0; k < 8; ++k)
    if (k != 3) EXPECT_LT(t1[k], t1[3]) << k;
}

TEST(DurationLognormal, LogSigmaIsClampedAndItsGradientIsZeroOutside) {
  const int K = 10;
  std::vector<float> lo{1.f, -10.f, 0.f}, at{1.f, float(kMinLogSigma), 0.f}, hi{1.f, 9.f, 0.f},
      at_hi{1.f, float(kMaxLogSigma), 0.f};
  std::vector<float> a(K), b(K);
  lognormal_duration_table(K, 1, lo.data(), a.data());
  lognormal_duration_table(K, 1, at.data(), b.data());
  for (int k = 0; k < K; ++k) EXPECT_NEAR(a[k], b[k], 1e-4 * std::abs(b[k])) << k;
  lognormal_duration_table(K, 1, hi.data(), a.data());
  lognormal_duration_table(K, 1, at_hi.data(), b.data());
  for (int k = 0; k < K; ++k) EXPECT_NEAR(a[k], b[k], 1e-5) << k;
  for (auto* p : {&lo, &hi}) {
    std::vector<float> g(K, 1.f), gl(3);
    lognormal_duration_backward(K, 1, p->data(), g.data(), gl.data());
    EXPECT_EQ(gl[1], 0.f);
    EXPECT_FLOAT_EQ(gl[2], float(K));  // d/d offset = sum of the table's gradient
    for (float x : g) EXPECT_EQ(x, 0.f);  // the table's gradient is consumed
  }
  // every entry finite at the clamp's extremes, even far from mu
  std::vector<float> far{40.f, -50.f, 0.f}, t(60);
  lognormal_duration_table(60, 1, far.data(), t.data());
  for (float x : t) EXPECT_TRUE(std::isfinite(x));
}

TEST(DurationLognormal, GradientMatchesFiniteDifferences) {
  const int K = 25, C = 4;
  std::vector<float> ln = testsupport::random_lognormal_rows(C, 11);
  std::mt19937_64 rng(5);
  std::vector<double> w(K * C);  // L = sum w * table
  for (double& x : w) x = 2.0 * uniform01(rng) - 1.0;
  auto L = [&](const std::vector<float>& p) {
    std::vector<float> t(K * C);
    lognormal_duration_table(K, C, p.data(), t.data());
    double s = 0;
    for (int i = 0; i < K * C; ++i) s += w[i] * t[i];
    return s;
  };
  std::vector<float> gt(K * C), gl(3 * C);
  for (int i = 0; i < K * C; ++i) gt[i] = static_cast<float>(w[i]);
  lognormal_duration_backward(K, C, ln.data(), gt.data(), gl.data());
  for (float x : gt) EXPECT_EQ(x, 0.f);
  for (int j = 0; j < 3 * C; ++j) {
    const float h = 1e-2f;
    std::vector<float> p = ln, m = ln;
    p[j] += h;
    m[j] -= h;
    const double fd = (L(p) - L(m)) / (double(p[j]) - double(m[j]));
    EXPECT_NEAR(gl[j], fd, 2e-3 * std::max(1.0, std::abs(fd))) << "parameter " << j;
  }
}

TEST(DurationLognormal, DataFitIsTheMomentsOfLogDuration) {
  const int K = 5, C = 3;
  // label 0: pieces 2, 4 and a run of 12 split at K = 5 into 5, 5, 2; label 1: one piece of 3; label 2: none
  std::vector<std::vector<int32_t>> y(2);
  auto run = [](std::vector<int32_t>& v, int label, int n) { v.insert(v.end(), n, label); };
  run(y[0], 0, 2);
  run(y[0], 1, 3);
  run(y[0], 0, 4);
  run(y[1], 0, 12);
  const std::vector<float> ln = fit_lognormal_durations(y, K, C);
  std::vector<double> d0{2, 4, 5, 5, 2}, all{2, 4, 5, 5, 2, 3};
  auto moments = [](const std::vector<double>& d, double& mu, double& sd) {
    mu = 0;
    for (double x : d) mu += std::log(x) / d.size();
    double v = 0;
    for (double x : d) v += (std::log(x) - mu) * (std::log(x) - mu) / d.size();
    sd = std::sqrt(v);
  };
  double mu0, sd0, mua, sda;
  moments(d0, mu0, sd0);
  moments(all, mua, sda);
  EXPECT_NEAR(ln[0], mu0, 1e-6);
  EXPECT_NEAR(ln[C + 0], std::log(sd0), 1e-6);
  for (int c : {1, 2}) {  // fewer than 2 pieces: the pooled fit
    EXPECT_NEAR(ln[c], mua, 1e-6) << c;
    EXPECT_NEAR(ln[C + c], std::log(sda), 1e-6) << c;
  }
  for (int c = 0; c < C; ++c) EXPECT_EQ(ln[2 * C + c], 0.f);
  // equal pieces only: zero spread falls back to the pooled fit; sigma floored at 0.05 when everything is equal
  const std::vector<float> flat = fit_lognormal_durations({std::vector<int32_t>(8, 0)}, 4, 1);  // pieces 4, 4
  EXPECT_NEAR(flat[1], kMinLogSigma, 1e-6);
  EXPECT_THROW(fit_lognormal_durations({{0, 3}}, 4, 3), std::invalid_argument);
}

TEST(DurationLognormal, LayoutAppendsThreeRowsToTheCrfGroup) {
  ModelDims d;
  d.input_dim = 5;
  d.hidden_dim = 8;
  d.num_layers = 1;
  d.num_classes = 7;
  d.max_duration = 9;
  ModelDims l = d;
  l.duration_lognormal = true;
  const ParamLayout a(d), b(l);
  EXPECT_EQ(b.total(), a.total() + 3 * 7);
  EXPECT_EQ(b.crf_structure_begin(), a.crf_structure_begin());
  EXPECT_EQ(b.get("crf.duration_lognormal").offset, a.total());
  EXPECT_EQ(b.get("crf.duration_lognormal").shape, (std::vector<int64_t>{3, 7}));
  for (const ParamInfo& p : a.params()) EXPECT_EQ(b.get(p.name).offset, p.offset) << p.name;
  EXPECT_EQ(dims_json(d).find("duration_model"), std::string::npos);  // table checkpoints: as before
  EXPECT_NE(dims_json(l).find("\"duration_model\":\"lognormal\""), std::string::npos);
}

// The executor's gradient of crf.duration_lognormal is the table model's
// gradient of crf.duration_bias (same network, same derived table) pushed
// through lognormal_duration_backward; the table's own entry is 0. crf.reg
// penalizes the transition only: the loss is the table model's minus
// reg * sum D^2, the log-normal rows' gradient does not change with reg.
TEST(DurationLognormal, ExecutorChainsTheTableGradient) {
  ModelDims dl;
  dl.input_dim = 4;
  dl.hidden_dim = 8;
  dl.num_layers = 1;
  dl.num_classes = 5;
  dl.max_duration = 6;
  dl.duration_lognormal = true;
  ModelDims dt = dl;
  dt.duration_lognormal = false;
  const ParamLayout ll(dl), lt(dt);
  std::vector<float> pl = testsupport::random_model_params(dl, 21, 0.3f);
  const std::vector<float> ln = testsupport::random_lognormal_rows(dl.num_classes, 8);
  std::copy(ln.begin(), ln.end(), pl.begin() + ll.get("crf.duration_lognormal").offset);
  derive_duration_table(ll, pl.data());
  const std::vector<float> pt(pl.begin(), pl.begin() + lt.total());  // the same values without the 3 rows
  const Batch batch = testsupport::random_model_batch(dl, 3, 14, 4);
  ExecutorOptions xo;
  xo.threads = 1;
  auto el = make_executor(Device::cpu, dl, xo);
  auto et = make_executor(Device::cpu, dt, xo);
  AdamW opt;
  const ParamInfo& D = ll.get("crf.duration_bias");
  std::vector<float> scrambled = pl;  // set_state derives the table: a stale table must not matter
  for (size_t i = 0; i < D.size; ++i) scrambled[D.offset + i] = 7.f;
  el->set_state(scrambled, opt);
  et->set_state(pt, opt);
  const size_t LN = ll.get("crf.duration_lognormal").offset;
  std::vector<float> g0;
  for (double reg : {0.0, 0.01}) {
    StepOptions o;
    o.crf_reg = reg;
    std::vector<float> gl, gt;
    const StepResult rl = el->gradients(batch, o, gl);
    const StepResult rt = et->gradients(batch, o, gt);
    double sum_d2 = 0;
    for (size_t i = 0; i < D.size; ++i) sum_d2 += double(pl[D.offset + i]) * pl[D.offset + i];
    EXPECT_NEAR(rl.loss, rt.loss - reg * sum_d2, 1e-9 * std::abs(rt.loss)) << reg;
    for (size_t i = 0; i < D.size; ++i) ASSERT_EQ(gl[D.offset + i], 0.f) << i;
    for (size_t i = 0; i < D.offset; ++i) ASSERT_EQ(gl[i], gt[i]) << i;  // encoder and transition as the table model
    if (reg == 0.0) {
      std::vector<float> gtable(gt.begin() + D.offset, gt.begin() + D.offset + D.size), want(ln.size());
      lognormal_duration_backward(dl.max_duration, dl.num_classes, ln.data(), gtable.data(), want.data());
      double norm = 0;
      for (size_t j = 0; j < want.size(); ++j) {
        EXPECT_EQ(gl[LN + j], want[j]) << j;
        norm += std::abs(want[j]);
      }
      EXPECT_GT(norm, 1e-3);  // the loss does depend on the durations
      g0.assign(gl.begin() + LN, gl.end());
    } else {
      EXPECT_EQ(std::vector<float>(gl.begin() + LN, gl.end()), g0);  // no penalty on the derived table
    }
  }
}

TEST(DurationLognormal, TrainStepsKeepTheTableDerivedAndLowerTheLoss) {
  ModelDims d;
  d.input_dim = 4;
  d.hidden_dim = 8;
  d.num_layers = 1;
  d.num_classes = 4;
  d.max_duration = 8;
  d.duration_lognormal = true;
  const ParamLayout lay(d);
  std::vector<float> p = testsupport::random_model_params(d, 2);
  const std::vector<float> ln = testsupport::random_lognormal_rows(d.num_classes, 1);
  std::copy(ln.begin(), ln.end(), p.begin() + lay.get("crf.duration_lognormal").offset);
  ExecutorOptions xo;
  xo.threads = 1;
  auto ex = make_executor(Device::cpu, d, xo);
  AdamW opt;
  ex->set_state(p, opt);
  const Batch batch = testsupport::random_model_batch(d, 4, 20, 9);
  StepOptions o;
  o.lr = 0.02;
  o.crf_lr_scale = 5;
  o.crf_reg = 0.001;
  double first = 0, last = 0;
  for (int s = 1; s <= 40; ++s) {
    o.step = s;
    const StepResult r = ex->train_step(batch, o);
    if (s == 1) first = r.loss;
    last = r.loss;
  }
  EXPECT_LT(last, 0.8 * first);
  std::vector<float> q;
  ex->get_state(q, opt);
  const size_t LN = lay.get("crf.duration_lognormal").offset;
  bool moved = false;
  for (size_t j = 0; j < ln.size(); ++j) moved |= q[LN + j] != ln[j];
  EXPECT_TRUE(moved);
  std::vector<float> table(lay.get("crf.duration_bias").size);
  lognormal_duration_table(d.max_duration, d.num_classes, q.data() + LN, table.data());
  for (size_t i = 0; i < table.size(); ++i) ASSERT_EQ(q[lay.get("crf.duration_bias").offset + i], table[i]) << i;
}

TEST(DurationLognormal, CheckpointAndConfigKey) {
  ModelState s = testsupport::tiny_model_state(false);
  s.dims.duration_lognormal = true;
  const ParamLayout lay(s.dims);
  s.params.resize(lay.total());
  for (size_t i = 0; i < s.params.size(); ++i) s.params[i] = 0.001f * static_cast<float>(i % 997) - 0.3f;
  s.optimizer.reset(s.params.size());
  s.config.crf_duration_model = DurationModel::lognormal;
  const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     ("timitseg_lognormal_ckpt_" + std::to_string(::getpid()) + ".safetensors");
  save_checkpoint(path.string(), s);
  const ModelState r = load_checkpoint(path.string());
  std::filesystem::remove(path);
  EXPECT_TRUE(r.dims.duration_lognormal);
  EXPECT_TRUE(r.config.duration_lognormal());
  EXPECT_EQ(r.params, s.params);

  Config c;
  EXPECT_FALSE(c.duration_lognormal());
  c.set("crf.duration_model=lognormal", "test");
  EXPECT_TRUE(c.duration_lognormal());
  EXPECT_EQ(Config::from_json(c.to_json(), "json").crf_duration_model, DurationModel::lognormal);
  Config bad;
  bad.set("crf.duration_model=gamma", "test");
  try {
    bad.validate();
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("crf.duration_model"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("one of table, lognormal"), std::string::npos) << e.what();
  }
  EXPECT_THROW(c.set_on_resume("crf.duration_model=table", "o"), std::invalid_argument);
}
