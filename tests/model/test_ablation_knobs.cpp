// The ablation knobs of issue 14, each against an independent oracle:
//   train.lr_schedule: cosine_epoch  the lr of every update against torch's
//                                    CosineAnnealingLR(T_max = epochs) stepped
//                                    once per epoch, in torch's own recursive form
//   crf.init_scale                   statistics of transition / duration_bias
//                                    ~ N(0, scale^2); everything else as scale 0
//   model.dropout placement          (after the input Linear and between BiLSTM
//                                    layers only) is tested by test_network.cpp
//   crf.duration_init: data          the duration prior against counts of the CRF
//                                    library's own gold segmentation (crf::gold_segments)
//                                    and a hand-counted example; the end-to-end start
//                                    value is tested by test_train_e2e.cpp
//   crf.lr_scale                     AdamW's two groups against two independent
//                                    optimizers (torch's parameter groups) and the CPU
//                                    executor's step against AdamW on its own gradient
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "crf/backend.h"
#include "crf/segments.h"
#include "config/config.h"
#include "model/make_executor.h"
#include "model/model.h"
#include "model/optim.h"
#include "model/params.h"
#include "tests/support/model_problems.h"

using namespace timitseg::model;

using namespace timitseg::config;

namespace {

// torch.optim.lr_scheduler.CosineAnnealingLR.get_lr (recursive form, torch 2.x),
// stepped once per epoch: the lr used by each epoch 0..epochs-1.
std::vector<double> torch_cosine_annealing_per_epoch(double base_lr, double eta_min, int T_max, int epochs) {
  const double pi = 3.14159265358979323846;
  std::vector<double> out;
  double lr = base_lr;
  for (int last_epoch = 0; last_epoch < epochs; ++last_epoch) {
    if (last_epoch == 0) {
      lr = base_lr;
    } else if ((last_epoch - 1 - T_max) % (2 * T_max) == 0) {
      lr = lr + (base_lr - eta_min) * (1 - std::cos(pi / T_max)) / 2;
    } else {
      lr = (1 + std::cos(pi * last_epoch / T_max)) / (1 + std::cos(pi * (last_epoch - 1) / T_max)) * (lr - eta_min) +
           eta_min;
    }
    out.push_back(lr);
  }
  return out;
}

std::string write_yaml(const std::string& name, const std::string& text) {
  const auto p = std::filesystem::temp_directory_path() / ("timitseg_knobs_" + name + "_" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(p) << text;
  return p.string();
}

ModelDims dims_of(int input_dim, int hidden_dim, int num_layers, int num_classes, int max_duration) {
  ModelDims d;
  d.input_dim = input_dim;
  d.hidden_dim = hidden_dim;
  d.num_layers = num_layers;
  d.num_classes = num_classes;
  d.max_duration = max_duration;
  return d;
}

// Each KEY=VALUE is refused with an error naming KEY.
void expect_each_rejected(const std::string& config, std::initializer_list<const char*> bad_sets) {
  for (const char* bad : bad_sets) {
    try {
      Config::load(config, {bad});
      ADD_FAILURE() << bad << " was accepted";
    } catch (const std::invalid_argument& e) {
      const std::string key = std::string(bad).substr(0, std::string(bad).find('='));
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  }
}

}  // namespace

TEST(AblationKnobs, CosineEpochMatchesTorchSteppedPerEpoch) {
  const double lr = 0.005, min_lr = 0.0002;
  const int epochs = 20, per_epoch = 7;
  const int64_t total = int64_t(epochs) * per_epoch;
  const std::vector<double> torch_lr = torch_cosine_annealing_per_epoch(lr, min_lr, epochs, epochs);
  for (int64_t u = 0; u < total; ++u) {
    const int e = static_cast<int>(u / per_epoch);
    EXPECT_NEAR(scheduled_lr(LrSchedule::cosine_epoch, lr, min_lr, u, total, per_epoch), torch_lr[e], 1e-15)
        << "update " << u << " (epoch " << e << ")";
  }
  // Every update of an epoch shares one rate; epoch 0 uses lr; the last epoch
  // min_lr + (lr - min_lr)(1 + cos(pi 19/20))/2, well above min_lr.
  EXPECT_DOUBLE_EQ(scheduled_lr(LrSchedule::cosine_epoch, lr, min_lr, 6, total, per_epoch), lr);
  EXPECT_EQ(scheduled_lr(LrSchedule::cosine_epoch, lr, min_lr, 7, total, per_epoch),
            scheduled_lr(LrSchedule::cosine_epoch, lr, min_lr, 13, total, per_epoch));
  EXPECT_NEAR(scheduled_lr(LrSchedule::cosine_epoch, lr, min_lr, total - 1, total, per_epoch),
              min_lr + (lr - min_lr) * (1 + std::cos(M_PI * 19 / 20)) / 2, 1e-15);
  // the per-update cosine differs from it inside an epoch
  EXPECT_NE(scheduled_lr(LrSchedule::cosine, lr, min_lr, 13, total), scheduled_lr(LrSchedule::cosine_epoch, lr, min_lr, 13, total, per_epoch));
  // updates must be whole epochs
  EXPECT_THROW(scheduled_lr(LrSchedule::cosine_epoch, lr, min_lr, 0, total + 1, per_epoch), std::invalid_argument);
  EXPECT_THROW(scheduled_lr(LrSchedule::cosine_epoch, lr, min_lr, 0, total, 0), std::invalid_argument);
}

TEST(AblationKnobs, ConfigKeys) {
  const Config d = Config::load(write_yaml("d", "data:\n  workdir: w\ntrain:\n  run_dir: r\n"), {});
  EXPECT_EQ(d.crf_init_scale, 0.0);  // defaults unchanged
  EXPECT_EQ(d.train_lr_schedule, LrSchedule::cosine);
  const Config c = Config::load(write_yaml("c", "data:\n  workdir: w\ntrain:\n  run_dir: r\n"),
                                {"crf.init_scale=0.1", "train.lr_schedule=cosine_epoch"});
  EXPECT_EQ(c.crf_init_scale, 0.1);
  EXPECT_EQ(c.train_lr_schedule, LrSchedule::cosine_epoch);
  // round trip through the resolved YAML and JSON (checkpoint metadata)
  const Config y = Config::load(write_yaml("y", c.to_yaml()), {});
  EXPECT_EQ(y.crf_init_scale, 0.1);
  EXPECT_EQ(y.train_lr_schedule, LrSchedule::cosine_epoch);
  EXPECT_EQ(Config::from_json(c.to_json(), "ckpt").crf_init_scale, 0.1);
  const std::string base = write_yaml("b", "data:\n  workdir: w\ntrain:\n  run_dir: r\n");
  expect_each_rejected(base, {"crf.init_scale=-0.1", "crf.init_scale=11", "train.lr_schedule=cosine_epochs"});
}

TEST(AblationKnobs, CrfInitScaleStatistics) {
  const ParamLayout lay(dims_of(39, 16, 1, 39, 30));
  std::vector<double> zero, scaled, again, other;
  std::mt19937_64 r0(7), r1(7), r2(7), r3(8);
  init_params(lay, r0, zero, 0.0);
  init_params(lay, r1, scaled, 0.1);
  init_params(lay, r2, again, 0.1);
  init_params(lay, r3, other, 0.1);
  EXPECT_EQ(scaled, again);  // seeded
  std::vector<double> crf;   // transition [C][C] then duration_bias [K][C]
  for (const ParamInfo& p : lay.params()) {
    for (size_t i = p.offset; i < p.offset + p.size; ++i) {
      if (p.name == "crf.transition" || p.name == "crf.duration_bias") {
        EXPECT_EQ(zero[i], 0.0) << p.name;  // scale 0: zeros as before
        crf.push_back(scaled[i]);
      } else {
        // encoder and projection are drawn first: identical to scale 0; start/end zero
        EXPECT_EQ(scaled[i], zero[i]) << p.name << "[" << i - p.offset << "]";
        if (p.name == "crf.start" || p.name == "crf.end") EXPECT_EQ(scaled[i], 0.0);
      }
    }
  }
  ASSERT_EQ(crf.size(), size_t(39 * 39 + 30 * 39));
  const double n = static_cast<double>(crf.size());
  double mean = 0, m2 = 0, m4 = 0;
  for (double x : crf) mean += x / n;
  for (double x : crf) m2 += (x - mean) * (x - mean) / n;
  for (double x : crf) m4 += std::pow(x - mean, 4) / n;
  const double sd = std::sqrt(m2);
  // N(0, 0.01): standard errors 0.1/sqrt(n) = 0.0019 for the mean, ~0.0014 for the sd
  EXPECT_NEAR(mean, 0.0, 4 * 0.1 / std::sqrt(n));
  EXPECT_NEAR(sd, 0.1, 4 * 0.1 / std::sqrt(2 * n));
  EXPECT_NEAR(m4 / (m2 * m2), 3.0, 0.4);  // kurtosis of a normal (a uniform has 1.8)
  // fraction within one and two standard deviations (0.6827, 0.9545)
  const double in1 = std::count_if(crf.begin(), crf.end(), [](double x) { return std::abs(x) < 0.1; }) / n;
  const double in2 = std::count_if(crf.begin(), crf.end(), [](double x) { return std::abs(x) < 0.2; }) / n;
  EXPECT_NEAR(in1, 0.6827, 0.04);
  EXPECT_NEAR(in2, 0.9545, 0.02);
  // another seed gives other values
  size_t differ = 0;
  for (const ParamInfo& p : lay.params())
    if (p.name == "crf.transition")
      for (size_t i = p.offset; i < p.offset + p.size; ++i) differ += scaled[i] != other[i];
  EXPECT_GT(differ, size_t(39 * 39 - 5));
  EXPECT_THROW(init_params(lay, r0, zero, -1.0), std::invalid_argument);
}

TEST(AblationKnobs, DurationPriorByHand) {
  // K = 2, two labels: label 0 runs of 5 (pieces 2, 2, 1) and 1; label 1 one run of 2
  const DurationPrior p = duration_log_prior({{0, 0, 0, 0, 0, 1, 1, 0}}, 2, 2);
  EXPECT_EQ(p.segments, 5);
  ASSERT_EQ(p.log_p.size(), 4u);  // [K][C]
  // label 0: n[1] = 2, n[2] = 2 -> (2+1)/(4+2), (2+1)/(4+2); label 1: n[1] = 0, n[2] = 1 -> 1/3, 2/3
  EXPECT_DOUBLE_EQ(p.log_p[0 * 2 + 0], std::log(0.5));
  EXPECT_DOUBLE_EQ(p.log_p[1 * 2 + 0], std::log(0.5));
  EXPECT_DOUBLE_EQ(p.log_p[0 * 2 + 1], std::log(1.0 / 3.0));
  EXPECT_DOUBLE_EQ(p.log_p[1 * 2 + 1], std::log(2.0 / 3.0));
  // K = 1 (linear CRF): every frame is a segment, so log p(1 | c) = log 1 = 0
  const DurationPrior lin = duration_log_prior({{0, 0, 1}, {2}}, 1, 3);
  EXPECT_EQ(lin.segments, 4);
  for (double x : lin.log_p) EXPECT_EQ(x, 0.0);
  EXPECT_THROW(duration_log_prior({{0, 3}}, 2, 3), std::invalid_argument);   // label outside [0, C)
  EXPECT_THROW(duration_log_prior({{0, -1}}, 2, 3), std::invalid_argument);
  EXPECT_THROW(duration_log_prior({{0}}, 0, 3), std::invalid_argument);
}

TEST(AblationKnobs, DurationPriorCountsTheGoldSegmentation) {
  // random runs (up to 3K frames, so pieces of K and remainders occur) against
  // counts of crf::gold_segments, the segmentation the loss scores
  const int K = 7, C = 5;
  std::mt19937_64 rng(5);
  std::vector<std::vector<int32_t>> utts(20);
  for (auto& y : utts) {
    const int runs = 1 + static_cast<int>(rng() % 12);
    for (int r = 0; r < runs; ++r) {
      const int32_t c = static_cast<int32_t>(rng() % C);
      const int len = 1 + static_cast<int>(rng() % (3 * K));
      y.insert(y.end(), len, c);
    }
  }
  std::vector<double> n(K * C, 0.0), per(C, 0.0);
  int64_t total = 0;
  for (const auto& y : utts)
    for (const timitseg::crf::Segment& s : timitseg::crf::gold_segments(y.data(), static_cast<int32_t>(y.size()), K)) {
      n[(s.duration - 1) * C + s.label] += 1;
      per[s.label] += 1;
      ++total;
    }
  const DurationPrior p = duration_log_prior(utts, K, C);
  EXPECT_EQ(p.segments, total);
  for (int c = 0; c < C; ++c) {
    double sum = 0;
    for (int d = 0; d < K; ++d) {
      EXPECT_NEAR(p.log_p[d * C + c], std::log((n[d * C + c] + 1) / (per[c] + K)), 1e-15) << "d " << d + 1 << " c " << c;
      sum += std::exp(p.log_p[d * C + c]);
    }
    EXPECT_NEAR(sum, 1.0, 1e-12) << "label " << c;
  }
}

TEST(AblationKnobs, LrScaleIsTwoTorchParameterGroups) {
  // AdamW::update(..., split, s) == an optimizer on [0, split) with lr and one
  // on [split, n) with lr * s (torch.optim.AdamW with two parameter groups)
  const size_t n = 11, split = 7;
  const double lr = 0.003, s = 30.0;
  std::mt19937_64 rng(9);
  std::normal_distribution<float> n01(0.f, 1.f);
  std::vector<float> p(n), a, b;
  for (float& x : p) x = n01(rng);
  a.assign(p.begin(), p.begin() + split);
  b.assign(p.begin() + split, p.end());
  AdamW both, first, second;
  for (AdamW* o : {&both, &first, &second}) o->weight_decay = 0.01;
  both.reset(n);
  first.reset(split);
  second.reset(n - split);
  std::vector<float> unscaled = p;
  AdamW plain;
  plain.weight_decay = 0.01;
  plain.reset(n);
  for (int step = 0; step < 4; ++step) {
    std::vector<float> g(n);
    for (float& x : g) x = n01(rng);
    if (step == 0) {  // the first step by its formula: p (1 - lr_g wd) - lr_g g / (|g| + eps)
      const std::vector<float> before = p;
      both.update(p, g, lr, split, s);
      for (size_t i = 0; i < n; ++i) {
        const double lg = i < split ? lr : lr * s;
        EXPECT_NEAR(p[i], before[i] * (1 - lg * 0.01) - lg * g[i] / (std::abs(g[i]) + 1e-8), 1e-6) << i;
      }
    } else {
      both.update(p, g, lr, split, s);
    }
    first.update(a, std::vector<float>(g.begin(), g.begin() + split), lr);
    second.update(b, std::vector<float>(g.begin() + split, g.end()), lr * s);
    plain.update(unscaled, g, lr, split, 1.0);
  }
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(p[i], i < split ? a[i] : b[i - split]) << i;  // bitwise
  EXPECT_EQ(both.step, 4);
  // scale 1 is the single group of before, bitwise, and leaves the first group as with any scale
  for (size_t i = 0; i < split; ++i) EXPECT_EQ(unscaled[i], p[i]) << i;
}

TEST(AblationKnobs, CpuExecutorAppliesLrScaleToTheCrfStructure) {
  const ModelDims d = dims_of(13, 16, 1, 7, 5);
  const ParamLayout lay(d);
  const std::vector<float> params = timitseg::testsupport::random_model_params(d, 4, 0.5f);
  const Batch batch = timitseg::testsupport::random_model_batch(d, 4, 30, 6);
  StepOptions o;
  o.lr = 2e-3;
  o.dropout = 0.0;
  o.clip_norm = 0.0;  // the update below uses the unclipped gradient
  o.crf_reg = 1e-3;
  o.crf_lr_scale = 25.0;
  AdamW opt;
  opt.weight_decay = 1e-5;
  opt.reset(params.size());
  ExecutorOptions xo;
  xo.threads = 1;
  auto ex = make_executor(Device::cpu, d, xo);
  ex->set_state(params, opt);
  std::vector<float> g;
  ex->gradients(batch, o, g);
  ex->train_step(batch, o);
  std::vector<float> got;
  AdamW after;
  ex->get_state(got, after);
  std::vector<float> want = params;
  opt.update(want, g, o.lr, lay.crf_structure_begin(), o.crf_lr_scale);
  // without the frame CE crf.projection.bias is held at its value (docs/crf.md "Parameters that are not trained")
  const ParamInfo& pb = lay.get("crf.projection.bias");
  std::copy(params.begin() + pb.offset, params.begin() + pb.offset + pb.size, want.begin() + pb.offset);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << i;
  // the group is exactly crf.transition, crf.duration_bias, crf.start, crf.end, the last tensors
  EXPECT_EQ(lay.crf_structure_begin(), lay.get("crf.projection.bias").offset + lay.get("crf.projection.bias").size);
  EXPECT_EQ(lay.get("crf.end").offset + lay.get("crf.end").size, lay.total());
  // and it moved 25 times as far as the projection's first step would (|step| = lr for |g| >> eps)
  const ParamInfo& tr = lay.get("crf.transition");
  int checked = 0;
  for (size_t i = tr.offset; i < tr.offset + tr.size; ++i)
    if (std::abs(g[i]) > 1e-3) {
      EXPECT_NEAR(std::abs(got[i] - params[i] * (1 - 25 * 2e-3 * 1e-5)), 25 * 2e-3, 1e-5) << i;
      ++checked;
    }
  EXPECT_GT(checked, 10);
}

TEST(AblationKnobs, DurationInitAndLrScaleConfigKeys) {
  const std::string base = write_yaml("k", "data:\n  workdir: w\ntrain:\n  run_dir: r\n");
  const Config d = Config::load(base, {});
  EXPECT_EQ(d.crf_duration_init, DurationInit::random);  // defaults: as before
  EXPECT_EQ(d.crf_lr_scale, 1.0);
  EXPECT_TRUE(d.crf_flat_start);
  const Config c = Config::load(base, {"crf.duration_init=data", "crf.lr_scale=30", "crf.flat_start=false"});
  EXPECT_FALSE(c.crf_flat_start);
  EXPECT_EQ(c.crf_duration_init, DurationInit::data);
  EXPECT_EQ(c.crf_lr_scale, 30.0);
  const Config y = Config::load(write_yaml("ky", c.to_yaml()), {});
  EXPECT_EQ(y.crf_duration_init, DurationInit::data);
  EXPECT_EQ(y.crf_lr_scale, 30.0);
  EXPECT_FALSE(y.crf_flat_start);
  const Config j = Config::from_json(c.to_json(), "ckpt");
  EXPECT_EQ(j.crf_duration_init, DurationInit::data);
  EXPECT_EQ(j.crf_lr_scale, 30.0);
  EXPECT_FALSE(j.crf_flat_start);
  expect_each_rejected(base, {"crf.duration_init=prior", "crf.flat_start=maybe", "crf.lr_scale=0", "crf.lr_scale=-1", "crf.lr_scale=1001"});
}

TEST(AblationKnobs, PhoneBonusConfigKey) {
  const std::string base = write_yaml("pb", "data:\n  workdir: w\ntrain:\n  run_dir: r\n");
  EXPECT_EQ(Config::load(base, {}).crf_phone_bonus, 0.0);  // default: plain Viterbi
  const Config c = Config::load(base, {"crf.phone_bonus=-1.25"});
  EXPECT_EQ(c.crf_phone_bonus, -1.25);
  EXPECT_EQ(Config::load(write_yaml("pby", c.to_yaml()), {}).crf_phone_bonus, -1.25);
  EXPECT_EQ(Config::from_json(c.to_json(), "ckpt").crf_phone_bonus, -1.25);
  expect_each_rejected(base, {"crf.phone_bonus=101", "crf.phone_bonus=-100.5", "crf.phone_bonus=.nan",
                              "crf.phone_bonus=many"});
}
