// Batch collation: utterances -> one padded batch [B][T][D] with frame labels.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "model/labels.h"

namespace timitseg::model {

// A padded batch, batch-major as in the CRF interface.
template <class S>
struct BatchInput {
  int B = 0, T = 0;
  std::vector<S> features;       // [B][T][D] (normalized; padding ignored)
  std::vector<int32_t> lengths;  // [B], each in [1, T]
  // A rank's share of a global batch (several training processes,
  // train/batches.h shard_of_batch): row b is row share_rows[b] of the global
  // batch of global_B rows padded to global_T frames, and gets that row's
  // dropout masks (the CPU draws the whole global batch's masks from the run's
  // engine and keeps its rows; the GPU hashes the global index). Empty: the
  // batch is a whole batch.
  std::vector<int32_t> share_rows;  // [B]
  int global_B = 0, global_T = 0;
};

// A padded batch, ready for the network and the CRF.
struct Batch {
  BatchInput<float> input;            // features [B][T][D] (normalized), lengths [B]
  std::vector<int32_t> labels;        // [B][T] label-set indices; padding repeats the last label
  std::vector<std::string> ids;       // [B] utterance ids
  std::vector<int32_t> source_frames; // [B] frames before --fixed-length
  int64_t frames = 0;                 // sum of lengths
};

// Collates utterances: CMVN applied when cmvn != nullptr; fixed_length > 0
// truncates or pads (zeros, label repeated) every utterance to exactly N frames
// and reports N as its length (the reference script's --fixed-length).
Batch make_batch(const std::vector<const data::Utterance*>& utts, const data::Cmvn* cmvn, const LabelSet& ls,
                 int fixed_length);

}  // namespace timitseg::model
