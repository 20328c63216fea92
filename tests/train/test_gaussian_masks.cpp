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
  for (const double w : {0.0, 0.3}) {
    model::Batch b = testsupport::random_model_batch(d, 3, 40, 9);
    const std::vector<float> before = b.input.features;
    config::Config cfg;
    cfg.set("augment.time_masks=2", "test");
    cfg.set("augment.time_mask_width=10", "test");
    cfg.set("augment.freq_masks=2", "test");
    cfg.set("augment.freq_mask_width=4", "test");
    cfg.crf_gaussian_head = w > 0 ? config::OnsetFeatures::automatic : config::OnsetFeatures::off;
    cfg.crf_gaussian_weight = w > 0 ? w : 0.1;
    train::mask_batch(b, {0, 1, 2}, cfg, 1);
    EXPECT_NE(b.input.features, before) << "the masks changed nothing";
    if (w > 0)
      EXPECT_EQ(b.input.head_features, before);
    else
      EXPECT_TRUE(b.input.head_features.empty());
  }
}
