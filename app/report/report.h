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

#include "crf/backend.h"
#include "data/dataset.h"
#include "model/labels.h"

namespace timitseg::app::report {

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
  std::vector<std::string> names39;  // the scoring labels ref/pred index (the run's phone set, folded)
};

// An utterance drawn with its segmentations. The picture is a log-mel
// spectrogram [T][D] computed from the utterance's audio (data/ fbank,
// Kaldi-compatible, kSpectrogramMelBins bins, the frames of the model's
// features) when the audio is reachable; otherwise the model's input features
// [T][D] with `note` saying why.
struct Spectrogram {
  std::string id;
  int T = 0, D = 0;
  std::vector<float> features;  // [T][D]: log-mel energies (log_mel) or the raw model features
  double frame_shift_ms = 10.0;
  std::string feature_type;     // mfcc | fbank: the model's features
  bool log_mel = false;         // features holds the log-mel spectrogram of the audio
  std::string audio_path;       // the audio it was computed from (the WORKDIR manifest's path)
  std::string note;             // !log_mel: why ("PATH: cannot open ...")
};
constexpr int kSpectrogramMelBins = 64;

// The log-mel spectrogram of `u` from its audio (u.audio_path), on the frames
// of `f` (frame length, shift, snip_edges, sample rate): fbank with
// kSpectrogramMelBins bins, no energy, no deltas. Throws naming the path when
// the audio cannot be read or its frame count differs from u.num_frames.
std::vector<float> log_mel_spectrogram(const data::Utterance& u, const data::FeatureOptions& f, int* bins);

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

// The phonetic classes of the 39-phone set in the conventional grouping
// (Lee & Hon 1989 / the TIMIT documentation), in the confusion matrix's order:
// vowels, semivowels and glides, nasals, fricatives, affricates, stops,
// closures and silence (docs/report.md).
struct PhoneClass {
  const char* name;
  std::vector<const char*> phones;
};
const std::vector<PhoneClass>& phone_classes();
// Whether the scoring labels are TIMIT's 39 phones (those of phone_classes()).
bool timit_scoring_set(const std::vector<std::string>& names39);
// TIMIT's scoring set: indices of names39 in phone_classes() order; *class_of
// (optional) gets each ordered phone's class name. Another phone set: its own
// order (0, 1, ...), and "" as every class (no class blocks).

std::vector<int> phone_class_order(const std::vector<std::string>& names39, std::vector<std::string>* class_of = nullptr);

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
// data.workdir, or of `workdir` when not empty (report --workdir: a WORKDIR
// moved since the run), on the CPU, data.max_dev_utterances as in training.
// Returns false with *note set when there is nothing to evaluate (no best
// checkpoint, no dev split); a missing WORKDIR and errors reading existing
// files throw.
bool predict_best(const std::string& run_dir, int threads, RunPredictions* out, std::vector<Spectrogram>* drawn,
                  std::string* note, const std::string& workdir = "");

// The legend names of runs whose folder names repeat: each path without the
// leading folders all of them share ("runs/c/seed-0/linear", "runs/c/seed-1/linear"
// -> "seed-0/linear", "seed-1/linear"); the last folder always stays.
std::vector<std::string> differing_parts(const std::vector<std::string>& dirs);

// The report's HTML. Throws naming the file on a malformed metrics.jsonl.
std::string build_html(const ReportInput& in);
// build_html written atomically to `path`.
void write_report(const ReportInput& in, const std::string& path);

}  // namespace timitseg::app::report
