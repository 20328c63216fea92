// A checkpoint is used only on the features it was trained on: the feature
// options it records (ModelState::features) against those of the features it
// is given (a WORKDIR's manifest.json feature_options), and against its own
// input dimension. Every command that feeds a checkpoint features calls these
// (evaluate, report, compare, train --resume; decode, align and the C API
// compute the features with the checkpoint's own options and check those).
#pragma once

#include <string>
#include <vector>

#include "data/features.h"
#include "model/checkpoint.h"

namespace timitseg::model {

// The options that change the features (allow_resample does not: it only
// permits input at another rate), as "key value" pairs, in
// feature_options_to_json's order; only those that differ between a and b
// when differing_only.
std::vector<std::string> feature_option_differences(const data::FeatureOptions& a, const data::FeatureOptions& b);

// "mfcc 39 dims (num_mel_bins 23, ...)": the type, the dimension and the
// options given in `keys` (all options that change the features when empty).
std::string describe_feature_options(const data::FeatureOptions& o, const std::vector<std::string>& keys = {});

// Throws one line naming both option sets when `given` (the features of
// `given_source`, e.g. "work/manifest.json") differ from the checkpoint's:
// "CKPT was trained on fbank features (40 dims; num_mel_bins 40, ...), GIVEN holds
// mfcc features (39 dims; num_mel_bins 23, ...): the feature options differ in
// type, num_mel_bins; use a WORKDIR prepared with the checkpoint's options".
void check_feature_options(const ModelState& s, const std::string& checkpoint, const data::FeatureOptions& given,
                           const std::string& given_source);

// check_feature_options with the WORKDIR's manifest.json feature_options.
void check_workdir_features(const ModelState& s, const std::string& checkpoint, const std::string& workdir);

// The checkpoint's own feature options must give its input dimension (a
// checkpoint whose metadata was edited, or written by another program): one
// line naming both.
void check_checkpoint_features(const ModelState& s, const std::string& checkpoint);

}  // namespace timitseg::model
