// Evaluation metrics on 39 phones (docs/training.md "Metrics"). Every metric is
// computed from frame label sequences (ids in [0, num_classes)) of the reference
// and the prediction; phone sequences / segments are the maximal runs of equal
// labels (adjacent predicted segments with the same label are merged).
//   PER          sum Levenshtein(ref phones, pred phones) / sum len(ref phones)
//   boundaries   internal run boundaries (frame index t where label[t] != label[t-1]);
//                a predicted boundary matches an unmatched reference boundary at
//                most `tol` frames away (one-to-one, greedy left to right)
//   segments     exact (start, end, label) matches
//   frames       accuracy of frame labels
//   durations    per phone: reference / predicted segment count and mean duration,
//                |mean difference|, KL(ref || pred) and JS divergence of duration
//                histograms (bins 1..100 frames, last bin = 100+), KL with +0.5
//                add-half smoothing on every bin, JS unsmoothed (log base e)
//   confusion    frame counts [ref][pred]
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace timitseg::model {

// Levenshtein distance (unit-cost insertions, deletions, substitutions) of two
// sequences: phone sequences for PER, strings for config-key suggestions.
template <class Seq>
int levenshtein(const Seq& a, const Seq& b) {
  std::vector<int> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}
inline int levenshtein(const std::vector<int>& a, const std::vector<int>& b) { return levenshtein<std::vector<int>>(a, b); }
// Maximal runs of a frame label sequence: (start, length, label).
struct Run {
  int start, length, label;
};
std::vector<Run> runs_of(const std::vector<int>& frames);

struct PRF {
  int64_t matched_pred = 0, matched_ref = 0, num_pred = 0, num_ref = 0;
  double precision() const { return num_pred ? double(matched_pred) / num_pred : 0.0; }
  double recall() const { return num_ref ? double(matched_ref) / num_ref : 0.0; }
  double f1() const {
    const double p = precision(), r = recall();
    return p + r > 0 ? 2 * p * r / (p + r) : 0.0;
  }
};

// Number of one-to-one matches between sorted boundary lists within tol frames.
int64_t match_boundaries(const std::vector<int>& ref, const std::vector<int>& pred, int tol);

class Metrics {
 public:
  explicit Metrics(std::vector<std::string> names);  // class names (39)
  // ref and pred: frame labels of one utterance, same length.
  void add(const std::vector<int>& ref, const std::vector<int>& pred);

  double per() const { return ref_phones_ ? double(edits_) / ref_phones_ : 0.0; }
  double frame_accuracy() const { return frames_ ? double(correct_frames_) / frames_ : 0.0; }
  const PRF& boundary(int tol) const { return boundary_[tol]; }
  const PRF& segment() const { return segment_; }
  int64_t utterances() const { return utterances_; }
  nlohmann::json to_json() const;
  std::string table() const;  // human-readable summary

  static constexpr int kMaxTol = 5;  // boundary F1 at tolerances 0..5 frames (JSON keys "0".."5")
  static constexpr int kHistBins = 100;

 private:
  std::vector<std::string> names_;
  int C_;
  int64_t utterances_ = 0, edits_ = 0, ref_phones_ = 0, frames_ = 0, correct_frames_ = 0;
  PRF boundary_[kMaxTol + 1];
  PRF segment_;
  std::vector<int64_t> confusion_;                 // [C][C]
  std::vector<int64_t> hist_ref_, hist_pred_;      // [C][kHistBins]
  std::vector<double> dur_sum_ref_, dur_sum_pred_; // [C]
  std::vector<int64_t> count_ref_, count_pred_;    // [C]
};

// KL(p || q) with add-half smoothing, and JS(p, q); inputs are counts.
double kl_divergence_smoothed(const std::vector<int64_t>& p, const std::vector<int64_t>& q);
double js_divergence(const std::vector<int64_t>& p, const std::vector<int64_t>& q);

}  // namespace timitseg::model
