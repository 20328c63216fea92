// The ablation knobs of issue 14, each against an independent oracle:
//   train.lr_schedule: cosine_epoch  the lr of every update against torch's
//                                    CosineAnnealingLR(T_max = epochs) stepped
//                                    once per epoch, in torch's own recursive form
//   crf.init_scale                   statistics of transition / duration_bias
//                                    ~ N(0, scale^2); everything else as scale 0
//   model.dropout placement          (after the input Linear and between BiLSTM
//                                    layers only) is tested by test_network.cpp
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/optim.h"
#include "model/params.h"

using namespace timitseg::model;

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

}  // namespace

TEST(AblationKnobs, CosineEpochMatchesTorchSteppedPerEpoch) {
  const double lr = 0.005, min_lr = 0.0002;
  const int epochs = 20, per_epoch = 7;
  const int64_t total = int64_t(epochs) * per_epoch;
  const std::vector<double> torch_lr = torch_cosine_annealing_per_epoch(lr, min_lr, epochs, epochs);
  for (int64_t u = 0; u < total; ++u) {
    const int e = static_cast<int>(u / per_epoch);
    EXPECT_NEAR(scheduled_lr("cosine_epoch", lr, min_lr, u, total, per_epoch), torch_lr[e], 1e-15)
        << "update " << u << " (epoch " << e << ")";
  }
  // Every update of an epoch shares one rate; epoch 0 uses lr; the last epoch
  // min_lr + (lr - min_lr)(1 + cos(pi 19/20))/2, well above min_lr.
  EXPECT_DOUBLE_EQ(scheduled_lr("cosine_epoch", lr, min_lr, 6, total, per_epoch), lr);
  EXPECT_EQ(scheduled_lr("cosine_epoch", lr, min_lr, 7, total, per_epoch),
            scheduled_lr("cosine_epoch", lr, min_lr, 13, total, per_epoch));
  EXPECT_NEAR(scheduled_lr("cosine_epoch", lr, min_lr, total - 1, total, per_epoch),
              min_lr + (lr - min_lr) * (1 + std::cos(M_PI * 19 / 20)) / 2, 1e-15);
  // the per-update cosine differs from it inside an epoch
  EXPECT_NE(scheduled_lr("cosine", lr, min_lr, 13, total), scheduled_lr("cosine_epoch", lr, min_lr, 13, total, per_epoch));
  // updates must be whole epochs
  EXPECT_THROW(scheduled_lr("cosine_epoch", lr, min_lr, 0, total + 1, per_epoch), std::invalid_argument);
  EXPECT_THROW(scheduled_lr("cosine_epoch", lr, min_lr, 0, total, 0), std::invalid_argument);
}

TEST(AblationKnobs, ConfigKeys) {
  const Config d = Config::load(write_yaml("d", "data:\n  workdir: w\ntrain:\n  run_dir: r\n"), {});
  EXPECT_EQ(d.crf_init_scale, 0.0);  // defaults unchanged
  EXPECT_EQ(d.train_lr_schedule, "cosine");
  const Config c = Config::load(write_yaml("c", "data:\n  workdir: w\ntrain:\n  run_dir: r\n"),
                                {"crf.init_scale=0.1", "train.lr_schedule=cosine_epoch"});
  EXPECT_EQ(c.crf_init_scale, 0.1);
  EXPECT_EQ(c.train_lr_schedule, "cosine_epoch");
  // round trip through the resolved YAML and JSON (checkpoint metadata)
  const Config y = Config::load(write_yaml("y", c.to_yaml()), {});
  EXPECT_EQ(y.crf_init_scale, 0.1);
  EXPECT_EQ(y.train_lr_schedule, "cosine_epoch");
  EXPECT_EQ(Config::from_json(c.to_json(), "ckpt").crf_init_scale, 0.1);
  const std::string base = write_yaml("b", "data:\n  workdir: w\ntrain:\n  run_dir: r\n");
  for (const char* bad : {"crf.init_scale=-0.1", "crf.init_scale=11", "train.lr_schedule=cosine_epochs"}) {
    try {
      Config::load(base, {bad});
      ADD_FAILURE() << bad << " was accepted";
    } catch (const std::invalid_argument& e) {
      const std::string key = std::string(bad).substr(0, std::string(bad).find('='));
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  }
}

TEST(AblationKnobs, CrfInitScaleStatistics) {
  ModelDims dims;
  dims.input_dim = 39;
  dims.hidden_dim = 16;
  dims.num_layers = 1;
  dims.num_classes = 39;
  dims.max_duration = 30;
  const ParamLayout lay(dims);
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
