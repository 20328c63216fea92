// The Gaussian head's re-estimation (crf.gaussian_head, crf.gaussian_weight; model/gaussian_head.h):
// before each epoch, every class's diagonal Gaussian of the normalized features
// from the train split's frames and their classes, written into the run's
// parameters (the head takes no gradient step).
#pragma once

#include <cstdint>
#include <string>

#include "train/train_data.h"
#include "train/training_run.h"

namespace timitseg::train {

struct GaussianEstimate {
  int64_t frames = 0;
  int timed = 0;        // utterances by their frame labels (gold times)
  int aligned = 0;      // utterances by the forced alignment of their transcript under the current model
  int flat = 0;         // utterances by the flat start's equal split (before any training step)
  int graphs = 0;       // of `aligned`: transcripts with several pronunciations, by their best combination
  int infeasible = 0;   // transcripts the alignment found no path for, left out
  int empty_classes = 0;
  double seconds = 0;
  std::string describe() const;
};

// Re-estimates r's Gaussian head from data.train (nothing when the model has
// none) and installs it in r.exec. Transcript utterances: the flat start's
// labels while no step has been taken, else the forced alignment of the
// current model (no dropout); a transcript with several pronunciations by the
// best-scoring of its pronunciation combinations (model::pronunciation_chains,
// up to 16, as `align --dict`), its primary path in the flat start. Deterministic: every rank
// of several processes computes the same head from the whole split.
GaussianEstimate reestimate_gaussian_head(detail::TrainingRun& r, const TrainData& data);

}  // namespace timitseg::train
