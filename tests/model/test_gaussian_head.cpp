// The Gaussian head (crf.gaussian_weight, model/gaussian_head.h): a per-class
// diagonal Gaussian of the features whose log-likelihood, times w, is added
// to the frame scores, as the linear map crf.gaussian_projection of [x^2; x].
// Oracles: the Gaussian log-density written out from two-pass means and
// variances in float64, each class's moments mixed with the pooled ones by
// the MAP prior's weight in frames; the model without the head (a zero head is that
// model bitwise); finite differences of the whole float64 network (the head's
// own entries take no gradient, the features' gradient includes its path);
// AdamW::update of the step's gradient (the head is held, its moments stay 0).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/gaussian_head.h"
#include "model/make_executor.h"
#include "model/step_recipe.h"
#include "tests/support/heads_oracle.h"
#include "tests/support/model_problems.h"

using namespace timitseg;
using namespace timitseg::model;

namespace {

constexpr int kC = 4, kD = 3;

// Frames of classes 0, 1, 3 (2 has none), class c centred at c with spread 0.5 + 0.25 c per dimension;
// dimension 2 of class 3 is constant (its variance floored).
void frames(std::vector<float>& x, std::vector<int32_t>& y) {
  std::mt19937_64 rng(11);
  std::normal_distribution<double> n01(0.0, 1.0);
  for (int i = 0; i < 60; ++i) {
    const int c = i % 3 == 2 ? 3 : i % 3;
    y.push_back(c);
    for (int d = 0; d < kD; ++d) x.push_back(static_cast<float>(c == 3 && d == 2 ? 1.5 : c + (0.5 + 0.25 * c) * n01(rng)));
  }
}

// w * log N(z; mu_c, v_c) + w * D/2 log(2 pi) (the constant the head leaves out), from two-pass statistics:
// class c's ML mean m and variance s of its n frames, pooled pm and pv of all; with the prior's r frames,
// mu_c = (n m + r pm) / (n + r) and v_c = (n (s + m^2) + r (pv + pm^2)) / (n + r) - mu_c^2, then floored.
std::vector<double> oracle_scores(const std::vector<float>& x, const std::vector<int32_t>& y, double w, double floor,
                                  double r, const std::vector<double>& z) {
  const size_t N = y.size();
  std::vector<double> pm(kD, 0), pv(kD, 0);
  for (size_t i = 0; i < N; ++i)
    for (int d = 0; d < kD; ++d) pm[d] += x[i * kD + d] / double(N);
  for (size_t i = 0; i < N; ++i)
    for (int d = 0; d < kD; ++d) pv[d] += (x[i * kD + d] - pm[d]) * (x[i * kD + d] - pm[d]) / double(N);
  std::vector<double> out(kC);
  for (int c = 0; c < kC; ++c) {
    std::vector<double> mu(kD, 0), v(kD, 0);
    double n = 0;
    for (size_t i = 0; i < N; ++i) n += y[i] == c;
    for (size_t i = 0; i < N; ++i)
      if (y[i] == c)
        for (int d = 0; d < kD; ++d) mu[d] += x[i * kD + d] / n;
    for (size_t i = 0; i < N; ++i)
      if (y[i] == c)
        for (int d = 0; d < kD; ++d) v[d] += (x[i * kD + d] - mu[d]) * (x[i * kD + d] - mu[d]) / n;
    double s = 0;
    for (int d = 0; d < kD; ++d) {
      const double m = n > 0 ? (n * mu[d] + r * pm[d]) / (n + r) : pm[d];
      const double second = n > 0 ? (n * (v[d] + mu[d] * mu[d]) + r * (pv[d] + pm[d] * pm[d])) / (n + r) : 0.0;
      const double var = std::max(n > 0 ? second - m * m : pv[d], floor * pv[d]);
      s += -(z[d] - m) * (z[d] - m) / (2 * var) - 0.5 * std::log(var);
    }
    out[c] = w * s;
  }
  return out;
}

}  // namespace

TEST(GaussianHead, IsTheWeightedGaussianLogLikelihood) {
  std::vector<float> x;
  std::vector<int32_t> y;
  frames(x, y);
  GaussianStats st(kC, kD);
  st.add(x.data(), y.data(), static_cast<int64_t>(y.size()), "frames");
  EXPECT_EQ(st.frames, 60);
  const double w = 0.7, floor = 0.01;
  for (const double r : {0.0, 5.0, kGaussianPriorFrames}) {  // 0: the ML Gaussians
    const GaussianHead h = gaussian_head(st, w, floor, r);
    EXPECT_EQ(h.empty_classes, 1);
    ASSERT_EQ(h.weight.size(), size_t(kC) * 2 * kD);
    for (const std::vector<double>& z : {std::vector<double>{0.1, -0.4, 1.2}, std::vector<double>{2.5, 3.0, 1.5}}) {
      const std::vector<double> want = oracle_scores(x, y, w, floor, r, z);
      std::vector<float> zf(z.begin(), z.end()), got(kC, 0.f);
      add_gaussian_scores<float>(h.weight.data(), h.bias.data(), kC, kD, zf.data(), got.data());
      for (int c = 0; c < kC; ++c)
        EXPECT_NEAR(got[c], want[c], 1e-4 * (1.0 + std::abs(want[c]))) << "class " << c << ", prior " << r;
    }
  }
  const GaussianHead h = gaussian_head(st, w, floor);
  // merge: two halves give the head of the whole
  GaussianStats a(kC, kD), b(kC, kD);
  a.add(x.data(), y.data(), 30, "first half");
  b.add(x.data() + 30 * kD, y.data() + 30, 30, "second half");
  a.merge(b);
  const GaussianHead hm = gaussian_head(a, w, floor);
  for (size_t i = 0; i < h.weight.size(); ++i) EXPECT_NEAR(hm.weight[i], h.weight[i], 1e-5 * (1 + std::abs(h.weight[i])));
}

// A class of 2 frames: without the prior a needle (its variance at the floor, its log-likelihood at its own
// mean far above the pooled Gaussian's); with the prior of 16 frames within a few percent of the pooled Gaussian.
TEST(GaussianHead, ThePriorTurnsAFewFramesIntoNearlyThePooledGaussian) {
  std::vector<float> x;
  std::vector<int32_t> y;
  frames(x, y);
  const float rare[2 * kD] = {0.30f, 0.31f, 0.29f, 0.31f, 0.30f, 0.30f};
  const int32_t two[2] = {2, 2};
  GaussianStats st(kC, kD);
  st.add(x.data(), y.data(), static_cast<int64_t>(y.size()), "frames");
  st.add(rare, two, 2, "rare");
  GaussianStats pooled(1, kD);  // every frame as one class: the pooled Gaussian
  const std::vector<int32_t> zeros(y.size(), 0);
  pooled.add(x.data(), zeros.data(), static_cast<int64_t>(y.size()), "frames");
  pooled.add(rare, zeros.data(), 2, "rare");
  const GaussianHead p = gaussian_head(pooled, 1.0, 0.01, 0.0);
  const float at[kD] = {0.3f, 0.3f, 0.3f};
  float pooled_score = 0, ml = 0, map = 0;
  add_gaussian_scores<float>(p.weight.data(), p.bias.data(), 1, kD, at, &pooled_score);
  std::vector<float> s0(kC, 0.f), s16(kC, 0.f);
  const GaussianHead h0 = gaussian_head(st, 1.0, 0.01, 0.0), h16 = gaussian_head(st, 1.0);
  add_gaussian_scores<float>(h0.weight.data(), h0.bias.data(), kC, kD, at, s0.data());
  add_gaussian_scores<float>(h16.weight.data(), h16.bias.data(), kC, kD, at, s16.data());
  ml = s0[2], map = s16[2];
  EXPECT_GT(ml - pooled_score, 5.0) << "the ML Gaussian of 2 frames is a needle at its mean";
  EXPECT_LT(std::abs(map - pooled_score), 0.6) << "with the prior it is close to the pooled Gaussian";
  EXPECT_EQ(h16.empty_classes, 0);
}

TEST(GaussianHead, RefusesWhatItCannotEstimate) {
  GaussianStats st(kC, kD);
  EXPECT_THROW(gaussian_head(st, 0.5), std::invalid_argument);  // no frames
  const std::vector<float> x(kD, 0.f);
  const int32_t bad = kC;
  try {
    st.add(x.data(), &bad, 1, "train/s1/u1");
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("train/s1/u1: frame 0 has class 4, outside [0, 4)"), std::string::npos)
        << e.what();
  }
  const int32_t ok = 1;
  st.add(x.data(), &ok, 1, "u");
  EXPECT_THROW(gaussian_head(st, 0.0), std::invalid_argument);
  EXPECT_THROW(gaussian_head(st, 0.5, 0.0), std::invalid_argument);
  EXPECT_THROW(gaussian_head(st, 0.5, 0.01, -1.0), std::invalid_argument);
  EXPECT_NO_THROW(gaussian_head(st, 0.5));
}

namespace {

testsupport::Tiny tiny_with_head() {
  testsupport::Tiny tc(true, false);
  tc.dims.gaussian = true;
  return tc;
}

// The head estimated from the tiny batch's own frames and labels, at weight 0.4, into params.
void install_head(const ParamLayout& lay, const testsupport::Tiny& tc, std::vector<double>& params) {
  GaussianStats st(tc.dims.num_classes, tc.dims.input_dim);
  for (int b = 0; b < tc.B; ++b) {
    std::vector<float> f(tc.features.begin() + size_t(b) * tc.T * tc.dims.input_dim,
                         tc.features.begin() + size_t(b + 1) * tc.T * tc.dims.input_dim);
    st.add(f.data(), tc.labels.data() + size_t(b) * tc.T, tc.lengths[b], "tiny");
  }
  const GaussianHead h = gaussian_head(st, 0.4);
  std::copy(h.weight.begin(), h.weight.end(), lay.crf().gaussian_weight.in(params));
  std::copy(h.bias.begin(), h.bias.end(), lay.crf().gaussian_bias.in(params));
}

// params of `with` restricted to the tensors of `without` (same names).
std::vector<double> without_head(const ParamLayout& with, const ParamLayout& without, const std::vector<double>& p) {
  std::vector<double> out;
  for (const ParamInfo& q : without.params()) {
    const ParamInfo& r = with.get(q.name);
    out.insert(out.end(), p.begin() + r.offset, p.begin() + r.offset + r.size);
  }
  return out;
}

}  // namespace

TEST(GaussianModel, LayoutPutsTheHeadRightAfterTheProjectionBias) {
  ModelDims d = testsupport::small_dims();
  const ParamLayout off(d);
  d.gaussian = true;
  const ParamLayout on(d);
  const CrfParamView& v = on.crf();
  EXPECT_EQ(on.total(), off.total() + size_t(9) * 2 * 13 + 9);
  EXPECT_EQ(v.gaussian_weight.offset, v.projection_bias.offset + v.projection_bias.size);
  EXPECT_EQ(v.gaussian_bias.offset, v.gaussian_weight.offset + v.gaussian_weight.size);
  EXPECT_EQ(on.get("crf.gaussian_projection.weight").shape, (std::vector<int64_t>{9, 26}));
  StepOptions o;
  HeldRange h = held_parameters(on, o);  // the projection bias and the head: one range
  EXPECT_EQ(h.begin, v.projection_bias.offset);
  EXPECT_EQ(h.end, v.gaussian_bias.offset + v.gaussian_bias.size);
  o.frame_ce_weight = 0.5;  // the bias trains, the head stays held
  h = held_parameters(on, o);
  EXPECT_EQ(h.begin, v.gaussian_weight.offset);
  EXPECT_EQ(h.end, v.gaussian_bias.offset + v.gaussian_bias.size);
  EXPECT_TRUE(held_parameters(off, o).empty());
  EXPECT_EQ(dims_json(off.dims()).find("gaussian_head"), std::string::npos);  // checkpoints without it: as before
  EXPECT_NE(dims_json(d).find("\"gaussian_head\":true"), std::string::npos);
}

// A zero head adds 0: the loss is the model without it, bitwise.
TEST(GaussianModel, ZeroHeadIsTheModelWithoutIt) {
  testsupport::Tiny with = tiny_with_head(), without(true, false);
  Network<double> nw(with.dims), no(without.dims);
  const std::vector<double> pw = testsupport::tiny_params(nw);  // init_params leaves the head at 0
  const std::vector<double> pn = without_head(nw.layout(), no.layout(), pw);
  EXPECT_EQ(testsupport::total_loss(nw, pw, with, with.features, nullptr, nullptr),
            testsupport::total_loss(no, pn, without, without.features, nullptr, nullptr));
}

// With a head, the scores are the projection's plus the Gaussian log-likelihood written out (padding rows 0).
TEST(GaussianModel, ScoresAreTheProjectionPlusTheGaussian) {
  testsupport::Tiny with = tiny_with_head(), without(true, false);
  Network<double> nw(with.dims), no(without.dims);
  std::vector<double> pw = testsupport::tiny_params(nw);
  install_head(nw.layout(), with, pw);
  const std::vector<double> pn = without_head(nw.layout(), no.layout(), pw);
  BatchInput<double> in;
  in.B = with.B;
  in.T = with.T;
  in.features = with.features;
  in.lengths = with.lengths;
  Activations<double> aw, an;
  nw.forward(pw, in, 0.0, nullptr, aw);
  no.forward(pn, in, 0.0, nullptr, an);
  const int C = with.dims.num_classes, D = with.dims.input_dim;
  const CrfParamView& v = nw.layout().crf();
  double spread = 0;
  for (int b = 0; b < with.B; ++b)
    for (int t = 0; t < with.T; ++t)
      for (int c = 0; c < C; ++c) {
        const int64_t row = int64_t(t) * with.B + b;
        if (t >= with.lengths[b]) {
          EXPECT_EQ(aw.scores(row, c), 0.0);
          continue;
        }
        // the head's weights as a Gaussian: v = -w / (2 W[c][d]), mu = W[c][D + d] v / w
        const double w = 0.4;
        double g = 0;
        for (int d = 0; d < D; ++d) {
          const double var = -w / (2 * v.gaussian_weight.in(pw)[size_t(c) * 2 * D + d]);
          const double mu = v.gaussian_weight.in(pw)[size_t(c) * 2 * D + D + d] * var / w;
          const double xv = with.features[(size_t(b) * with.T + t) * D + d];
          g += w * (-(xv - mu) * (xv - mu) / (2 * var) - 0.5 * std::log(var));
        }
        EXPECT_NEAR(aw.scores(row, c), an.scores(row, c) + g, 1e-5 * (1 + std::abs(g))) << b << " " << t << " " << c;
        spread = std::max(spread, std::abs(g));
      }
  EXPECT_GT(spread, 0.1);  // the head is not negligible here
  // BatchInput::head_features (a masked training batch's unmasked features): the head reads them, the
  // network the features; the scores are the projection of the features plus the head of head_features
  BatchInput<double> masked = in;
  masked.head_features = in.features;
  for (size_t i = 0; i < masked.features.size(); i += 4) masked.features[i] = 0.0;
  Activations<double> am, an2;
  nw.forward(pw, masked, 0.0, nullptr, am);
  BatchInput<double> plain = masked;
  plain.head_features.clear();
  no.forward(pn, plain, 0.0, nullptr, an2);
  for (int b = 0; b < with.B; ++b)
    for (int t = 0; t < with.lengths[b]; ++t)
      for (int c = 0; c < C; ++c) {
        const int64_t row = int64_t(t) * with.B + b;  // the head's share as in the unmasked forward
        EXPECT_NEAR(am.scores(row, c) - an2.scores(row, c), aw.scores(row, c) - an.scores(row, c), 1e-9);
      }
  EXPECT_FALSE(am.head_reads_features);
  EXPECT_TRUE(aw.head_reads_features);
}

// Finite differences of the float64 network: every trained parameter and the features (with the head's path);
// the head's own entries get a zero gradient (held: its values come from the re-estimation).
TEST(GaussianModel, FiniteDifferencesWithTheHeadHeld) {
  testsupport::Tiny tc = tiny_with_head();
  Network<double> net(tc.dims);
  std::vector<double> params = testsupport::tiny_params(net);
  install_head(net.layout(), tc, params);
  std::vector<double> grad, dfeat;
  ASSERT_TRUE(std::isfinite(testsupport::total_loss(net, params, tc, tc.features, &grad, &dfeat)));
  const CrfParamView& v = net.layout().crf();
  const size_t h0 = v.gaussian_weight.offset, h1 = v.gaussian_bias.offset + v.gaussian_bias.size;
  const double h = 1e-6;
  for (const ParamInfo& p : net.layout().params())
    for (size_t k = 0; k < p.size; ++k) {
      const size_t i = p.offset + k;
      if (i >= h0 && i < h1) {
        EXPECT_EQ(grad[i], 0.0) << p.name;
        continue;
      }
      std::vector<double> pp = params, pm = params;
      pp[i] += h;
      pm[i] -= h;
      const double fd = (testsupport::total_loss(net, pp, tc, tc.features, nullptr, nullptr) -
                         testsupport::total_loss(net, pm, tc, tc.features, nullptr, nullptr)) / (2 * h);
      EXPECT_LE(std::abs(grad[i] - fd), 1e-6 * (1.0 + std::abs(fd))) << p.name << "[" << k << "]";
    }
  double head_path = 0;  // how much of d features the head contributes
  testsupport::Tiny plain(true, false);
  Network<double> no(plain.dims);
  std::vector<double> g0, df0;
  testsupport::total_loss(no, without_head(net.layout(), no.layout(), params), plain, plain.features, &g0, &df0);
  for (size_t idx = 0; idx < tc.features.size(); ++idx) {
    std::vector<double> fp = tc.features, fm = tc.features;
    fp[idx] += h;
    fm[idx] -= h;
    const double fd = (testsupport::total_loss(net, params, tc, fp, nullptr, nullptr) -
                       testsupport::total_loss(net, params, tc, fm, nullptr, nullptr)) / (2 * h);
    EXPECT_LE(std::abs(dfeat[idx] - fd), 1e-6 * (1.0 + std::abs(fd))) << "features[" << idx << "]";
    head_path = std::max(head_path, std::abs(dfeat[idx] - df0[idx]));
  }
  EXPECT_GT(head_path, 1e-2);
}

// Two CPU training steps: every trained entry equals AdamW::update of the step's gradient; the head's entries
// keep their values and zero moments.
TEST(GaussianModel, TheOptimizerHoldsTheHead) {
  ModelDims d = testsupport::small_dims();
  d.gaussian = true;
  const ParamLayout layout(d);
  std::vector<float> p0 = testsupport::random_model_params(d, 5, 0.5f);
  const CrfParamView& v = layout.crf();
  for (size_t k = 0; k < v.gaussian_weight.size; ++k) v.gaussian_weight.in(p0)[k] = k % 2 ? 0.05f : -0.1f;
  for (size_t k = 0; k < v.gaussian_bias.size; ++k) v.gaussian_bias.in(p0)[k] = 0.2f * float(k);
  const Batch batch = testsupport::random_model_batch(d, 3, 11, 6);
  ExecutorOptions xo;
  xo.threads = 1;
  auto exec = make_executor(Device::cpu, d, xo);
  AdamW opt;
  opt.reset(p0.size());
  StepOptions o;
  o.lr = 1e-2;
  o.clip_norm = 1.0;
  o.crf_reg = 1e-3;
  exec->set_state(p0, opt);
  std::vector<float> want = p0;
  AdamW want_opt = opt;
  const std::vector<UpdateRange> ranges = step_update_ranges(layout, o);
  for (int step = 1; step <= 2; ++step) {
    o.step = step;
    std::vector<float> grad;
    exec->gradients(batch, o, grad);
    for (size_t i = v.gaussian_weight.offset; i < v.gaussian_bias.offset + v.gaussian_bias.size; ++i)
      ASSERT_EQ(grad[i], 0.f) << "the head got a gradient at " << i;
    clip_global_norm(grad, o.clip_norm);
    want_opt.update(want, grad, ranges);
    exec->train_step(batch, o);
  }
  std::vector<float> got;
  AdamW got_opt;
  exec->get_state(got, got_opt);
  size_t moved = 0;
  for (size_t i = 0; i < p0.size(); ++i) {
    ASSERT_EQ(got[i], want[i]) << "entry " << i;
    ASSERT_EQ(got_opt.m[i], want_opt.m[i]) << i;
    if (i >= v.gaussian_weight.offset && i < v.gaussian_bias.offset + v.gaussian_bias.size) {
      ASSERT_EQ(got[i], p0[i]);
      ASSERT_EQ(got_opt.v[i], 0.f);
    } else if (got[i] != p0[i]) {
      ++moved;
    }
  }
  EXPECT_GT(moved, p0.size() / 2);  // the rest trained
}

TEST(GaussianModel, CheckpointRoundTripAndConfigKey) {
  ModelState s = testsupport::tiny_model_state(false);
  s.dims.gaussian = true;
  const ParamLayout lay(s.dims);
  s.params.resize(lay.total());
  for (size_t i = 0; i < s.params.size(); ++i) s.params[i] = 0.001f * static_cast<float>(i % 997) - 0.3f;
  s.optimizer.reset(s.params.size());
  s.config.crf_gaussian_weight = 0.3;
  const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     ("timitseg_gauss_ckpt_" + std::to_string(::getpid()) + ".safetensors");
  save_checkpoint(path.string(), s);
  const ModelState r = load_checkpoint(path.string());
  std::filesystem::remove(path);
  EXPECT_TRUE(r.dims.gaussian);
  EXPECT_EQ(r.config.crf_gaussian_weight, 0.3);
  EXPECT_EQ(r.params, s.params);
  for (const char* b : {"crf.gaussian_weight=-1", "crf.gaussian_weight=0", "crf.gaussian_head=maybe"}) {
    config::Config bad;
    bad.set(b, "test");
    EXPECT_THROW(bad.validate(), std::invalid_argument) << b;
  }
  config::Config c;
  EXPECT_FALSE(c.gaussian_head_enabled(true));  // off by default
  c.set("crf.gaussian_head=auto", "test");
  EXPECT_TRUE(c.gaussian_head_enabled(true));
  EXPECT_FALSE(c.gaussian_head_enabled(false));  // a time-trained run keeps the model without it
  c.set("crf.gaussian_head=true", "test");
  EXPECT_TRUE(c.gaussian_head_enabled(false));
  EXPECT_THROW(c.set_on_resume("crf.gaussian_weight=0.5", "o"), std::invalid_argument);
  EXPECT_THROW(c.set_on_resume("crf.gaussian_head=false", "o"), std::invalid_argument);
}
