// crf.projection.bias is held at its value while crf.frame_ce_weight is 0
// (model/step_recipe.h held_parameters, docs/crf.md "Parameters that are
// not trained"). Oracle: the step's own gradient (Executor::gradients, no
// dropout) clipped and put through AdamW::update of model/optim.h on a copy:
// every other entry must equal it bitwise, the held ones must not move (nor
// their moments); with the frame CE on, the bias takes AdamW's step too.
#include <gtest/gtest.h>

#include <vector>

#include "model/executor.h"
#include "model/make_executor.h"
#include "model/optim.h"
#include "model/params.h"
#include "model/step_recipe.h"
#include "tests/support/model_problems.h"

using namespace timitseg::model;
using timitseg::testsupport::random_model_batch;
using timitseg::testsupport::random_model_params;
using timitseg::testsupport::small_dims;

namespace {

void check_step(double frame_ce_weight) {
  const ModelDims d = small_dims();
  const ParamLayout layout(d);
  const std::vector<float> p0 = random_model_params(d, 5, 0.5f);
  const Batch batch = random_model_batch(d, 3, 11, 6);
  ExecutorOptions xo;
  xo.threads = 1;
  auto exec = make_executor(Device::cpu, d, xo);
  AdamW opt;
  opt.reset(p0.size());
  // two steps, so that the second sees moments of the first
  StepOptions o;
  o.lr = 1e-2;
  o.clip_norm = 1.0;
  o.crf_reg = 1e-3;
  o.frame_ce_weight = frame_ce_weight;
  exec->set_state(p0, opt);
  std::vector<float> want = p0;
  AdamW want_opt = opt;
  for (int step = 1; step <= 2; ++step) {
    o.step = step;
    std::vector<float> grad;
    exec->gradients(batch, o, grad);
    clip_global_norm(grad, o.clip_norm);
    want_opt.update(want, grad, o.lr);
    exec->train_step(batch, o);
  }
  std::vector<float> got;
  AdamW got_opt;
  exec->get_state(got, got_opt);
  const ParamInfo& bias = layout.get("crf.projection.bias");
  const bool held = frame_ce_weight == 0.0;
  const HeldRange h = held_parameters(layout, o);
  EXPECT_EQ(h.empty(), !held);
  size_t moved_bias = 0;
  for (size_t i = 0; i < p0.size(); ++i) {
    const bool in_bias = i >= bias.offset && i < bias.offset + bias.size;
    if (in_bias && held) {
      ASSERT_EQ(got[i], p0[i]) << "held bias entry " << i - bias.offset << " moved";
      ASSERT_EQ(got_opt.m[i], 0.f);
      ASSERT_EQ(got_opt.v[i], 0.f);
    } else {
      ASSERT_EQ(got[i], want[i]) << "entry " << i << " differs from AdamW::update of the step's gradient";
      ASSERT_EQ(got_opt.m[i], want_opt.m[i]) << i;
      ASSERT_EQ(got_opt.v[i], want_opt.v[i]) << i;
      if (in_bias && got[i] != p0[i]) ++moved_bias;
    }
  }
  if (!held) EXPECT_EQ(moved_bias, bias.size);  // with the frame CE the bias trains
}

}  // namespace

TEST(HeldParameters, ProjectionBiasHeldWithoutFrameCe) { check_step(0.0); }

TEST(HeldParameters, ProjectionBiasTrainedWithFrameCe) { check_step(0.5); }

TEST(HeldParameters, UpdateRangesLeaveOnlyTheHeldRangeAlone) {
  // a hand-made gradient: AdamW over update_ranges without [2, 4) against the
  // whole AdamW::update entry by entry
  const std::vector<float> p0 = {0.5f, -1.f, 2.f, 0.25f, -0.75f, 1.5f};
  const std::vector<float> g = {0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f};
  AdamW a, b;
  a.reset(p0.size());
  b.reset(p0.size());
  std::vector<float> pa = p0, pb = p0;
  a.update(pa, g, 1e-2, 4, 3.0);
  b.update(pb, g, update_ranges(p0.size(), 1e-2, 4, 3.0, 2, 4));
  for (size_t i = 0; i < p0.size(); ++i) {
    if (i == 2 || i == 3) {
      EXPECT_EQ(pb[i], p0[i]);
      EXPECT_EQ(b.m[i], 0.f);
      EXPECT_EQ(b.v[i], 0.f);
    } else {
      EXPECT_EQ(pb[i], pa[i]) << i;
      EXPECT_NE(pb[i], p0[i]) << i;
      EXPECT_EQ(b.m[i], a.m[i]) << i;
    }
  }
  EXPECT_EQ(b.step, 1);
}

namespace {
std::vector<std::vector<double>> as_rows(const std::vector<timitseg::model::UpdateRange>& rs) {
  std::vector<std::vector<double>> out;
  for (const auto& r : rs) out.push_back({double(r.begin), double(r.end), r.lr});
  return out;
}
}  // namespace

TEST(HeldParameters, UpdateRangesOfTheGroupsAndTheHeldRange) {
  // the ranges the GPU runs one AdamW kernel each on, written out by hand
  using R = std::vector<std::vector<double>>;
  EXPECT_EQ(as_rows(update_ranges(10, 0.5, 6, 1.0)), (R{{0, 10, 0.5}}));  // lr_scale 1: one group
  EXPECT_EQ(as_rows(update_ranges(10, 0.5, 6, 2.0)), (R{{0, 6, 0.5}, {6, 10, 1.0}}));
  EXPECT_EQ(as_rows(update_ranges(10, 0.5, 6, 2.0, 2, 4)), (R{{0, 2, 0.5}, {4, 6, 0.5}, {6, 10, 1.0}}));
  EXPECT_EQ(as_rows(update_ranges(10, 0.5, 6, 2.0, 0, 6)), (R{{6, 10, 1.0}}));          // a whole group held
  EXPECT_EQ(as_rows(update_ranges(10, 0.5, 6, 2.0, 5, 8)), (R{{0, 5, 0.5}, {8, 10, 1.0}}));  // across the split
  EXPECT_EQ(as_rows(update_ranges(10, 0.5, 6, 1.0, 8, 10)), (R{{0, 8, 0.5}}));
  EXPECT_EQ(as_rows(update_ranges(10, 0.5, 20, 2.0)), (R{{0, 10, 0.5}}));  // scaled_begin past the end
}
