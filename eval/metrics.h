// Evaluation metrics on 39 phones (docs/training.md "`timitseg evaluate`" and
// "Boundary metrics at 20 ms"). Every metric is
// computed from frame label sequences (ids in [0, num_classes)) of the reference
// and the prediction; phone sequences / segments are the maximal runs of equal
// labels (adjacent predicted segments with the same label are merged).
//   PER          sum Levenshtein(ref phones, pred phones) / sum len(ref phones), and its
//                substitutions / deletions / insertions (levenshtein_counts: the minimal
//                alignment with the most substitutions)
//   boundaries   internal run boundaries (frame index t where label[t] != label[t-1]);
//                a predicted boundary matches a reference boundary at most `tol`
//                frames away, one-to-one: the count is a maximum matching
//                (match_boundaries)
//   boundaries at 20 ms  the field's segmentation metrics (Räsänen et al. 2009, as
//                TIMIT phone segmentation papers report them): precision, recall, F1
//                and R-value of the same internal boundaries with a tolerance of
//                20 ms = tolerance_frames_for_ms(20, frame shift) frames (2 at 10 ms),
//                under the two matching rules of the literature (docs/metrics.md):
//                one-to-one (match_boundaries; JSON "boundary_20ms" and
//                "boundary_20ms_one_to_one") and lenient (count_within: the rule of
//                SegFeat and UnsupSeg's code, a reference boundary may validate
//                several predictions; JSON "boundary_20ms_lenient"). Utterance starts
//                and ends are NOT counted under either (as in those protocols' code:
//                they are always right and would only inflate every number).
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

#include "common/levenshtein.h"

namespace timitseg::eval {

// levenshtein (PER): common/levenshtein.h, here as model::levenshtein too.
using ::timitseg::levenshtein;
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

// Number of one-to-one matches between sorted boundary lists within tol frames:
// the size of a maximum matching of the bipartite graph whose edges join a
// reference and a predicted boundary at most tol frames apart (each boundary
// in at most one pair). Computed greedily left to right, which is exact for
// points on a line with a symmetric window (proof in metrics.cpp; checked
// against an exhaustive maximum matching in tests/eval/test_boundary_metrics.cpp).
int64_t match_boundaries(const std::vector<int>& ref, const std::vector<int>& pred, int tol);

// The lenient rule (SegFeat, UnsupSeg; Strgar and Harwath 2022's "lenient"):
// how many of `points` (sorted, distinct) have at least one of `others`
// (sorted) within tol frames. Predictions validated = count_within(pred, ref),
// reference boundaries found = count_within(ref, pred); one reference boundary
// may validate several predictions (and one prediction several references).
int64_t count_within(const std::vector<int>& points, const std::vector<int>& others, int tol);

// The tolerance of `tol_ms` milliseconds in frames of `frame_shift_ms`: the
// largest whole number of frames not longer than tol_ms (floor of
// tol_ms / frame_shift_ms, with a relative slack of 1e-9 so that 20 / (20/3)
// gives 3, not 2.999...). 20 ms at 10 ms -> 2; at 6 ms -> 3; at 25 ms -> 0.
// Throws std::invalid_argument unless frame_shift_ms > 0 and tol_ms >= 0 (finite).
int tolerance_frames_for_ms(double tol_ms, double frame_shift_ms);

// R-value (Räsänen, Laine and Altosaar 2009, "An improved speech segmentation
// quality measure: the R-value", Interspeech) from match counts:
//   HR = recall = matched / num_ref,  OS = num_pred / num_ref - 1  (= R/P - 1 when P > 0)
//   r1 = sqrt((1 - HR)^2 + OS^2),  r2 = (-OS + HR - 1) / sqrt(2),  R = 1 - (|r1| + |r2|) / 2
// OS from the counts defines it also where P = 0: no predicted boundary gives
// OS = -1 and R = 1 - sqrt(2)/2 = 0.2929; predictions that all miss give a
// finite value too. R = 1 exactly when every reference boundary is hit and
// nothing else is predicted; R <= 1 always, and R < 0 under heavy
// over-segmentation (with every boundary hit: once OS > 2 / (1 + 1/sqrt 2) = 1.17). num_ref == 0: 0 (no boundary to find; never NaN).
double r_value(int64_t matched, int64_t num_ref, int64_t num_pred);
// R-value from precision and recall as the code of UnsupSeg and of Strgar and
// Harwath computes it for both rules: OS = recall / precision - 1 (-1 when
// precision is 0, where recall is 0 too), HR = recall, r1, r2 and R as above.
// Under one-to-one matching with at least one match this is r_value(counts)
// exactly (R/P = num_pred/num_ref); under the lenient rule the hits of the two
// sides differ and this, not num_pred/num_ref - 1, is what those papers report.
double r_value_pr(double precision, double recall);

class Metrics {
 public:
  // names: class names (39); frame_shift_ms: the features' frame shift (the
  // checkpoint's or the WORKDIR's FeatureOptions), for the tolerance of 20 ms in frames.
  explicit Metrics(std::vector<std::string> names, double frame_shift_ms = 10.0);
  // ref and pred: frame labels of one utterance, same length.
  void add(const std::vector<int>& ref, const std::vector<int>& pred);
  // An utterance without phone times: ref_phones is its transcript's phone
  // sequence (scoring-set indices), pred its decoded frame labels. Counts in
  // the PER only (utterances(), sequence_only()); the boundary, segment and
  // frame figures need times.
  void add_sequence(const std::vector<int>& ref_phones, const std::vector<int>& pred);
  // The utterances scored by add_sequence (PER only).
  int64_t sequence_only() const { return sequence_only_; }

  double per() const { return ref_phones_ ? double(edits_) / ref_phones_ : 0.0; }
  int64_t substitutions() const { return substitutions_; }
  int64_t deletions() const { return deletions_; }
  int64_t insertions() const { return insertions_; }
  double frame_accuracy() const { return frames_ ? double(correct_frames_) / frames_ : 0.0; }
  const PRF& boundary(int tol) const { return boundary_[tol]; }
  const PRF& segment() const { return segment_; }
  // Boundaries at a tolerance of kBoundaryToleranceMs (JSON "boundary_20ms").
  const PRF& boundary_20ms() const { return boundary_20ms_; }
  double boundary_20ms_r_value() const {
    return r_value(boundary_20ms_.matched_ref, boundary_20ms_.num_ref, boundary_20ms_.num_pred);
  }
  // The lenient rule at 20 ms (JSON "boundary_20ms_lenient"): matched_pred =
  // predictions with a reference boundary within the tolerance, matched_ref =
  // reference boundaries with a prediction within it.
  const PRF& boundary_20ms_lenient() const { return boundary_20ms_lenient_; }
  double boundary_20ms_lenient_r_value() const {  // 0 without reference boundaries, as r_value
    return boundary_20ms_lenient_.num_ref
               ? r_value_pr(boundary_20ms_lenient_.precision(), boundary_20ms_lenient_.recall())
               : 0.0;
  }
  int tolerance_20ms_frames() const { return tol_20ms_frames_; }
  double frame_shift_ms() const { return frame_shift_ms_; }
  int64_t utterances() const { return utterances_; }
  nlohmann::json to_json() const;
  std::string table() const;  // human-readable summary

  static constexpr int kMaxTol = 5;  // boundary F1 at tolerances 0..5 frames (JSON keys "0".."5")
  static constexpr int kHistBins = 100;
  static constexpr double kBoundaryToleranceMs = 20.0;

 private:
  std::vector<std::string> names_;
  int C_;
  double frame_shift_ms_;
  int tol_20ms_frames_;
  int64_t utterances_ = 0, edits_ = 0, ref_phones_ = 0, frames_ = 0, correct_frames_ = 0;
  int64_t substitutions_ = 0, deletions_ = 0, insertions_ = 0;  // edits_ by type
  void add_edits(const EditCounts& e) {
    edits_ += e.total();
    substitutions_ += e.substitutions;
    deletions_ += e.deletions;
    insertions_ += e.insertions;
  }
  int64_t sequence_only_ = 0;
  PRF boundary_[kMaxTol + 1];
  PRF segment_;
  PRF boundary_20ms_;
  PRF boundary_20ms_lenient_;
  std::vector<int64_t> confusion_;                 // [C][C]
  std::vector<int64_t> hist_ref_, hist_pred_;      // [C][kHistBins]
  std::vector<double> dur_sum_ref_, dur_sum_pred_; // [C]
  std::vector<int64_t> count_ref_, count_pred_;    // [C]
};

// KL(p || q) with add-half smoothing, and JS(p, q); inputs are counts.
double kl_divergence_smoothed(const std::vector<int64_t>& p, const std::vector<int64_t>& q);
double js_divergence(const std::vector<int64_t>& p, const std::vector<int64_t>& q);

}  // namespace timitseg::eval
