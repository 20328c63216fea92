// The Gaussian head reads a training batch's features before the spectral
// masks (train/augment_batch.h mask_batch, BatchInput::head_features): a masked
// frame is no sample of a class's density. Oracle: the batch before masking.
#include <gtest/gtest.h>

#include <vector>

#include "config/config.h"
#include "model/batch.h"
#include "tests/support/model_problems.h"
#include "train/augment_batch.h"

using namespace timitseg;

TEST(GaussianMasks, TheHeadKeepsTheUnmaskedFeatures) {
  const model::ModelDims d = testsupport::small_dims();
  config::Config cfg;
  cfg.set("augment.time_masks=2", "test");
  cfg.set("augment.time_mask_width=10", "test");
  cfg.set("augment.freq_masks=2", "test");
  cfg.set("augment.freq_mask_width=4", "test");
  for (const bool keep : {false, true}) {  // keep: the run's model has the head (crf.gaussian_head resolved on)
    model::Batch b = testsupport::random_model_batch(d, 3, 40, 9);
    const std::vector<float> before = b.input.features;
    train::mask_batch(b, {0, 1, 2}, cfg, 1, keep);
    EXPECT_NE(b.input.features, before) << "the masks changed nothing";
    if (keep)
      EXPECT_EQ(b.input.head_features, before);
    else
      EXPECT_TRUE(b.input.head_features.empty()) << "a model without the head needs no copy";
  }
}
