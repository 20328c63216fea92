// What the HTML report (app/report/report.h) is built from: the runs, their
// dev predictions, the caller's tables and the utterances drawn.
#pragma once

#include <string>
#include <vector>

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
  std::vector<std::string> scoring_names;  // the scoring labels ref/pred index (the run's phone set, folded)
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
  std::vector<std::string> scoring_names;  // phone names of the confusion matrix and durations
  std::vector<Spectrogram> drawn;    // utterances drawn (reference from the first run that has them)
};

constexpr int kDrawnUtterances = 3;

}  // namespace timitseg::app::report
