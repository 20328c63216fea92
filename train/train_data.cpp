// The data of a training run (train/train_data.h).
#include "train/train_data.h"

#include <stdexcept>

namespace timitseg::train {

TrainData load_train_data(const config::Config& cfg) {
  if (cfg.data_workdir.empty()) throw std::invalid_argument("config: data.workdir is required (a prepared WORKDIR)");
  TrainData d;
  d.train = data::load_split(cfg.data_workdir, "train");
  d.dev = data::load_split(cfg.data_workdir, "dev");
  d.features = data::load_feature_options(cfg.data_workdir);
  d.phone_set = data::load_workdir_phone_set(cfg.data_workdir);
  if (cfg.features_cmvn) {
    d.cmvn = data::load_cmvn(cfg.data_workdir);
    d.has_cmvn = true;
  }
  if (cfg.data_max_train_utterances > 0 && static_cast<int64_t>(d.train.utterances.size()) > cfg.data_max_train_utterances)
    d.train.utterances.resize(static_cast<size_t>(cfg.data_max_train_utterances));
  if (cfg.data_max_dev_utterances > 0 && static_cast<int64_t>(d.dev.utterances.size()) > cfg.data_max_dev_utterances)
    d.dev.utterances.resize(static_cast<size_t>(cfg.data_max_dev_utterances));
  return d;
}

}  // namespace timitseg::train
