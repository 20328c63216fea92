// The GPU executor against the CPU executor (the oracle), same parameters and
// batch, dropout off: loss within 1e-4 relative, every parameter gradient
// within 1e-3 relative (norm-wise per tensor), with the cuda CRF backend and
// with a host CRF backend through copies; a few training steps track each
// other; decoding reproduces the segments that the pre-restructuring CPU
// binary wrote for a committed checkpoint (tests/model/fixtures/legacy).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/cuda.h"
#include "common/safetensors.h"
#include "model/cuda/lstm_fused.h"
#include "model/make_executor.h"
#include "model/model.h"
#include "tests/support/model_problems.h"
#include "tests/support/gpu.h"

using timitseg::testsupport::small_dims;

using namespace timitseg;
using namespace timitseg::model;

namespace {

Batch random_batch(const ModelDims& d, int B, int T, uint64_t seed) {
  return testsupport::random_model_batch(d, B, T, seed);
}
std::vector<float> random_params(const ModelDims& d, uint64_t seed) {
  return testsupport::random_model_params(d, seed, 0.5f);
}

StepOptions no_dropout() { return testsupport::no_dropout_step(); }

void expect_gradients_agree(const ModelDims& d, const std::string& gpu_crf, const std::string& algo = "standard") {
  const std::vector<float> params = random_params(d, 11);
  const Batch batch = random_batch(d, 6, 57, 12);
  auto cpu = testsupport::executor_with("cpu", d, params, "cpu");
  auto gpu = testsupport::executor_with("cuda", d, params, gpu_crf, algo);
  std::vector<float> gc, gg;
  const StepResult rc = cpu->gradients(batch, no_dropout(), gc);
  const StepResult rg = gpu->gradients(batch, no_dropout(), gg);
  EXPECT_NEAR(rg.loss, rc.loss, 1e-4 * std::abs(rc.loss)) << "crf " << gpu_crf;
  EXPECT_NEAR(rg.penalty, rc.penalty, 1e-6 * std::max(1.0, rc.penalty));
  EXPECT_NEAR(rg.grad_norm, rc.grad_norm, 1e-3 * rc.grad_norm);
  double worst = 0;
  std::string worst_name;
  const ParamLayout layout(d);
  for (const ParamInfo& p : layout.params()) {
    double diff = 0, ref = 0;
    for (size_t i = 0; i < p.size; ++i) {
      diff += std::pow(double(gg[p.offset + i]) - gc[p.offset + i], 2);
      ref += std::pow(double(gc[p.offset + i]), 2);
    }
    // crf.projection.bias: exactly 0 in exact arithmetic (the centered cumsum
    // removes a per-class constant), so only rounding noise on both sides:
    // measured against the projection weight's gradient instead.
    double scale = std::sqrt(ref);
    if (p.name == "crf.projection.bias") {
      const ParamInfo& w = layout.get("crf.projection.weight");
      double wn = 0;
      for (size_t i = 0; i < w.size; ++i) wn += double(gc[w.offset + i]) * gc[w.offset + i];
      scale = std::max(scale, std::sqrt(wn));
    }
    const double rel = std::sqrt(diff) / std::max(scale, 1e-12);
    if (rel > worst) worst = rel, worst_name = p.name;
    EXPECT_LT(rel, 1e-3) << p.name << " (crf " << gpu_crf << ")";
  }
  std::printf("[ executor ] %s, crf %s: loss cpu %.9g gpu %.9g; worst gradient %s rel %.3g\n", algo.c_str(), gpu_crf.c_str(), rc.loss,
              rg.loss, worst_name.c_str(), worst);
}

}  // namespace

TEST(CudaExecutor, GradientsAgreeWithCpuCudaCrf) {
  REQUIRE_GPU();
  expect_gradients_agree(small_dims(), "cuda");
}

TEST(CudaExecutor, GradientsAgreeWithCpuHostCrfBackends) {
  REQUIRE_GPU();
  expect_gradients_agree(small_dims(), "reference");
  expect_gradients_agree(small_dims(), "cpu");
}

TEST(CudaExecutor, GradientsAgreeAtRecipeSize) {
  REQUIRE_GPU();
  ModelDims d;
  d.input_dim = 39;
  d.hidden_dim = 256;
  d.num_layers = 3;
  d.num_classes = 39;
  d.max_duration = 30;
  expect_gradients_agree(d, "cuda");
  std::string why;
  if (fused::supported(d.per_direction(), &why))
    expect_gradients_agree(d, "cuda", "fused");
  else
    std::printf("[ executor ] fused LSTM kernel not supported here: %s\n", why.c_str());
}

// A few training steps on both executors from the same state; crf_lr_scale:
// crf.lr_scale (two AdamW parameter groups, launched as two kernels on the GPU).
static void expect_training_tracks_the_cpu(double crf_lr_scale) {
  const ModelDims d = small_dims();
  const std::vector<float> params = random_params(d, 21);
  auto cpu = testsupport::executor_with("cpu", d, params, "cpu");
  auto gpu = testsupport::executor_with("cuda", d, params, "cuda");
  for (int step = 0; step < 5; ++step) {
    const Batch b = random_batch(d, 5, 40, 100 + step);
    StepOptions o = no_dropout();
    o.crf_lr_scale = crf_lr_scale;
    const StepResult rc = cpu->train_step(b, o);
    const StepResult rg = gpu->train_step(b, o);
    EXPECT_NEAR(rg.loss, rc.loss, 1e-3 * std::abs(rc.loss)) << "step " << step;
  }
  std::vector<float> pc, pg;
  AdamW oc, og;
  cpu->get_state(pc, oc);
  gpu->get_state(pg, og);
  EXPECT_EQ(oc.step, 5);
  EXPECT_EQ(og.step, 5);
  // crf.projection.bias is left out: its gradient is rounding noise around an
  // exact 0 (centered cumsum), which AdamW turns into lr-sized steps of random
  // sign on either device.
  const ParamLayout lay(d);
  const ParamInfo& pb = lay.get("crf.projection.bias");
  double diff = 0, ref = 0;
  for (size_t i = 0; i < pc.size(); ++i) {
    if (i >= pb.offset && i < pb.offset + pb.size) continue;
    diff += std::pow(double(pg[i]) - pc[i], 2);
    ref += std::pow(double(pc[i]) - params[i], 2);  // the distance moved
  }
  // The two trajectories differ by far less than the distance travelled.
  EXPECT_LT(std::sqrt(diff), 1e-2 * std::sqrt(ref)) << "crf.lr_scale " << crf_lr_scale;
  std::printf("[ executor ] 5 steps, crf.lr_scale %g: parameters cpu vs gpu %.3g, moved %.3g\n", crf_lr_scale,
              std::sqrt(diff), std::sqrt(ref));
}

TEST(CudaExecutor, TrainingStepsTrackTheCpu) {
  REQUIRE_GPU();
  expect_training_tracks_the_cpu(1.0);
}

TEST(CudaExecutor, TrainingStepsTrackTheCpuWithCrfLrScale) {
  REQUIRE_GPU();
  expect_training_tracks_the_cpu(30.0);
}

TEST(CudaExecutor, DecodeReproducesThePreRestructuringCpuBinary) {
  REQUIRE_GPU();
  const std::string dir = testsupport::legacy_fixture_dir();
  const ModelState s = load_checkpoint(dir + "checkpoint-pre-issue11.safetensors");
  ExecutorOptions xo;
  xo.crf_backend = crf::BackendKind::cuda;
  auto gpu = make_executor(Device::cuda, s.dims, xo);
  gpu->set_state(s.params, s.optimizer);
  for (const std::string& utt : testsupport::legacy_utterances()) {
    const st::File f = st::load(dir + utt + ".safetensors");
    const Batch b = testsupport::legacy_batch(f, utt);
    std::vector<float> scores;
    const auto segs = gpu->decode(b, &scores);
    const std::vector<float> ref = f.tensors.at("scores").to<float>();
    ASSERT_EQ(scores.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(scores[i], ref[i], 1e-4) << utt << " score " << i;
    const std::vector<int32_t> rs = f.tensors.at("segments").to<int32_t>();
    ASSERT_EQ(segs[0].size() * 3, rs.size()) << utt;
    for (size_t i = 0; i < segs[0].size(); ++i) {
      EXPECT_EQ(segs[0][i].start, rs[3 * i]) << utt << " segment " << i;
      EXPECT_EQ(segs[0][i].duration, rs[3 * i + 1]) << utt << " segment " << i;
      EXPECT_EQ(segs[0][i].label, rs[3 * i + 2]) << utt << " segment " << i;
    }
  }
}

TEST(CudaExecutor, NonFiniteParameterIsNamedAndNothingUpdated) {
  REQUIRE_GPU();
  const ModelDims d = small_dims();
  const std::vector<float> params = random_params(d, 31);
  auto gpu = testsupport::executor_with("cuda", d, params, "cuda");
  StepOptions o = no_dropout();
  const ParamLayout lay(d);
  o.poison.emplace_back(lay.get("crf.transition").offset, std::nanf(""));
  const Batch b = random_batch(d, 3, 20, 5);
  EXPECT_THROW(gpu->train_step(b, o), NonFiniteError);
  std::vector<float> after;
  AdamW oa;
  gpu->get_state(after, oa);
  EXPECT_EQ(oa.step, 0);
  EXPECT_EQ(after, params);  // poison restored, no update
}

// decode's per-utterance NLL (the dev loss, RUN_DIR/metrics.jsonl dev_loss):
// the reference CRF on the CPU executor is the oracle; on the GPU with the
// cuda backend (log_partition + gold_score on the device) and a host backend.
TEST(CudaExecutor, DecodeNllMatchesTheCpuReference) {
  REQUIRE_GPU();
  const ModelDims d = small_dims();
  const std::vector<float> params = random_params(d, 21);
  const Batch batch = random_batch(d, 5, 41, 22);
  auto cpu = testsupport::executor_with("cpu", d, params, "reference");
  std::vector<double> want;
  cpu->decode(batch, nullptr, &want);
  ASSERT_EQ(want.size(), 5u);
  for (const std::string backend : {"cuda", "cpu"}) {
    auto gpu = testsupport::executor_with("cuda", d, params, backend);
    std::vector<double> got;
    gpu->decode(batch, nullptr, &got);
    ASSERT_EQ(got.size(), want.size()) << backend;
    for (size_t b = 0; b < want.size(); ++b)
      EXPECT_NEAR(got[b], want[b], 1e-4 * (1 + std::abs(want[b]))) << backend << " utterance " << b;
  }
}

// crf.phone_bonus on the GPU (Viterbi on a biased device copy of transition)
// against the CPU executor with the same bonus (the host path, checked against
// brute force in tests/crf/test_phone_bonus.cpp): identical segments for a
// bonus that changes them, and the NLL returned with them is the bonus-free
// one. With the cuda backend and with a host backend through copies.
TEST(CudaExecutor, DecodeWithPhoneBonusMatchesTheCpu) {
  REQUIRE_GPU();
  const ModelDims d = small_dims();
  const std::vector<float> params = random_params(d, 41);
  const Batch batch = random_batch(d, 6, 53, 42);
  std::vector<double> nll0;
  const auto plain = testsupport::executor_with("cpu", d, params, "cpu")->decode(batch, nullptr, &nll0);
  for (const double bonus : {1.5, -2.0}) {
    std::vector<double> nll_cpu;
    const auto want = testsupport::executor_with("cpu", d, params, "cpu", "standard", bonus)->decode(batch, nullptr, &nll_cpu);
    EXPECT_NE(want, plain) << "bonus " << bonus << " should change the decoded segments";
    for (const std::string backend : {"cuda", "cpu"}) {
      std::vector<double> nll_gpu;
      const auto got = testsupport::executor_with("cuda", d, params, backend, "standard", bonus)->decode(batch, nullptr, &nll_gpu);
      EXPECT_EQ(got, want) << backend << " bonus " << bonus;
      ASSERT_EQ(nll_gpu.size(), nll0.size());
      for (size_t b = 0; b < nll0.size(); ++b)
        EXPECT_NEAR(nll_gpu[b], nll0[b], 1e-4 * (1 + std::abs(nll0[b]))) << backend << " utterance " << b;
    }
  }
}

// crf.projection.bias held while crf.frame_ce_weight is 0 (model/step_recipe.h
// held_parameters; tests/model/test_held_parameters.cpp on the CPU): two GPU
// steps leave it and its moments bitwise as they were; every other tensor
// trains. With the frame CE on, the bias trains too.
TEST(CudaExecutor, ProjectionBiasHeldWithoutFrameCe) {
  REQUIRE_GPU();
  const ModelDims d = small_dims();
  const ParamLayout lay(d);
  const ParamInfo& bias = lay.get("crf.projection.bias");
  const ParamInfo& w = lay.get("crf.projection.weight");
  const std::vector<float> params = random_params(d, 41);
  const Batch b = random_batch(d, 3, 20, 42);
  for (const double ce : {0.0, 0.5}) {
    auto gpu = testsupport::executor_with("cuda", d, params, "cuda");
    StepOptions o = no_dropout();
    o.frame_ce_weight = ce;
    for (int step = 1; step <= 2; ++step) {
      o.step = step;
      gpu->train_step(b, o);
    }
    std::vector<float> after;
    AdamW oa;
    gpu->get_state(after, oa);
    size_t bias_moved = 0, weight_moved = 0;
    for (size_t i = 0; i < bias.size; ++i) {
      bias_moved += after[bias.offset + i] != params[bias.offset + i];
      if (ce == 0.0) {
        EXPECT_EQ(oa.m[bias.offset + i], 0.f) << i;
        EXPECT_EQ(oa.v[bias.offset + i], 0.f) << i;
      }
    }
    for (size_t i = 0; i < w.size; ++i) weight_moved += after[w.offset + i] != params[w.offset + i];
    EXPECT_EQ(bias_moved, ce == 0.0 ? 0u : bias.size) << "frame_ce_weight " << ce;
    EXPECT_EQ(weight_moved, w.size) << "frame_ce_weight " << ce;
  }
}
