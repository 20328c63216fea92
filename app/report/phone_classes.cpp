// The phonetic classes of the scoring set (see phone_classes.h).
#include "app/report/phone_classes.h"

#include <set>

namespace timitseg::app::report {

const std::vector<PhoneClass>& phone_classes() {
  static const std::vector<PhoneClass> c = {
      {"vowels", {"iy", "ih", "eh", "ae", "ah", "uw", "uh", "aa", "ey", "ay", "oy", "aw", "ow", "er"}},
      {"semivowels", {"l", "r", "w", "y", "hh"}},
      {"nasals", {"m", "n", "ng"}},
      {"fricatives", {"s", "sh", "z", "f", "th", "v", "dh"}},
      {"affricates", {"jh", "ch"}},
      {"stops", {"b", "d", "g", "p", "t", "k", "dx"}},
      {"silence", {"sil"}},
  };
  return c;
}

bool timit_scoring_set(const std::vector<std::string>& names39) {
  std::set<std::string> classed;
  for (const PhoneClass& pc : phone_classes()) classed.insert(pc.phones.begin(), pc.phones.end());
  return std::set<std::string>(names39.begin(), names39.end()) == classed && names39.size() == classed.size();
}

std::vector<int> phone_class_order(const std::vector<std::string>& names39, std::vector<std::string>* class_of) {
  std::vector<int> order;
  std::vector<bool> used(names39.size(), false);
  if (class_of) class_of->clear();
  if (!timit_scoring_set(names39)) {  // another phone set: its own order, no classes
    for (size_t i = 0; i < names39.size(); ++i) order.push_back(static_cast<int>(i));
    if (class_of) class_of->assign(names39.size(), "");
    return order;
  }
  for (const PhoneClass& pc : phone_classes())
    for (const char* p : pc.phones)
      for (size_t i = 0; i < names39.size(); ++i)
        if (!used[i] && names39[i] == p) {
          used[i] = true;
          order.push_back(static_cast<int>(i));
          if (class_of) class_of->push_back(pc.name);
        }
  for (size_t i = 0; i < names39.size(); ++i)
    if (!used[i]) {
      order.push_back(static_cast<int>(i));
      if (class_of) class_of->push_back("other");
    }
  return order;
}

}  // namespace timitseg::app::report
