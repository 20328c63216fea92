// `timitseg evaluate` and `timitseg decode` (docs/training.md).
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/boundary_shifts.h"
#include "eval/posterior_boundaries.h"
#include "eval/silence_edges.h"
#include "data/split_name.h"
#include "eval/formats.h"
#include "model/model.h"
#include "eval/evaluate.h"
#include "eval/pipeline.h"

namespace timitseg::eval {

struct EvaluateOptions {
  std::string checkpoint;
  data::SplitName split = data::SplitName::dev;  // dev | core-test | test | train
  std::string workdir;            // "" = the checkpoint's data.workdir
  std::optional<crf::BackendKind> backend;  // --crf-backend; unset = inference_crf_backend (options/options.h)
  std::string json_out;           // "" = none
  std::string dump_scores_dir;    // "" = none
  std::string dump_predictions;   // "" = none; else a predictions JSONL (score's input format, below)
  config::DeviceSetting device = config::DeviceSetting::automatic;  // --device (auto: the GPU when present)
  int batch_size = 32;
  int threads = 0;
  std::optional<double> phone_bonus;  // --phone-bonus; unset = the checkpoint's crf.phone_bonus
  std::optional<config::DecodeMode> decode;  // --decode viterbi | posterior; unset = the checkpoint's crf.decode
  bool progress = true;               // a progress bar on stderr (--no-progress: none)
  // Files the caller writes after evaluate returns ((flag, path): the plots of `timitseg evaluate`),
  // refused with evaluate's own outputs when one is an input or another output.
  std::vector<std::pair<std::string, std::string>> more_outputs;
  int64_t max_utterances = 0;         // --max-utterances: the first N of the split in its order (0 = all)
  bool align = false;                 // --align: also forced-align each reference phone sequence (eval/align_metrics.h), "align" in the JSON
  // With --align (eval/boundary_shifts.h): fit_shifts writes each phone's median boundary error on this
  // split to a file; shifts applies such a file before the sample-accurate scores. "" = none.
  std::string fit_shifts;
  std::string shifts;
  ShiftContext shift_context = ShiftContext::phone;  // --shift-context: phone | pair (with --fit-shifts)
  int shift_min_boundaries = kShiftMinBoundaries;  // --shift-min-boundaries: a phone is fitted from at least this many boundaries
  // With --align: --silence-edges auto|on|off (auto: on for a checkpoint trained on transcripts),
  // --silence-margin-db, --silence-max-move-ms (eval/silence_edges.h); before the shifts
  SilenceEdgesSetting silence_edges = SilenceEdgesSetting::automatic;
  SilenceEdgeOptions silence_edge_options;
  // With --align: --boundaries auto|viterbi|posterior (eval/posterior_boundaries.h; auto: posterior,
  // for every checkpoint), before the silence edges
  BoundariesSetting boundaries = BoundariesSetting::automatic;
};
// Prints the metrics table on stdout; returns the metrics JSON.
nlohmann::json evaluate(const EvaluateOptions& o);

// Frame predictions of a whole split as JSONL, one line per utterance in split
// order: {"index": I (0-based), "utterance_id": ID, "phones": [39-phone name per
// frame]}; other fields are allowed and ignored. `evaluate --dump-predictions`
// writes it, `timitseg score` reads it (also from other programs).
struct ScoreOptions {
  std::string workdir;      // prepared WORKDIR
  data::SplitName split = data::SplitName::core_test;
  std::string predictions;  // the JSONL file (frame predictions)
  std::string spans;        // --spans: a JSONL of phone spans instead (score_spans)
  std::string json_out;     // "" = none
};
// Scores the predictions against the split's reference labels with Metrics
// (the same numbers evaluate prints for the same predictions); prints the table
// on stdout and returns the metrics JSON. Errors name the file and line: a
// missing or extra line, an index or utterance id out of order, a length
// different from the utterance's frames, an unknown phone name.
nlohmann::json score(const ScoreOptions& o);

// Phone spans of a whole split made by any program (a forced aligner), as
// JSONL, one line per utterance in any order: {"utterance_id": ID, "phones":
// [[start_seconds, end_seconds, label], ...]}, the labels the WORKDIR's
// scoring set's (TIMIT's 39), the phones the runs of the utterance's frame
// labels in that set. Scored as `evaluate --align` scores its own alignments
// (AlignMetrics, eval/align_metrics.h): the boundary between phones i and i+1 is the
// start of phone i+1 (a gap before a phone belongs to the phone before it, as
// in the references); frame-quantized against the frame runs (the start at the
// nearest frame boundary, boundary_sample), sample-accurate against the .PHN
// (or recorded) reference at the WORKDIR's rate (start_seconds x rate,
// rounded); an utterance whose .PHN phones differ from its frame runs is left
// out of the sample-accurate rows and counted. Prints the table, returns the
// JSON (AlignMetrics::to_json without confidences). Errors name the file and
// line: not JSON, no utterance_id, a phone not [start, end, label], bad times,
// an unknown label, another phone sequence than the reference's, an
// utterance not in the split or given twice; a missing utterance names it.
nlohmann::json score_spans(const ScoreOptions& o);

// One line of the predictions JSONL (no trailing newline).
std::string prediction_line(int64_t index, const std::string& utterance_id, const std::vector<int>& pred39,
                            const std::vector<std::string>& scoring_names);

struct DecodeOptions {
  std::string checkpoint;
  std::vector<std::string> inputs;  // audio files or folders (TIMIT trees)
  std::string out_dir;
  std::optional<crf::BackendKind> backend;  // --crf-backend; unset = inference_crf_backend (options/options.h)
  config::DeviceSetting device = config::DeviceSetting::automatic;  // --device (auto: the GPU when present)
  int threads = 0;
  std::optional<double> phone_bonus;  // --phone-bonus; unset = the checkpoint's crf.phone_bonus
  std::optional<config::DecodeMode> decode;  // --decode viterbi | posterior; unset = the checkpoint's crf.decode
  std::vector<OutputFormat> formats = {OutputFormat::phn, OutputFormat::textgrid};  // --format: align's formats (csv/json carry "posterior")
  int64_t centre_frames = 200;        // --centre-frames: a long recording's centring (0 = the whole recording)
};
// The executor for evaluate/decode/align: device from --device ("" = auto: the GPU
// when one is present; an explicit cuda without one fails with one line); the
// CRF backend from --crf-backend, else cuda on the GPU and the checkpoint's
// crf.backend on the CPU (cpu when that was cuda); the checkpoint's `auto`
// train.rnn_algo / crf.backend resolved for that device. The phone bonus:
// phone_bonus, else the checkpoint's crf.phone_bonus; the decoding: decode_opt,
// else the checkpoint's crf.decode. centre_frames: a long recording's centring
// (--centre-frames, ExecutorOptions::centre_frames).
std::unique_ptr<model::Executor> make_inference_executor(const model::ModelState& s, config::DeviceSetting device_opt,
                                                         const std::optional<crf::BackendKind>& backend_opt,
                                                         int threads,
                                                  const std::optional<double>& phone_bonus,
                                                  const std::optional<config::DecodeMode>& decode_opt,
                                                  int64_t centre_frames = 0);

// Writes OUT/<name>.<suffix> per input and --format (eval/formats.h; by
// default .PHN in samples and .TextGrid). Returns the number of utterances decoded.
int decode(const DecodeOptions& o);

}  // namespace timitseg::eval
