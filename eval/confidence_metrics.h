// The scores of the confidences in `evaluate --align` (docs/align.md
// "Confidence"): AUROC (ties counted one half) and expected calibration error
// over 10 equal-width bins, with the bins of a reliability plot.
#pragma once

#include <cstdint>
#include <optional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace timitseg::eval {

// P(score of a random positive > score of a random negative) + 1/2 P(equal):
// the Mann-Whitney U over n_pos n_neg, with the mean rank of each group of
// ties. Empty when there are no positives or no negatives.
std::optional<double> auroc(const std::vector<double>& score, const std::vector<char>& positive);

// Reliability of confidences against 0/1 outcomes: bin k holds the
// confidences in [k/bins, (k+1)/bins) (the last bin includes 1; values are
// clamped into [0, 1] only to pick a bin). ece = sum_k n_k / n |mean
// confidence_k - mean outcome_k| (empty bins count 0). n = 0: ece 0.
struct Reliability {
  std::vector<int64_t> count;
  std::vector<double> confidence, accuracy;  // per bin (0 for an empty bin)
  double ece = 0.0;
  int64_t n = 0;
};
Reliability reliability(const std::vector<double>& confidence, const std::vector<char>& outcome, int bins = 10);

// What evaluate --align accumulates per phone (docs/align.md "Confidence").
// Why an utterance is left out of the boundary_confidence figures of `evaluate --align`.
inline constexpr const char* kLeftOutNoPhn = "no .PHN reference beside the audio";
inline constexpr const char* kLeftOutInfeasible = "no alignment of finite score";
inline constexpr const char* kLeftOutRealigned = "its .PHN phones differ from the frame labels (realigned)";
inline constexpr const char* kLeftOutMemory = "confidences over the memory limit";

struct ConfidenceMetrics {
  // boundary_confidence of each phone aligned to the reference sequence:
  // off_20ms = a boundary of the phone more than 20 ms from the .PHN's
  // (sample-accurate; the utterance's own edges are not counted);
  // within_1 = both boundaries within one frame of the frame-quantized
  // reference (the event boundary_confidence predicts).
  std::vector<double> boundary;
  std::vector<char> off_20ms, within_1;
  // label_confidence of each phone of the corrupted transcripts (10 % of each
  // transcript's phones replaced, seeded): replaced, and exact = not replaced
  // and the aligned span is the reference's (the event label_confidence predicts).
  std::vector<double> label;
  std::vector<char> replaced, exact;
  int64_t not_computed = 0;  // utterances whose confidences were not computed (memory limit)
  // Utterances whose phones are not in the boundary_confidence figures, by reason
  // (kLeftOut*): JSON "left_out", the table's last line.
  std::map<std::string, int64_t> left_out;
  nlohmann::json to_json() const;
  std::string table() const;
};

}  // namespace timitseg::eval
