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
// features.cmvn, and the train utterances that cannot train under
// crf.supervision left out (keep_trainable). Throws naming the key or the file.
TrainData load_train_data(const config::Config& cfg);

// The config keys load_train_data reads, as one string: two configs with the
// same key load the same TrainData (compare loads it once per key, so that a
// variant with augment.speed=false trains without the speed copies).
std::string train_data_key(const config::Config& cfg);

// data.cmvn speaker: each speaker's statistics over its utterances in data.train, and in data.dev, added
// to data.cmvn (Cmvn::with_speakers; nothing otherwise). load_train_data calls it last; data made in
// memory calls it once its splits are final.
void add_split_speakers(TrainData& data);

// Whether train utterance u trains on its phone sequence (the transcript
// NLL): crf.supervision transcript, or auto and u has no times.
bool trains_on_transcript(const config::Config& cfg, const data::Utterance& u);
// Whether any utterance of `split` trains on its transcript (crf.gaussian_head = auto).
bool any_trains_on_transcript(const config::Config& cfg, const data::Split& split);

// Leaves out of data.train, each named in one warning line (the first 10,
// then a count) and counted in the returned number, the utterances that cannot
// train: without times under crf.supervision segments; on a transcript, those
// whose frames cannot hold their phones (fewer frames than phones that cannot
// be skipped) or whose phone sequence has a phone outside the run's phone set.
// Throws when no train utterance is left.
size_t keep_trainable(const config::Config& cfg, TrainData& data);

}  // namespace timitseg::train
