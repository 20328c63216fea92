// The Gaussian head (crf.gaussian_weight, model/gaussian_head.h) on the GPU
// executor against the CPU executor (the oracle; its network is checked by
// finite differences and the written-out Gaussian in
// tests/model/test_gaussian_head.cpp): same parameters with a head that
// matters, same batch, dropout off: the loss, every gradient (the head's
// entries exactly 0 on both), training steps that leave the head where it
// was, the projection output (--dump-scores), decoding and forced alignment.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "model/model.h"
#include "tests/support/gpu.h"
#include "tests/support/model_problems.h"

using namespace timitseg;
using namespace timitseg::model;

namespace {

ModelDims head_dims() {
  ModelDims d = testsupport::small_dims();
  d.onset = true;
  d.gaussian = true;
  return d;
}

// random_model_params with a Gaussian head of unit-ish variances and means in [-1, 1], at weight 0.3.
std::vector<float> params_with_head(const ModelDims& d, uint64_t seed) {
  std::vector<float> p = testsupport::random_model_params(d, seed, 0.5f);
  const ParamLayout lay(d);
  const CrfParamView& v = lay.crf();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  const int C = d.num_classes, D = d.input_dim;
  const double w = 0.3;
  for (int c = 0; c < C; ++c) {
    double b = 0;
    for (int k = 0; k < D; ++k) {
      const double var = 0.5 + 0.5 * (u(rng) + 1.0), mu = u(rng);
      v.gaussian_weight.in(p)[size_t(c) * 2 * D + k] = static_cast<float>(-0.5 * w / var);
      v.gaussian_weight.in(p)[size_t(c) * 2 * D + D + k] = static_cast<float>(w * mu / var);
      b += -0.5 * mu * mu / var - 0.5 * std::log(var);
    }
    v.gaussian_bias.in(p)[c] = static_cast<float>(w * b);
  }
  return p;
}

StepOptions no_dropout() { return testsupport::no_dropout_step(); }

bool in_head(const ParamLayout& lay, size_t i) {
  const CrfParamView& v = lay.crf();
  return i >= v.gaussian_weight.offset && i < v.gaussian_bias.offset + v.gaussian_bias.size;
}

}  // namespace

TEST(CudaGaussianHead, ScoresAndGradientsAgreeWithCpu) {
  REQUIRE_GPU();
  const ModelDims d = head_dims();
  const ParamLayout layout(d);
  const std::vector<float> params = params_with_head(d, 11);
  const Batch batch = testsupport::random_model_batch(d, 6, 57, 12);
  auto cpu = testsupport::executor_with("cpu", d, params, "cpu");
  std::vector<float> gc, sc;
  const StepResult rc = cpu->gradients(batch, no_dropout(), gc);
  cpu->decode(batch, &sc);
  for (const std::string crf : {"cuda", "cpu"}) {
    auto gpu = testsupport::executor_with("cuda", d, params, crf);
    std::vector<float> gg, sg;
    const StepResult rg = gpu->gradients(batch, no_dropout(), gg);
    EXPECT_NEAR(rg.loss, rc.loss, 1e-4 * std::abs(rc.loss)) << crf;
    gpu->decode(batch, &sg);
    ASSERT_EQ(sg.size(), sc.size());
    double smax = 0;
    for (size_t i = 0; i < sc.size(); ++i) {
      EXPECT_NEAR(sg[i], sc[i], 1e-4 * (1 + std::abs(sc[i]))) << "scores[" << i << "] (crf " << crf << ")";
      smax = std::max(smax, double(std::abs(sc[i])));
    }
    EXPECT_GT(smax, 1.0);  // the head's share is there
    for (const ParamInfo& p : layout.params()) {
      double diff = 0, ref = 0;
      for (size_t i = 0; i < p.size; ++i) {
        if (in_head(layout, p.offset + i)) {
          EXPECT_EQ(gg[p.offset + i], 0.f) << p.name << " (crf " << crf << ")";
          EXPECT_EQ(gc[p.offset + i], 0.f) << p.name;
          continue;
        }
        diff += std::pow(double(gg[p.offset + i]) - gc[p.offset + i], 2);
        ref += std::pow(double(gc[p.offset + i]), 2);
      }
      if (p.name == "crf.projection.bias" || ref == 0) continue;  // 0 in exact arithmetic (centered cumsum)
      EXPECT_LT(std::sqrt(diff) / std::sqrt(ref), 1e-3) << p.name << " (crf " << crf << ")";
    }
  }
}

TEST(CudaGaussianHead, StepsHoldTheHeadAndAlignmentTracksTheCpu) {
  REQUIRE_GPU();
  const ModelDims d = head_dims();
  const ParamLayout lay(d);
  const std::vector<float> params = params_with_head(d, 21);
  auto cpu = testsupport::executor_with("cpu", d, params, "cpu");
  auto gpu = testsupport::executor_with("cuda", d, params, "cuda");
  for (int step = 0; step < 4; ++step) {
    const Batch b = testsupport::random_model_batch(d, 5, 40, 100 + step);
    const StepResult rc = cpu->train_step(b, no_dropout());
    const StepResult rg = gpu->train_step(b, no_dropout());
    EXPECT_NEAR(rg.loss, rc.loss, 1e-3 * std::abs(rc.loss)) << "step " << step;
  }
  std::vector<float> pc, pg;
  AdamW oc, og;
  cpu->get_state(pc, oc);
  gpu->get_state(pg, og);
  for (size_t i = 0; i < params.size(); ++i)
    if (in_head(lay, i)) {
      ASSERT_EQ(pg[i], params[i]) << "the GPU step moved the head at " << i;
      ASSERT_EQ(og.v[i], 0.f);
    }
  // forced alignment of each row's label runs, both executors from the GPU's trained parameters
  const Batch b = testsupport::random_model_batch(d, 4, 33, 7);
  int64_t N = 0;
  std::vector<std::vector<int32_t>> runs(4);
  for (int r = 0; r < 4; ++r) {
    for (int t = 0; t < b.input.lengths[r]; ++t) {
      const int32_t y = b.labels[size_t(r) * b.input.T + t];
      if (runs[r].empty() || runs[r].back() != y) runs[r].push_back(y);
    }
    N = std::max<int64_t>(N, static_cast<int64_t>(runs[r].size()));
  }
  std::vector<int32_t> phones(size_t(4) * N, 0), nph(4);
  for (int r = 0; r < 4; ++r) {
    nph[r] = static_cast<int32_t>(runs[r].size());
    std::copy(runs[r].begin(), runs[r].end(), phones.begin() + size_t(r) * N);
  }
  auto want_exec = testsupport::executor_with("cpu", d, pg, "reference");
  const crf::AlignResult want = want_exec->align(b, N, phones, nph, {});
  for (const std::string crf : {"cuda", "cpu"}) {
    auto g2 = testsupport::executor_with("cuda", d, pg, crf);
    const crf::AlignResult got = g2->align(b, N, phones, nph, {});
    for (size_t i = 0; i < want.score.size(); ++i)
      EXPECT_NEAR(got.score[i], want.score[i], 1e-3 * (1 + std::abs(want.score[i]))) << crf;
    EXPECT_EQ(got.spans, want.spans) << crf;
  }
}
