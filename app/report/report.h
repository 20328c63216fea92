// The HTML report of `timitseg report` and of `train` (RUN_DIR/report.html,
// refreshed every epoch): one self-contained file, inline SVG + CSS, no script,
// nothing fetched (docs/report.md). Training curves come from
// RUN_DIR/metrics.jsonl (field by field; a missing field is "n/a"), the
// config and environment from RUN_DIR/config.yaml and RUN_DIR/run.json (if
// present); confusion matrix, durations, boundary F1 against tolerance and the
// drawn utterances from the dev predictions of the run's best checkpoint.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "crf/semicrf.h"
#include "data/dataset.h"
#include "model/labels.h"

namespace timitseg::report {

// 39-phone frame labels of one utterance: reference and prediction, [T] each.
struct UtteranceLabels {
  std::string id;
  std::vector<int> ref, pred;
};

// One run's dev predictions (the best checkpoint's).
struct RunPredictions {
  std::string source;  // e.g. "checkpoints/best.safetensors (epoch 3), dev split, 24 utterances"
  std::vector<UtteranceLabels> utterances;
  double frame_shift_ms = 10.0;  // of the features (for the boundary tolerance of 20 ms in frames)
};

// An utterance drawn under its spectrogram: raw features [T][D].
struct Spectrogram {
  std::string id;
  int T = 0, D = 0;
  std::vector<float> features;  // [T][D]
  double frame_shift_ms = 10.0;
  std::string feature_type;     // mfcc | fbank
};

struct RunReport {
  std::string run_dir;
  bool has_predictions = false;
  RunPredictions predictions;
  std::string predictions_note;  // why there are none ("no checkpoints/best.safetensors", ...)
};

// A table of the caller's, shown after the runs (`compare`: the per-model
// means and the paired significance of the differences). Cells are text.
struct ReportTable {
  std::string id, title, note;  // note: a paragraph under the title (how to read it)
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};

struct ReportInput {
  std::vector<RunReport> runs;
  std::vector<ReportTable> tables;  // optional (compare's), after the run summary
  std::vector<std::string> names39;  // phone names of the confusion matrix and durations
  std::vector<Spectrogram> drawn;    // utterances drawn (reference from the first run that has them)
};

constexpr int kDrawnUtterances = 3;

// The 39-phone labels of decoded dev utterances (reference: the utterance's
// 61-phone labels through `ls`; prediction: the Viterbi segments' labels).
RunPredictions predictions_from_segments(
    const model::LabelSet& ls, const std::vector<std::pair<const data::Utterance*, std::vector<crf::Segment>>>& dev,
    const std::string& source);

// The utterances to draw: the first n ids in sorted order (the same in every
// run on one WORKDIR), features copied.
std::vector<Spectrogram> pick_drawn(const std::vector<const data::Utterance*>& utts, const data::FeatureOptions& f,
                                    int n = kDrawnUtterances);

// Evaluates RUN_DIR/checkpoints/best.safetensors on the dev split of its
// data.workdir (CPU, data.max_dev_utterances as in training). Returns false
// with *note set when there is nothing to evaluate (no best checkpoint, no dev
// split); errors reading existing files throw.
bool predict_best(const std::string& run_dir, int threads, RunPredictions* out, std::vector<Spectrogram>* drawn,
                  std::string* note);

// The report's HTML. Throws naming the file on a malformed metrics.jsonl.
std::string build_html(const ReportInput& in);
// build_html written atomically to `path`.
void write_report(const ReportInput& in, const std::string& path);

}  // namespace timitseg::report
