// The phone set trained on (a data::PhoneSetSpec: TIMIT's 39, 48 or 61 or any
// other inventory), its map from a WORKDIR's frame labels and its fold onto
// the scoring set (TIMIT's 39) that PER and the other metrics use.
#pragma once

#include <string>
#include <vector>

#include "config/config.h"
#include "data/phone_set.h"

namespace timitseg::model {

// The classes trained (the phone set's phones, C of them), their fold onto the
// scoring set, and the map from the label table of a WORKDIR (the table its
// frame labels index) to classes. data.label_set 39 and 48 give C = 39 and 48;
// data.label_set 61 gives C = 60: the 61 TIMIT labels without q, which the
// data layer merges into its neighbours (docs/data.md) and which has no
// 39-phone target. The scoring set is TIMIT's 39 for the TIMIT sets and
// spec.scoring_labels() for any other.
struct LabelSet {
  int set = 39;                      // 39, 48, 61 for the shipped TIMIT sets (data.label_set), 0 for another phone set
  data::PhoneSetSpec spec;           // the inventory trained on
  std::vector<std::string> names;    // [C] spec.phones
  std::vector<int> scoring_index;        // [C] index into scoring_names (the fold)
  std::vector<std::string> scoring_names;  // [S] the scoring labels
  std::vector<std::string> label_table;  // [L] the WORKDIR labels that frame labels index (TIMIT: the 61 .PHN labels)
  std::vector<int> label_to_class;       // [L] label index -> class; -1 for merged labels (TIMIT's q, never a frame label)
  // A shipped TIMIT set (39, 48, 61) over TIMIT's label table.
  static LabelSet make(int set);
  // `spec` over `label_table` (default: spec.phones, the table of a WORKDIR of
  // that inventory). Throws std::invalid_argument naming the labels of the
  // table that the set does not know (LabelKind::unknown), up to 5 and the count.
  static LabelSet make(const data::PhoneSetSpec& spec, const std::vector<std::string>& label_table);
  static LabelSet make(const data::PhoneSetSpec& spec) { return make(spec, spec.phones); }
  int class_of_label(int label_index) const;  // class of a WORKDIR label; -1 for a merged one (never in prepared labels)
  int size() const { return static_cast<int>(names.size()); }
  bool is_timit() const { return set != 0; }
};

// The phone set a run trains on: data.phone_set when given (a shipped name
// such as timit39 or buckeye, or a phone-set file), else TIMIT's
// data.label_set on a TIMIT WORKDIR, else the WORKDIR's own inventory; over
// the WORKDIR's label table. Throws one line naming the phone set and the
// WORKDIR when a label of the WORKDIR is not in the set.
LabelSet training_label_set(const config::Config& cfg, const data::WorkdirPhoneSet& workdir_set, const std::string& workdir);

// A checkpoint's label set rebound to a WORKDIR's label table, for evaluate,
// report and compare: throws one line naming the checkpoint's phone set and
// the WORKDIR's (names and digests) and the labels that do not fit, when a
// label of the WORKDIR is not in the checkpoint's set.
void bind_workdir(LabelSet& ls, const std::string& workdir, const std::string& checkpoint);
void bind_workdir(LabelSet& ls, const data::WorkdirPhoneSet& w, const std::string& workdir,
                  const std::string& checkpoint);

}  // namespace timitseg::model
