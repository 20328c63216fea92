// The data of a training run (train/train_data.h).
#include "train/train_data.h"

#include <algorithm>
#include <stdexcept>

#include "data/augment.h"

namespace timitseg::train {
namespace {

// The augmented copies of `timitseg augment` (data/augment.h): train keeps the
// kinds augment.speed and augment.noise choose; dev never holds one.
void keep_chosen_copies(const config::Config& cfg, data::Split& train, data::Split& dev) {
  auto drop = [](data::Split& s, bool speed, bool noise) {
    auto& u = s.utterances;
    u.erase(std::remove_if(u.begin(), u.end(), [&](const data::Utterance& x) {
              const std::string kind = data::augmentation_of(x.id);
              return (kind == "speed" && !speed) || (kind == "noise" && !noise);
            }), u.end());
  };
  drop(train, cfg.augment_speed, cfg.augment_noise);
  drop(dev, false, false);
}

}  // namespace

TrainData load_train_data(const config::Config& cfg) {
  if (cfg.data_workdir.empty()) throw std::invalid_argument("config: data.workdir is required (a prepared WORKDIR)");
  TrainData d;
  d.train = data::load_split(cfg.data_workdir, "train");
  d.dev = data::load_split(cfg.data_workdir, "dev");
  d.features = data::load_feature_options(cfg.data_workdir);
  d.phone_set = data::load_workdir_phone_set(cfg.data_workdir);
  if (cfg.features_cmvn) {
    d.cmvn = data::load_cmvn(cfg.data_workdir);
    d.cmvn.per_utterance = cfg.data_cmvn == "utterance";
    d.has_cmvn = true;
  }
  keep_chosen_copies(cfg, d.train, d.dev);
  if (cfg.data_max_train_utterances > 0 && static_cast<int64_t>(d.train.utterances.size()) > cfg.data_max_train_utterances)
    d.train.utterances.resize(static_cast<size_t>(cfg.data_max_train_utterances));
  if (cfg.data_max_dev_utterances > 0 && static_cast<int64_t>(d.dev.utterances.size()) > cfg.data_max_dev_utterances)
    d.dev.utterances.resize(static_cast<size_t>(cfg.data_max_dev_utterances));
  return d;
}

}  // namespace timitseg::train
