// Per-phone boundary shifts: a labelling convention learned from a few timed
// utterances (docs/align.md "Calibrating to a labelling convention").
//
// A model places the boundary into a phone consistently earlier or later than
// a given set of reference labels (where a stop's release starts, how long a
// final fade lasts: conventions a transcript does not carry). `evaluate
// --align --fit-shifts FILE` fits, for each phone, the median signed error of
// the boundaries into it (aligned minus reference, sample-accurate) on a split
// whose times are known; `align --shifts FILE` and `evaluate --align --shifts
// FILE` subtract it from every boundary into that phone (the boundary-correction
// idea of Stolcke et al. 2014, reduced to one offset per phone).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/enum_names.h"
#include "model/labels.h"

namespace timitseg::eval {

// What a shift is keyed by (evaluate --shift-context): the phone after the
// boundary, or the pair of phones around it with the phone's shift where the
// pair has too few boundaries (the error of a boundary into `l` after a vowel
// and after a stop differ).
enum class ShiftContext { phone, pair };

TIMITSEG_ENUM_NAMES(ShiftContext, 2, {ShiftContext::phone, "phone"}, {ShiftContext::pair, "pair"});

struct BoundaryShifts {
  std::string phone_set;                    // the checkpoint's phone set (PhoneSetSpec::name)
  int min_boundaries = 10;                  // a phone (pair) is fitted only with at least this many boundaries
  ShiftContext context = ShiftContext::phone;
  std::map<std::string, double> shift_ms;   // label -> median signed error (aligned - reference), ms
  std::map<std::string, int64_t> boundaries;  // label -> boundaries it was fitted from
  // context pair: (phone before, phone after) -> median signed error, ms; and its boundaries
  std::map<std::pair<std::string, std::string>, double> pair_shift_ms;
  std::map<std::pair<std::string, std::string>, int64_t> pair_boundaries;
  nlohmann::json fitted_on = nlohmann::json::object();  // provenance: checkpoint, workdir, split

  // The ms to subtract from a boundary from `before` into `label`: the pair's shift, else the
  // phone's, else 0.
  double shift(const std::string& before, const std::string& label) const;
  nlohmann::json to_json() const;
};

constexpr int kShiftMinBoundaries = 10;
// evaluate --fit-shifts warns below this many speakers in the fitted utterances (docs/align.md:
// fits from one or two speakers' utterances lowered test accuracy on every corpus measured).
constexpr size_t kShiftMinSpeakers = 3;

// The median signed error of the boundaries into each phone, for the phones
// with at least min_boundaries of them: into[i] the label of the phone after
// boundary i ("" not named: left out), signed_ms[i] its error, aligned minus
// reference (BoundaryErrors' fields, eval/align_metrics.h). Context pair: also
// the median of each (from[i], into[i]) pair with at least min_boundaries
// (from[i]: the phone before boundary i). Throws std::invalid_argument when
// min_boundaries < 1, or for the pair context when from is not parallel to into.
BoundaryShifts fit_boundary_shifts(const std::vector<std::string>& from, const std::vector<std::string>& into,
                                   const std::vector<double>& signed_ms, const std::string& phone_set,
                                   int min_boundaries, ShiftContext context = ShiftContext::phone);

// Writes the shifts as JSON, atomically ({"format": "timitseg-boundary-shifts",
// "version": 1, "phone_set", "min_boundaries", "context": "phone" | "pair",
// "shift_ms", "boundaries", with pairs "pair_shift_ms" and "pair_boundaries"
// ({"before": {"after": value}}), "fitted_on"}).
void save_boundary_shifts(const BoundaryShifts& shifts, const std::string& path);

// Reads a shifts file for a checkpoint's labels. Errors name the file and
// the problem: unreadable, not JSON, another format or version, another
// phone set than the checkpoint's, a label outside it, a shift that is not a
// finite number (in shift_ms or pair_shift_ms).
BoundaryShifts load_boundary_shifts(const std::string& path, const model::LabelSet& labels);

// What apply_boundary_shifts did, summed over calls.
struct ShiftCount {
  int64_t boundaries = 0;  // internal boundaries seen
  int64_t moved = 0;       // of them, into a phone with a nonzero shift
  int64_t clamped = 0;     // of them, held back so that every phone keeps >= 1 sample
  nlohmann::json to_json() const;
};

// Moves the internal boundaries of one utterance's phones. starts [n]: each
// phone's start in samples at `rate` (non-decreasing by at least one sample),
// labels [n]: the phones' labels, end: the last phone's end. Boundary i (the
// start of phone i, i >= 1) moves to starts[i] - round(shift(labels[i]) *
// rate / 1000); then every phone is kept at least one sample long, first
// against the phone before (in order), then against the one after (in
// reverse), so the utterance's start and end never move and the order holds.
void apply_boundary_shifts(const BoundaryShifts& shifts, const std::vector<std::string>& labels, int rate, int64_t end,
                           std::vector<int64_t>* starts, ShiftCount* count = nullptr);

}  // namespace timitseg::eval
