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

// The error types of PER (sclite's and Kaldi's compute-wer's report): the
// substitutions, deletions (a reference phone with no partner) and insertions
// (a hypothesis phone with no partner) of one alignment of minimal cost
// (substitutions + deletions + insertions == levenshtein(ref, hyp)). Several
// minimal alignments can split the cost differently (ref "a b", hyp "b a": 2
// substitutions, or a deletion and an insertion); this one has the most
// substitutions, so the fewest deletions and insertions (deletions - insertions
// is ref.size() - hyp.size() in every alignment): the split does not depend on
// a backtrace's tie order.
struct EditCounts {
  int substitutions = 0, deletions = 0, insertions = 0;
  int total() const { return substitutions + deletions + insertions; }
};
inline EditCounts levenshtein_counts(const std::vector<int>& ref, const std::vector<int>& hyp) {
  // DP over (cost, deletions), compared lexicographically: [i][j] -> the best
  // alignment of ref[0, i) with hyp[0, j). Rows rolled as in levenshtein.
  struct Cell {
    int cost, del;
    bool operator<(const Cell& o) const { return cost != o.cost ? cost < o.cost : del < o.del; }
  };
  std::vector<Cell> prev(hyp.size() + 1), cur(hyp.size() + 1);
  for (size_t j = 0; j <= hyp.size(); ++j) prev[j] = {static_cast<int>(j), 0};
  for (size_t i = 1; i <= ref.size(); ++i) {
    cur[0] = {static_cast<int>(i), static_cast<int>(i)};
    for (size_t j = 1; j <= hyp.size(); ++j) {
      const Cell diag{prev[j - 1].cost + (ref[i - 1] == hyp[j - 1] ? 0 : 1), prev[j - 1].del};
      const Cell del{prev[j].cost + 1, prev[j].del + 1};
      const Cell ins{cur[j - 1].cost + 1, cur[j - 1].del};
      cur[j] = std::min({diag, del, ins});
    }
    std::swap(prev, cur);
  }
  const Cell& end = prev[hyp.size()];
  EditCounts e;
  e.deletions = end.del;
  e.insertions = end.del - (static_cast<int>(ref.size()) - static_cast<int>(hyp.size()));
  e.substitutions = end.cost - e.deletions - e.insertions;
  return e;
}

}  // namespace timitseg
