#include "model/labels.h"

#include <stdexcept>

#include "data/phones.h"

namespace timitseg::model {

LabelSet LabelSet::make(int set) {
  if (set != 39 && set != 48 && set != 61)
    throw std::invalid_argument("label set must be 39, 48 or 61, got " + std::to_string(set));
  const data::PhoneSet& ps = data::PhoneSet::timit();
  LabelSet ls;
  ls.set = set;
  ls.names39 = ps.names(39);
  const int n61 = static_cast<int>(ps.names61().size());
  ls.idx61_to_class.assign(n61, -1);
  if (set == 61) {
    // q has no frames in prepared labels and no 39-phone target: the 61 set trains C = 60 classes.
    for (int i = 0; i < n61; ++i) {
      if (ps.map(i, 39) < 0) continue;
      ls.idx61_to_class[i] = static_cast<int>(ls.names.size());
      ls.names.push_back(ps.names61()[i]);
    }
  } else {
    ls.names = ps.names(set);
    for (int i = 0; i < n61; ++i) ls.idx61_to_class[i] = ps.map(i, set);
  }
  ls.to39.assign(ls.names.size(), -1);
  for (int i = 0; i < n61; ++i) {
    const int a = ls.idx61_to_class[i], b = ps.map(i, 39);
    if (a >= 0) ls.to39[a] = b;
  }
  for (size_t c = 0; c < ls.to39.size(); ++c)
    if (ls.to39[c] < 0) throw std::logic_error("label set " + std::to_string(set) + ": no 39-phone map for " + ls.names[c]);
  return ls;
}

int LabelSet::from61(int idx61) const {
  if (idx61 < 0 || idx61 >= static_cast<int>(idx61_to_class.size()))
    throw std::out_of_range("phone index " + std::to_string(idx61) + " outside [0, 61)");
  return idx61_to_class[idx61];
}

}  // namespace timitseg::model
