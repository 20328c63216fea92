// Levenshtein distance of two sequences (the metrics' PER, eval/metrics.h, and
// the config's key suggestions, config/config.cpp).
#pragma once

#include <algorithm>
#include <vector>

namespace timitseg {

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

}  // namespace timitseg
