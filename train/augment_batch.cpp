#include "train/augment_batch.h"

#include <stdexcept>


namespace timitseg::train {

data::SpecMaskOptions spec_mask_options(const config::Config& cfg) {
  return {cfg.augment_time_masks, cfg.augment_time_mask_width, cfg.augment_freq_masks, cfg.augment_freq_mask_width};
}

void mask_batch(model::Batch& batch, const std::vector<int>& utts, const config::Config& cfg, int epoch,
                bool keep_unmasked) {
  const data::SpecMaskOptions o = spec_mask_options(cfg);
  const int B = batch.input.B, T = batch.input.T;
  if (!o.enabled() || B == 0 || T == 0) return;
  if (static_cast<int>(utts.size()) != B) throw std::logic_error("mask_batch: one utterance index per row expected");
  if (keep_unmasked) batch.input.head_features = batch.input.features;  // the Gaussian head reads them unmasked
  const int64_t D = static_cast<int64_t>(batch.input.features.size()) / (static_cast<int64_t>(B) * T);
  for (int b = 0; b < B; ++b)
    data::spec_mask(batch.input.features.data() + static_cast<int64_t>(b) * T * D, batch.input.lengths[b], D, o,
                    data::spec_mask_seed(cfg.train_seed, epoch, utts[static_cast<size_t>(b)]));
}

}  // namespace timitseg::train
