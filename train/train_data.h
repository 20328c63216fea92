// What a training run reads: the train and dev splits of a prepared WORKDIR,
// its CMVN and its feature options (data.workdir, docs/data.md).
#pragma once

#include "data/dataset.h"
#include "data/phone_set.h"
#include "config/config.h"

namespace timitseg::train {

// Data already in memory (tests; `train` loads them from cfg.data_workdir).
struct TrainData {
  data::Split train, dev;
  bool has_cmvn = false;
  data::Cmvn cmvn;
  data::FeatureOptions features;
  data::WorkdirPhoneSet phone_set = data::timit_workdir_phone_set();  // the WORKDIR's inventory (TIMIT's by default)
};

// The splits of cfg.data_workdir (data.workdir, required), cut to
// data.max_train_utterances / data.max_dev_utterances, with the CMVN when
// features.cmvn. Throws naming the key or the file.
TrainData load_train_data(const config::Config& cfg);

}  // namespace timitseg::train
