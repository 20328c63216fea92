// crf.duration_model = lognormal on the GPU: the table and backward kernels
// (crf/device_layers.h) against the host functions of crf/duration.h
// (themselves checked against the log-normal density and finite differences in
// tests/model/test_duration_lognormal.cpp), and the GPU executor against the
// CPU executor: gradients (the table's entry 0, crf.duration_lognormal's
// chained), training steps, and the table kept derived after each update.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/buffer.h"
#include "common/cuda.h"
#include "crf/device_layers.h"
#include "crf/duration.h"
#include "model/model.h"
#include "tests/support/model_problems.h"
#include "tests/support/gpu.h"

using namespace timitseg;
using namespace timitseg::model;
using crf::lognormal_duration_backward;
using crf::lognormal_duration_table;

namespace {

ModelDims ln_dims() { return testsupport::small_dims(/*lognormal=*/true); }

}  // namespace

TEST(CudaDurationLognormal, KernelsMatchTheHost) {
  REQUIRE_GPU();
  const int K = 60, C = 48;
  const std::vector<float> ln = testsupport::random_lognormal_rows(C, 4, 0);
  std::vector<float> want(K * C), gt(K * C), want_g(3 * C);
  lognormal_duration_table(K, C, ln.data(), want.data());
  std::mt19937_64 rng(2);
  for (float& x : gt) x = static_cast<float>(2.0 * uniform01(rng) - 1.0);
  std::vector<float> gt_host = gt;
  lognormal_duration_backward(K, C, ln.data(), gt_host.data(), want_g.data());
  Buffer dln(Memory::device, ln.size() * 4), dt(Memory::device, want.size() * 4), dgt(Memory::device, gt.size() * 4),
      dgl(Memory::device, want_g.size() * 4);
  dln.upload(ln);
  dgt.upload(gt);
  crf::device::lognormal_duration_table(K, C, dln.as<float>(), dt.as<float>(), nullptr);
  crf::device::lognormal_duration_backward(K, C, dln.as<float>(), dgt.as<float>(), dgl.as<float>(), nullptr);
  std::vector<float> got(want.size()), got_gt(gt.size()), got_g(want_g.size());
  dt.download(got.data(), got.size() * 4);
  dgt.download(got_gt.data(), got_gt.size() * 4);
  dgl.download(got_g.data(), got_g.size() * 4);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-6 * std::max(1.f, std::abs(want[i]))) << i;
  for (float x : got_gt) ASSERT_EQ(x, 0.f);
  for (size_t i = 0; i < want_g.size(); ++i)
    ASSERT_NEAR(got_g[i], want_g[i], 1e-5 * std::max(1.f, std::abs(want_g[i]))) << i;
  EXPECT_EQ(got_g[C + 0], 0.f);  // label 0's log sigma is below the clamp
}

TEST(CudaDurationLognormal, ExecutorAgreesWithCpu) {
  REQUIRE_GPU();
  const ModelDims d = ln_dims();
  const ParamLayout lay(d);
  std::vector<float> params = testsupport::random_model_params(d, 5, 0.4f);
  const std::vector<float> ln = testsupport::random_lognormal_rows(d.num_classes, 6, 0);
  std::copy(ln.begin(), ln.end(), params.begin() + lay.get("crf.duration_lognormal").offset);
  StepOptions o;
  o.lr = 2e-3;
  o.crf_lr_scale = 10;
  o.clip_norm = 5;
  o.crf_reg = 1e-3;
  const Batch batch = testsupport::random_model_batch(d, 6, 50, 3);
  auto cpu = testsupport::executor_with("cpu", d, params, "cpu");
  std::vector<float> gc;
  const StepResult rc = cpu->gradients(batch, o, gc);
  const ParamInfo& D = lay.get("crf.duration_bias");
  const ParamInfo& LN = lay.get("crf.duration_lognormal");
  for (const std::string crf : {"cuda", "cpu"}) {
    auto gpu = testsupport::executor_with("cuda", d, params, crf);
    std::vector<float> gg;
    const StepResult rg = gpu->gradients(batch, o, gg);
    EXPECT_NEAR(rg.loss, rc.loss, 1e-4 * std::abs(rc.loss)) << crf;
    for (size_t i = 0; i < D.size; ++i) ASSERT_EQ(gg[D.offset + i], 0.f) << crf;
    double diff = 0, ref = 0;
    for (size_t i = 0; i < LN.size; ++i) {
      diff += std::pow(double(gg[LN.offset + i]) - gc[LN.offset + i], 2);
      ref += std::pow(double(gc[LN.offset + i]), 2);
    }
    EXPECT_GT(ref, 1e-8) << crf;
    EXPECT_LT(std::sqrt(diff / ref), 1e-3) << crf;
  }
  auto gpu = testsupport::executor_with("cuda", d, params, "cuda");
  for (int s = 1; s <= 5; ++s) {
    o.step = s;
    const Batch b = testsupport::random_model_batch(d, 5, 40, 100 + s);
    const StepResult a = cpu->train_step(b, o);
    const StepResult g = gpu->train_step(b, o);
    EXPECT_NEAR(g.loss, a.loss, 1e-3 * std::abs(a.loss)) << "step " << s;
  }
  std::vector<float> pc, pg;
  AdamW oc, og;
  cpu->get_state(pc, oc);
  gpu->get_state(pg, og);
  std::vector<float> table(D.size);
  lognormal_duration_table(d.max_duration, d.num_classes, pg.data() + LN.offset, table.data());
  for (size_t i = 0; i < D.size; ++i)  // derived on the device after the last update
    ASSERT_NEAR(pg[D.offset + i], table[i], 1e-6 * std::max(1.f, std::abs(table[i]))) << i;
  double diff = 0, moved = 0;
  for (size_t i = 0; i < LN.size; ++i) {
    diff += std::pow(double(pg[LN.offset + i]) - pc[LN.offset + i], 2);
    moved += std::pow(double(pc[LN.offset + i]) - params[LN.offset + i], 2);
  }
  EXPECT_GT(moved, 0);
  EXPECT_LT(std::sqrt(diff), 1e-2 * std::sqrt(moved));
}
