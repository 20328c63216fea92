// `timitseg evaluate` and `timitseg decode` (docs/training.md).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model.h"
#include "model/train.h"

namespace timitseg::model {

struct EvaluateOptions {
  std::string checkpoint;
  std::string split = "dev";      // dev | core-test | test | train
  std::string workdir;            // "" = the checkpoint's data.workdir
  std::string backend;            // "" = the checkpoint's crf.backend
  std::string json_out;           // "" = none
  std::string dump_scores_dir;    // "" = none
  std::string device;               // cpu | cuda | auto ("" = auto: the GPU when present)
  int batch_size = 32;
  int threads = 0;
};
// Prints the metrics table on stdout; returns the metrics JSON.
nlohmann::json evaluate(const EvaluateOptions& o);

struct DecodeOptions {
  std::string checkpoint;
  std::vector<std::string> inputs;  // audio files or folders (TIMIT trees)
  std::string out_dir;
  std::string backend;  // "" = the checkpoint's crf.backend
  std::string device;   // cpu | cuda | auto ("" = auto: the GPU when present)
  int threads = 0;
};
// Writes OUT/<name>.PHN (sample units) and OUT/<name>.TextGrid per input.
// Returns the number of utterances decoded.
int decode(const DecodeOptions& o);

// Segment boundary in samples for a boundary before frame `frame`: the midpoint
// between the centres of frames frame-1 and frame (0 for frame 0).
int64_t boundary_sample(int64_t frame, const data::FeatureOptions& opts);

// Praat TextGrid (long text format) with one interval tier "phones".
std::string textgrid(const std::vector<std::tuple<int64_t, int64_t, std::string>>& phn, int64_t num_samples,
                     int sample_rate);

}  // namespace timitseg::model
