// Internals shared by data/dataset.cpp, data/prepare.cpp and data/prepare_write.cpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/corpus.h"
#include "data/dataset.h"
#include "data/features.h"
#include "data/prepare_stage.h"

namespace timitseg::data {

// One utterance after `prepare`'s processing stage (data/prepare.cpp).
struct ProcessedUtterance {
  bool ok = false;
  std::vector<Problem> problems;
  std::vector<float> features;  // [T][dim]
  std::vector<int32_t> labels;  // [T]
  int64_t num_samples = 0;
  double seconds = 0.0;
  int32_t sample_rate = 0;  // the audio file's own rate (prepare --corpus: the recorded reference's samples)
  // prepare --corpus of an utterance with a transcript and no times: labels empty,
  // num_frames its T, transcript [N] and transcript_optional [N] as data::Utterance's
  int32_t num_frames = 0;
  std::vector<int32_t> transcript;
  std::vector<uint8_t> transcript_optional;
  std::vector<int32_t> transcript_slot;  // as data::Utterance's (empty: every phone its own slot)
};

// One TIMIT utterance after prepare's processing stage (data/prepare.cpp):
// what the summary and the split plan need. Its features [T][dim] (float32) and
// frame labels [T] (int32) are in the staging folder's utterance spill, not in memory.
struct SpilledUtterance {
  bool ok = false;
  std::vector<Problem> problems;
  int64_t num_samples = 0;
  double seconds = 0.0;
  int64_t frames = 0;    // T
  int64_t segments = 0;  // maximal runs of its frame labels (frame_segments)
  uint64_t features_at = 0, labels_at = 0;  // byte offsets in the spill
};

// One split's file, its manifest entry, counts and duration statistics (data/prepare_write.cpp).
struct SplitOut {
  nlohmann::ordered_json file, counts, durations;
  PrepareSummary::SplitCount count;
};

// One split: the utterances utts[idx[k]] (read back from `spill`, open for
// reading) concatenated into STAGE/SPLIT.safetensors, byte for byte what st::save
// writes of them, hashed, counted, with the duration statistics of durations.json.
SplitOut build_split(const std::string& split, const std::vector<size_t>& idx, const std::vector<CorpusUtterance>& work,
                     const std::vector<SpilledUtterance>& utts, const Spill& spill, const FeatureOptions& feature_opts,
                     const nlohmann::ordered_json& opts_json, const std::filesystem::path& stage);

// STAGE/cmvn.safetensors: mean and variance of the train utterances utts[train[k]], read back from `spill`.
void write_cmvn(const std::vector<size_t>& train, const std::vector<SpilledUtterance>& utts, const Spill& spill, int dim,
                const std::filesystem::path& stage);

// STAGE/phones.json: the phone sets and the 61 -> 48 / 39 maps.
void write_phone_maps(const std::filesystem::path& stage);

// ---- shared by the TIMIT path (data/prepare.cpp) and other corpora (data/prepare_corpus.cpp) ----
// The kind of a problem line for the summary's counts ("unknown phone", ...).
std::string problem_kind(const std::string& message);
// Refuses (std::invalid_argument, one line) a WORKDIR prepare did not write.
void check_output_folder(const std::string& workdir);
// True when WORKDIR's manifest.json records the same source, fingerprint and
// options and every file it lists verifies.
bool manifest_matches(const std::string& workdir, const std::string& source, const std::string& fingerprint,
                      const nlohmann::ordered_json& opts_json, const nlohmann::ordered_json& split_opts);
// The summary of an up-to-date WORKDIR, read back from its manifest.json.
void summary_from_manifest(const std::string& workdir, PrepareSummary& sum);
// TIMIT's layout labelled in another phone set than timit61: --phone-set names
// one, or (without --phone-set) the corpus folder holds a phone_set.yaml of one
// (`synth --voice espeak --format timit` writes it). prepare_corpus reads it then.
bool timit_layout_of_another_phone_set(const PrepareOptions& prepare_opts);
// `prepare --corpus DIR --format textgrid|buckeye|kaldi|manifest` (data/prepare_corpus.cpp),
// and the timit layout of another phone set.
PrepareSummary prepare_corpus(const PrepareOptions& opts);

}  // namespace timitseg::data
