// The label set trained on (39, 48 or 61 TIMIT phones) and its map to the 39
// phones used for scoring.
#pragma once

#include <string>
#include <vector>

namespace timitseg::model {

// The label set trained on and its map to 39 for scoring. data.label_set 39 and
// 48 give C = 39 and 48; data.label_set 61 gives C = 60: the 61 TIMIT labels
// without q, because prepared labels never contain q (the data layer merges q
// frames into their neighbours, docs/data.md) and q has no 39-phone target.
struct LabelSet {
  int set = 39;
  std::vector<std::string> names;    // [C]
  std::vector<int> to39;             // [C] index into names39
  std::vector<std::string> names39;  // [39]
  std::vector<int> idx61_to_class;   // [61] index of names61() -> class in names, -1 for q
  static LabelSet make(int set);
  int from61(int idx61) const;  // -1 for q (never in prepared labels)
  int size() const { return static_cast<int>(names.size()); }
};

}  // namespace timitseg::model
