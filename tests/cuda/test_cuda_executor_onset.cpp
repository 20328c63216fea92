// The anchored heads (crf.onset_features, crf.end_features: the onset head, the
// end head, both) on the GPU executor against the CPU executor (the oracle; its
// network is checked by finite differences in tests/model/test_onset_model.cpp
// and test_end_model.cpp), same parameters and batch, dropout off: loss, every
// parameter gradient (the heads' projections included), a few training steps,
// decoding with the heads' scores; with the cuda CRF backend and a host CRF
// backend through copies. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "common/cuda.h"
#include "model/model.h"
#include "tests/support/gpu.h"
#include "tests/support/model_problems.h"

using namespace timitseg;
using namespace timitseg::model;

namespace {

// The heads' variants: onset alone, end alone, both.
std::vector<ModelDims> head_dims() {
  std::vector<ModelDims> out;
  for (int v = 0; v < 3; ++v) {
    ModelDims d = testsupport::small_dims();
    d.onset = v != 1;
    d.end = v != 0;
    out.push_back(d);
  }
  return out;
}

std::string variant(const ModelDims& d) { return std::string(d.onset ? "onset" : "") + (d.end ? "+end" : ""); }

StepOptions no_dropout() { return testsupport::no_dropout_step(); }

}  // namespace

TEST(CudaExecutorOnset, GradientsAgreeWithCpu) {
  REQUIRE_GPU();
  for (const ModelDims& d : head_dims()) {
    SCOPED_TRACE(variant(d));
    const std::vector<float> params = testsupport::random_model_params(d, 11, 0.5f);
    const Batch batch = testsupport::random_model_batch(d, 6, 57, 12);
    auto cpu = testsupport::executor_with("cpu", d, params, "cpu");
    std::vector<float> gc;
    const StepResult rc = cpu->gradients(batch, no_dropout(), gc);
    const ParamLayout layout(d);
    for (const std::string crf : {"cuda", "cpu"}) {
      auto gpu = testsupport::executor_with("cuda", d, params, crf);
      std::vector<float> gg;
      const StepResult rg = gpu->gradients(batch, no_dropout(), gg);
      EXPECT_NEAR(rg.loss, rc.loss, 1e-4 * std::abs(rc.loss)) << crf;
      for (const ParamInfo& p : layout.params()) {
        double diff = 0, ref = 0;
        for (size_t i = 0; i < p.size; ++i) {
          diff += std::pow(double(gg[p.offset + i]) - gc[p.offset + i], 2);
          ref += std::pow(double(gc[p.offset + i]), 2);
        }
        double scale = std::sqrt(ref);
        if (p.name == "crf.projection.bias") {  // exactly 0 in exact arithmetic
                                                // (centered cumsum)
          const ParamInfo& w = layout.get("crf.projection.weight");
          double wn = 0;
          for (size_t i = 0; i < w.size; ++i) wn += double(gc[w.offset + i]) * gc[w.offset + i];
          scale = std::max(scale, std::sqrt(wn));
        }
        EXPECT_LT(std::sqrt(diff) / std::max(scale, 1e-12), 1e-3) << p.name << " (crf " << crf << ")";
      }
      // Each head's projection receives a real gradient (not centered away).
      for (const CrfTensor* ob : layout.crf().heads().biases) {
        double n = 0;
        for (size_t i = 0; i < ob->size; ++i) n += std::abs(gc[ob->offset + i]);
        EXPECT_GT(n, 1e-3) << ob->name;
      }
    }
  }
}

TEST(CudaExecutorOnset, TrainingStepsAndDecodeTrackTheCpu) {
  REQUIRE_GPU();
  for (const ModelDims& d : head_dims()) {
    SCOPED_TRACE(variant(d));
    const std::vector<float> params = testsupport::random_model_params(d, 21, 0.5f);
    auto cpu = testsupport::executor_with("cpu", d, params, "cpu");
    auto gpu = testsupport::executor_with("cuda", d, params, "cuda");
    for (int step = 0; step < 5; ++step) {
      const Batch b = testsupport::random_model_batch(d, 5, 40, 100 + step);
      const StepResult rc = cpu->train_step(b, no_dropout());
      const StepResult rg = gpu->train_step(b, no_dropout());
      EXPECT_NEAR(rg.loss, rc.loss, 1e-3 * std::abs(rc.loss)) << "step " << step;
    }
    std::vector<float> pc, pg;
    AdamW oc, og;
    cpu->get_state(pc, oc);
    gpu->get_state(pg, og);
    const ParamLayout lay(d);
    const ParamInfo& pb = lay.get("crf.projection.bias");
    double diff = 0, ref = 0;
    for (size_t i = 0; i < pc.size(); ++i) {
      if (i >= pb.offset && i < pb.offset + pb.size) continue;
      diff += std::pow(double(pg[i]) - pc[i], 2);
      ref += std::pow(double(pc[i]) - params[i], 2);
    }
    EXPECT_LT(std::sqrt(diff), 1e-2 * std::sqrt(ref));
    // Decoding (Viterbi with onset) and its NLL from the same trained
    // parameters.
    auto cpu2 = testsupport::executor_with("cpu", d, pc, "reference");
    const Batch b = testsupport::random_model_batch(d, 4, 33, 7);
    std::vector<double> want;
    const auto want_segs = cpu2->decode(b, nullptr, &want);
    for (const std::string crf : {"cuda", "cpu"}) {
      auto g2 = testsupport::executor_with("cuda", d, pc, crf);
      std::vector<double> got;
      const auto segs = g2->decode(b, nullptr, &got);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << crf;
      EXPECT_EQ(segs, want_segs) << crf;
    }
  }
}
