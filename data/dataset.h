// The contract between `timitseg prepare` (data layer) and training /
// evaluation / decoding (model layer): what a prepared WORKDIR holds and how
// it is loaded. Implemented in data/dataset.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/features.h"
#include "data/phones.h"

namespace timitseg::data {

// One utterance of a prepared split.
struct Utterance {
  std::string id;       // unique, e.g. "train/dr1/fcjf0/si1027" (lower case)
  std::string speaker;  // e.g. "fcjf0"
  int32_t num_frames = 0;
  int32_t dim = 0;
  std::vector<float> features;  // [num_frames][dim], raw (CMVN NOT applied)
  std::vector<int32_t> labels;  // [num_frames], index into PhoneSet::names61() (never q)
  int64_t num_samples = 0;      // audio length in samples
  std::string audio_path;       // source .WAV path as found
};

struct Split {
  std::string name;  // train | dev | core-test | test
  std::vector<Utterance> utterances;
};

// Per-dimension normalization estimated on the train split only.
struct Cmvn {
  std::vector<double> mean;  // [dim]
  std::vector<double> var;   // [dim] (population variance)
  // x[t][d] = (x[t][d] - mean[d]) / sqrt(var[d] + 1e-10 floor documented in docs)
  void apply(float* feats /*[T][dim]*/, int64_t num_frames) const;
};

// Names of the splits prepare writes.
const std::vector<std::string>& split_names();

// Loads a split of a prepared WORKDIR, verifying the checksums in
// WORKDIR/manifest.json; a missing, truncated or edited file gives one error
// naming the file and telling the user to re-run `timitseg prepare`.
Split load_split(const std::string& workdir, const std::string& split);
Cmvn load_cmvn(const std::string& workdir);
FeatureOptions load_feature_options(const std::string& workdir);

}  // namespace timitseg::data
