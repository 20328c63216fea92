// The on-the-fly augmentation of a training batch: SpecAugment's time and
// frequency masks (data/augment.h spec_mask, keys augment.*_masks and
// augment.*_mask_width; docs/training.md "Augmentation and noise").
#pragma once

#include <vector>

#include "config/config.h"
#include "data/augment.h"
#include "model/batch.h"

namespace timitseg::train {

// The mask options of cfg (all zero: off).
data::SpecMaskOptions spec_mask_options(const config::Config& cfg);

// Masks the features [B][T][D] of a training batch after CMVN, row b being
// train utterance utts[b] (its index in the train split): the masks of row b
// are drawn from spec_mask_seed(cfg.train_seed, epoch, utts[b]), so they do
// not depend on the batch, the ranks or a resume. Nothing when the masks are off.
// keep_unmasked (the run's model has the Gaussian head: crf.gaussian_head
// resolved on): the batch keeps a copy of its features before the masks in
// input.head_features, which the head reads.
void mask_batch(model::Batch& batch, const std::vector<int>& utts, const config::Config& cfg, int epoch,
                bool keep_unmasked);

}  // namespace timitseg::train
