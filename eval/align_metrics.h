// The alignment metrics of `evaluate --align` and `score --spans`
// (docs/align.md): boundaries against the prepared frame labels and against
// the .PHN times (eval/align_metrics.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/corpus.h"
#include "data/dataset.h"
#include "data/features.h"
#include "data/phones.h"
#include "eval/boundary_shifts.h"
#include "eval/posterior_boundaries.h"
#include "eval/silence_edges.h"
#include "eval/confidence_metrics.h"
#include "model/checkpoint.h"
#include "model/executor.h"
#include "model/labels.h"

namespace timitseg::eval {

// Reference phones of a prepared utterance: the runs of its frame labels in
// the label set, (class, frames) each.
std::vector<std::pair<int32_t, int32_t>> reference_runs(const data::Utterance& u, const model::LabelSet& ls);

// Boundary errors and their summary: within 10/20/25/50 ms, mean and median
// |error| (a boundary counts as within t ms when its error is at most t).
struct BoundaryErrors {
  std::vector<double> abs_ms;     // |aligned - reference| per boundary, ms
  std::vector<double> signed_ms;  // aligned - reference per boundary, ms (> 0: placed late)
  std::vector<int> cls;        // broad class (index into class_names) of the phone after it; -1 none
  // the phone set's broad classes (PhoneSetSpec::broad_class_names; TIMIT's six by default); empty: none
  std::vector<std::string> class_names = data::broad_class_names();
  // Per phone (where the callers name the phones): into[i] the label of the phone after
  // boundary i (parallel to abs_ms; "" where not named), and per aligned phone its label and its length error,
  // aligned minus reference length in ms (> 0: aligned longer), the utterance's own start and end
  // counted as exact.
  std::vector<std::string> into;
  std::vector<std::string> from;  // the label of the phone before boundary i ("" where not named)
  std::vector<std::pair<std::string, double>> length_error_ms;
  // {"boundaries": N, "within_ms": {"10": f, ...}, "mean_abs_ms": m, "median_abs_ms": m,
  // "mean_signed_ms": bias (> 0: boundaries placed late)}; no fractions when N = 0 (never NaN)
  nlohmann::json summary() const;
  // summary() of the boundaries of each broad class, keyed by its name (classes with none left out)
  nlohmann::json by_class() const;
  // Per phone label, keyed by it: summary() of the boundaries into it (its start), "phones" (how
  // many times it was aligned) and "mean_length_error_ms" (aligned minus reference length); the
  // per-phone view of a consistent shift (docs/align.md). Empty when the phones were not named.
  nlohmann::json by_phone() const;
};

// Reference phones of a .PHN in a label set, in samples of the file: q merged
// into the phone before it (into the next one when it comes first), then
// consecutive phones of one class merged into one (as the frame labels merge
// them); a phone's end is the next one's start (a gap goes to the phone before
// it, as in the frame labels), the last one's end is its .PHN end.
struct RefPhone {
  int32_t cls = 0;
  int64_t start = 0, end = 0;
};
std::vector<RefPhone> phn_reference(const std::vector<data::PhnEntry>& phn, const model::LabelSet& ls);

// The sample-accurate reference of a prepared utterance in a label set and its
// file's rate: the one prepare --corpus recorded, else the .PHN beside its
// audio (phn_reference). Returns "" when fine, else one line saying why there
// is none (no .PHN, an unreadable one, no phones).
std::string sample_reference(const data::Utterance& u, const model::LabelSet& labels,
                             const data::FeatureOptions& features, std::vector<RefPhone>* ref, int* rate);

// Alignment accuracy, the field's metric: every internal reference boundary
// (between phones n and n+1) against the aligned one of the same index, twice:
// frame-quantized (abs_ms: against the prepared frame labels' runs, whole
// frames) and sample-accurate (samples: against the .PHN times, the aligned
// boundary in samples as `align` writes it).
struct AlignMetrics {
  std::vector<double> abs_ms;     // frame-quantized |aligned - reference| per boundary, ms
  std::vector<double> signed_ms;  // frame-quantized aligned - reference per boundary, ms
  BoundaryErrors samples;         // sample-accurate
  int64_t utterances = 0, infeasible = 0, without_phn = 0;  // without_phn: no readable .PHN beside the audio
  double seconds = 0.0;  // wall time of align_utterances (forward + constrained Viterbi, batches collated)
  ConfidenceMetrics confidence;  // the confidences scored (docs/align.md "Confidence")
  std::string phone_set = "timit39";  // name of the checkpoint's phone set (the note when it has no broad classes)
  // --shifts: the file whose per-phone shifts moved the sample-accurate aligned boundaries before
  // scoring ("" none; the frame-quantized rows are the model's own), and what they did
  std::string shifts_file;
  ShiftCount shifted;
  // --silence-edges: the sample-accurate aligned boundaries' silence edges moved to the energy change
  // (eval/silence_edges.h) before the shifts; unset: off. And what they did.
  std::optional<SilenceEdgeOptions> silence_edges;
  SilenceEdgeCount edge_count;
  // --boundaries: the constrained Viterbi's, or the posteriors' (both rows; crf/posterior_boundaries.h),
  // and what the posteriors moved in the alignments of the frame runs
  crf::AlignBoundaries boundary_decoding = crf::AlignBoundaries::viterbi;
  crf::PosteriorBoundaryCount posterior;
  void add(const std::vector<int32_t>& ref_ends, const std::vector<int32_t>& hyp_ends, double frame_ms);
  // Sample-accurate boundaries of one utterance: reference in samples at ref_rate,
  // aligned in samples at hyp_rate, with the broad class of the phone after each;
  // phones (empty, or the labels of the utterance's ref.size() + 1 phones in order)
  // adds the per-phone scores (BoundaryErrors::by_phone).
  void add_samples(const std::vector<int64_t>& ref, int ref_rate, const std::vector<int64_t>& hyp, int hyp_rate,
                   const std::vector<int>& cls, const std::vector<std::string>& phones = {});
  // The frame-quantized figures at the top level {"boundaries", "within_ms", "mean_abs_ms",
  // "median_abs_ms", "mean_signed_ms"}, and "samples": {the same, "by_class": {...},
  // "by_phone": {...} (when the phones were named), "without_phn": n}
  nlohmann::json to_json() const;
  // The text table; under the broad classes, the phones whose boundaries are furthest
  // off on average (the largest |bias| among those with >= kPhoneRowMinBoundaries).
  std::string table() const;
  static constexpr int kPhoneRowMinBoundaries = 20;
  static constexpr int kPhoneRows = 6;
};
// evaluate --align: aligns each utterance's reference phone sequence
// (reference_runs) with the executor, batch by batch, and scores the boundaries.
// shifts (evaluate --shifts FILE, eval/boundary_shifts.h): each aligned boundary
// in samples moved by its phone's shift before the sample-accurate scores;
// shifts_file names it in the JSON and the table.
// edges (evaluate --silence-edges; nullptr: off): before the shifts, each utterance's silence edges
// moved to the energy change of its audio (read again, at the model's rate; an utterance whose audio
// is not its own length, e.g. a Kaldi segment of a longer recording, is left as aligned and counted).
// boundaries: every alignment's boundaries, the constrained Viterbi's or the posteriors' (both rows).
AlignMetrics align_utterances(model::Executor& exec, const std::vector<const data::Utterance*>& utts, const model::ModelState& s,
                              int batch_size, const BoundaryShifts* shifts = nullptr, const std::string& shifts_file = "",
                              const SilenceEdgeOptions* edges = nullptr,
                              crf::AlignBoundaries boundaries = crf::AlignBoundaries::viterbi);

}  // namespace timitseg::eval
