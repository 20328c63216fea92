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

#include "app/report/report_input.h"
#include "crf/backend.h"
#include "data/dataset.h"
#include "model/labels.h"

namespace timitseg::app::report {

// The log-mel spectrogram of `u` from its audio (u.audio_path), on the frames
// of `f` (frame length, shift, snip_edges, sample rate): fbank with
// kSpectrogramMelBins bins, no energy, no deltas. Throws naming the path when
// the audio cannot be read or its frame count differs from u.num_frames.
std::vector<float> log_mel_spectrogram(const data::Utterance& u, const data::FeatureOptions& f, int* bins);

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
