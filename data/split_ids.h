// The utterance names of a prepared split, read from the header of its file
// (WORKDIR/SPLIT.safetensors, metadata "utterances") without loading the
// features: enough to know which augmented copies a WORKDIR holds
// (`compare --ablation augment`, train/compare_plan.h).
#pragma once

#include <string>
#include <vector>

namespace timitseg::data {

// The ids of WORKDIR/SPLIT.safetensors's utterances, in order; an empty list
// when the file does not exist. Throws std::runtime_error naming the file when
// its header is not that of a prepared split.
std::vector<std::string> split_utterance_ids(const std::string& workdir, const std::string& split);

}  // namespace timitseg::data
