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

bool timit_scoring_set(const std::vector<std::string>& scoring_names) {
  std::set<std::string> classed;
  for (const PhoneClass& pc : phone_classes()) classed.insert(pc.phones.begin(), pc.phones.end());
  return std::set<std::string>(scoring_names.begin(), scoring_names.end()) == classed && scoring_names.size() == classed.size();
}

std::vector<int> phone_class_order(const std::vector<std::string>& scoring_names, std::vector<std::string>* class_of) {
  std::vector<int> order;
  std::vector<bool> used(scoring_names.size(), false);
  if (class_of) class_of->clear();
  if (!timit_scoring_set(scoring_names)) {  // another phone set: its own order, no classes
    for (size_t i = 0; i < scoring_names.size(); ++i) order.push_back(static_cast<int>(i));
    if (class_of) class_of->assign(scoring_names.size(), "");
    return order;
  }
  for (const PhoneClass& pc : phone_classes())
    for (const char* p : pc.phones)
      for (size_t i = 0; i < scoring_names.size(); ++i)
        if (!used[i] && scoring_names[i] == p) {
          used[i] = true;
          order.push_back(static_cast<int>(i));
          if (class_of) class_of->push_back(pc.name);
        }
  for (size_t i = 0; i < scoring_names.size(); ++i)
    if (!used[i]) {
      order.push_back(static_cast<int>(i));
      if (class_of) class_of->push_back("other");
    }
  return order;
}

}  // namespace timitseg::app::report
