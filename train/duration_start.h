// crf.duration_init = data: the segments whose durations a fresh run's
// duration model starts from (docs/training.md "Training from transcripts").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "data/dataset.h"
#include "model/labels.h"

namespace timitseg::train {

// The segments of the train split behind crf.duration_init = data, as class
// sequences whose maximal runs are the segments (what model::duration_log_prior
// and crf::fit_lognormal_durations count, runs longer than K split as the
// loss splits them):
//  - an utterance that trains on its times gives its gold segments (its frame
//    labels in classes);
//  - one that trains on its transcript (trains_on_transcript) gives the flat
//    start of its phone sequence (model::transcript_of, model::flat_start_labels:
//    its frames divided equally among its required phones, optional silences
//    none), but only for the labels that no gold segment of the split has: a
//    label's durations come from its gold segments where the split has any
//    (the equal split is a guess, every phone of an utterance equally long),
//    from the flat start where it has none (a transcripts-only corpus: every label).
// A transcript utterance whose frames cannot hold its required phones gives nothing (keep_trainable leaves it out);
// with crf.flat_start: false none does (its labels without gold segments keep the crf.init_scale draw).
struct DurationStart {
  std::vector<std::vector<int32_t>> classes;  // one gold utterance's labels, or one flat-start segment, each
  int64_t gold = 0;          // gold pieces (runs split at K)
  int64_t flat = 0;          // flat-start pieces (segments split at K)
  int flat_labels = 0;       // labels whose pieces come from the flat start
  int64_t transcripts = 0;   // utterances that train on their transcript
  bool flat_start = true;    // crf.flat_start: the transcripts gave the flat start's pieces
  int64_t segments() const { return gold + flat; }
  // "the N segments of the train split (K = k): M gold, P from an equal split of the transcripts (flat start ...)"
  std::string describe(int K) const;
};
DurationStart duration_start(const config::Config& cfg, const std::vector<data::Utterance>& train,
                             const model::LabelSet& ls, int K);

}  // namespace timitseg::train
