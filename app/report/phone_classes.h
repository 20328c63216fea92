// The phonetic classes of TIMIT's 39-phone scoring set, the order of the
// report's confusion matrix and durations (docs/report.md).
#pragma once

#include <string>
#include <vector>

namespace timitseg::app::report {

// The phonetic classes of the 39-phone set in the conventional grouping
// (Lee & Hon 1989 / the TIMIT documentation), in the confusion matrix's order:
// vowels, semivowels and glides, nasals, fricatives, affricates, stops,
// closures and silence (docs/report.md).
struct PhoneClass {
  const char* name;
  std::vector<const char*> phones;
};
const std::vector<PhoneClass>& phone_classes();
// Whether the scoring labels are TIMIT's 39 phones (those of phone_classes()).
bool timit_scoring_set(const std::vector<std::string>& scoring_names);
// TIMIT's scoring set: indices of scoring_names in phone_classes() order; *class_of
// (optional) gets each ordered phone's class name. Another phone set: its own
// order (0, 1, ...), and "" as every class (no class blocks).
std::vector<int> phone_class_order(const std::vector<std::string>& scoring_names, std::vector<std::string>* class_of = nullptr);

}  // namespace timitseg::app::report
