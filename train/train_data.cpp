// The data of a training run (train/train_data.h).
#include "train/train_data.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <stdexcept>

#include "data/augment.h"
#include "model/batch.h"
#include "model/labels.h"

namespace timitseg::train {
namespace {

// The augmented copies of `timitseg augment` (data/augment.h): train keeps the
// kinds augment.speed and augment.noise choose; dev never holds one.
void keep_chosen_copies(const config::Config& cfg, data::Split& train, data::Split& dev) {
  auto drop = [](data::Split& s, bool speed, bool noise) {
    auto& u = s.utterances;
    u.erase(std::remove_if(u.begin(), u.end(), [&](const data::Utterance& x) {
              const data::Augmentation kind = data::augmentation_of(x.id);
              return (kind == data::Augmentation::speed && !speed) || (kind == data::Augmentation::noise && !noise);
            }), u.end());
  };
  drop(train, cfg.augment_speed, cfg.augment_noise);
  drop(dev, false, false);
}

}  // namespace

void add_split_speakers(TrainData& data) {
  std::vector<const data::Utterance*> train, dev;
  for (const auto& u : data.train.utterances) train.push_back(&u);
  for (const auto& u : data.dev.utterances) dev.push_back(&u);
  data.cmvn = data.cmvn.with_speakers(train).with_speakers(dev);
}

bool trains_on_transcript(const config::Config& cfg, const data::Utterance& u) {
  return cfg.crf_supervision == config::Supervision::transcript ||
         (cfg.crf_supervision == config::Supervision::automatic && !u.has_times());
}

bool any_trains_on_transcript(const config::Config& cfg, const data::Split& split) {
  for (const data::Utterance& u : split.utterances)
    if (trains_on_transcript(cfg, u)) return true;
  return false;
}

namespace {

// Why u cannot train, or "" when it can.
std::string untrainable(const config::Config& cfg, const data::Utterance& u, const model::LabelSet& ls) {
  if (!trains_on_transcript(cfg, u))
    return u.has_times() ? "" : "no phone times (only a transcript) and crf.supervision is segments";
  model::PhoneSequence s;
  try {
    s = model::transcript_of(u, ls);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  if (u.num_frames < s.required())
    return "its " + std::to_string(u.num_frames) + " frames cannot hold its " + std::to_string(s.required()) +
           " phones (one frame each at least)";
  return "";
}

}  // namespace

size_t keep_trainable(const config::Config& cfg, TrainData& data) {
  const model::LabelSet ls = model::training_label_set(cfg, data.phone_set, cfg.data_workdir);
  std::vector<data::Utterance> kept;
  size_t left_out = 0;
  for (data::Utterance& u : data.train.utterances) {
    const std::string why = untrainable(cfg, u, ls);
    if (why.empty()) {
      kept.push_back(std::move(u));
      continue;
    }
    if (++left_out <= 10) spdlog::warn("train utterance {} left out: {}", u.id, why);
  }
  if (left_out > 10) spdlog::warn("... {} more train utterances left out (the first 10 named above)", left_out - 10);
  if (kept.empty())
    throw std::runtime_error("no train utterance can train under crf.supervision = " +
                             std::string(config::to_string(cfg.crf_supervision)) + " (" + std::to_string(left_out) +
                             " left out, named above)");
  if (left_out > 0)
    spdlog::warn("{} of {} train utterances left out; training on {}", left_out, left_out + kept.size(), kept.size());
  data.train.utterances = std::move(kept);
  return left_out;
}

std::string train_data_key(const config::Config& cfg) {
  // Every field load_train_data (and keep_chosen_copies, keep_trainable, training_label_set) reads.
  std::string k = cfg.data_workdir;
  k += '\n' + std::to_string(cfg.features_cmvn) + ' ' + std::string(config::to_string(cfg.data_cmvn));
  k += '\n' + std::to_string(cfg.augment_speed) + ' ' + std::to_string(cfg.augment_noise);
  k += '\n' + std::to_string(cfg.data_max_train_utterances) + ' ' + std::to_string(cfg.data_max_dev_utterances);
  k += '\n' + std::string(config::to_string(cfg.crf_supervision)) + ' ' + std::to_string(cfg.data_label_set) + ' ' +
       cfg.data_phone_set;
  return k;
}

TrainData load_train_data(const config::Config& cfg) {
  if (cfg.data_workdir.empty()) throw std::invalid_argument("config: data.workdir is required (a prepared WORKDIR)");
  TrainData d;
  d.train = data::load_split(cfg.data_workdir, data::SplitName::train);
  d.dev = data::load_split(cfg.data_workdir, data::SplitName::dev);
  d.features = data::load_feature_options(cfg.data_workdir);
  d.phone_set = data::load_workdir_phone_set(cfg.data_workdir);
  if (cfg.features_cmvn) {
    d.cmvn = data::load_cmvn(cfg.data_workdir);
    d.cmvn.per_utterance = cfg.data_cmvn == config::CmvnMode::utterance;
    d.cmvn.per_speaker = cfg.data_cmvn == config::CmvnMode::speaker;
    d.has_cmvn = true;
  }
  keep_chosen_copies(cfg, d.train, d.dev);
  if (cfg.data_max_train_utterances > 0 && static_cast<int64_t>(d.train.utterances.size()) > cfg.data_max_train_utterances)
    d.train.utterances.resize(static_cast<size_t>(cfg.data_max_train_utterances));
  if (cfg.data_max_dev_utterances > 0 && static_cast<int64_t>(d.dev.utterances.size()) > cfg.data_max_dev_utterances)
    d.dev.utterances.resize(static_cast<size_t>(cfg.data_max_dev_utterances));
  keep_trainable(cfg, d);
  add_split_speakers(d);
  return d;
}

}  // namespace timitseg::train
