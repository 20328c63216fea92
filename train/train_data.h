// What a training run reads: the train and dev splits of a prepared WORKDIR,
// its CMVN and its feature options (data.workdir, docs/data.md).
#pragma once

#include "data/dataset.h"
#include "model/config.h"

namespace timitseg::train {

// Data already in memory (tests; `train` loads them from cfg.data_workdir).
struct TrainData {
  data::Split train, dev;
  bool has_cmvn = false;
  data::Cmvn cmvn;
  data::FeatureOptions features;
};

// The splits of cfg.data_workdir (data.workdir, required), cut to
// data.max_train_utterances / data.max_dev_utterances, with the CMVN when
// features.cmvn. Throws naming the key or the file.
TrainData load_train_data(const model::Config& cfg);

}  // namespace timitseg::train
