// The error types of PER (common/levenshtein.h levenshtein_counts) against hand
// cases and an exhaustive oracle: every alignment of two short sequences
// enumerated, the minimal cost taken, and among the alignments of that cost the
// one with the most substitutions; and Metrics' JSON and table carrying them.
#include <gtest/gtest.h>

#include <random>

#include "eval/metrics.h"

using namespace timitseg;

namespace {

struct Tally {
  int cost, s, d, i;
};

// Every alignment of ref[i..) with hyp[j..): a match or substitution, a
// deletion (ref phone alone) or an insertion (hyp phone alone) at each step.
void all_alignments(const std::vector<int>& ref, const std::vector<int>& hyp, size_t i, size_t j, Tally t,
                    std::vector<Tally>& out) {
  if (i == ref.size() && j == hyp.size()) {
    out.push_back(t);
    return;
  }
  if (i < ref.size() && j < hyp.size()) {
    Tally u = t;
    if (ref[i] != hyp[j]) ++u.cost, ++u.s;
    all_alignments(ref, hyp, i + 1, j + 1, u, out);
  }
  if (i < ref.size()) all_alignments(ref, hyp, i + 1, j, {t.cost + 1, t.s, t.d + 1, t.i}, out);
  if (j < hyp.size()) all_alignments(ref, hyp, i, j + 1, {t.cost + 1, t.s, t.d, t.i + 1}, out);
}

}  // namespace

TEST(EditCounts, HandCases) {
  EditCounts e = levenshtein_counts({1, 2, 3}, {1, 2, 3});
  EXPECT_EQ(e.substitutions + e.deletions + e.insertions, 0);
  e = levenshtein_counts({1, 2, 3}, {1, 3});
  EXPECT_EQ(e.deletions, 1);
  EXPECT_EQ(e.substitutions + e.insertions, 0);
  e = levenshtein_counts({1, 2, 3}, {1, 4, 2, 3});
  EXPECT_EQ(e.insertions, 1);
  EXPECT_EQ(e.substitutions + e.deletions, 0);
  // "a b" against "b a": two substitutions, not a deletion and an insertion.
  e = levenshtein_counts({1, 2}, {2, 1});
  EXPECT_EQ(e.substitutions, 2);
  EXPECT_EQ(e.deletions + e.insertions, 0);
  e = levenshtein_counts({}, {1, 2});
  EXPECT_EQ(e.insertions, 2);
  e = levenshtein_counts({5, 6, 7}, {});
  EXPECT_EQ(e.deletions, 3);
  // a x b c -> a b y: delete x, substitute c by y.
  e = levenshtein_counts({1, 9, 2, 3}, {1, 2, 4});
  EXPECT_EQ(e.substitutions, 1);
  EXPECT_EQ(e.deletions, 1);
  EXPECT_EQ(e.insertions, 0);
}

TEST(EditCounts, ExhaustiveOracle) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    std::uniform_int_distribution<int> len(0, 6), sym(0, 2);
    std::vector<int> ref(len(rng)), hyp(len(rng));
    for (int& x : ref) x = sym(rng);
    for (int& x : hyp) x = sym(rng);
    std::vector<Tally> all;
    all_alignments(ref, hyp, 0, 0, {0, 0, 0, 0}, all);
    Tally best = all[0];
    for (const Tally& t : all)
      if (t.cost < best.cost || (t.cost == best.cost && t.s > best.s)) best = t;
    const EditCounts e = levenshtein_counts(ref, hyp);
    ASSERT_EQ(e.total(), best.cost) << "trial " << trial;
    ASSERT_EQ(e.total(), levenshtein(ref, hyp)) << "trial " << trial;
    ASSERT_EQ(e.substitutions, best.s) << "trial " << trial;
    ASSERT_EQ(e.deletions, best.d) << "trial " << trial;
    ASSERT_EQ(e.insertions, best.i) << "trial " << trial;
  }
}

TEST(EditCounts, MetricsJsonAndTable) {
  eval::Metrics m({"a", "b", "c"});
  // ref phones a b c; pred runs a b a c: one insertion.
  m.add({0, 0, 0, 1, 1, 2, 2, 2}, {0, 0, 1, 1, 1, 0, 2, 2});
  // ref phones a b c a against pred phones c b: substitute a by c, match b, delete c and a: 1 S, 2 D.
  m.add_sequence({0, 1, 2, 0}, {2, 2, 1, 1});
  EXPECT_EQ(m.insertions(), 1);
  EXPECT_EQ(m.substitutions(), 1);
  EXPECT_EQ(m.deletions(), 2);
  const auto j = m.to_json();
  EXPECT_EQ(j["phone_edits"].get<int64_t>(), 4);
  EXPECT_EQ(j["phone_substitutions"].get<int64_t>(), 1);
  EXPECT_EQ(j["phone_deletions"].get<int64_t>(), 2);
  EXPECT_EQ(j["phone_insertions"].get<int64_t>(), 1);
  EXPECT_DOUBLE_EQ(j["per"].get<double>(), 4.0 / 7.0);
  // The table's line: per 100 reference phones (7), then the counts.
  EXPECT_NE(m.table().find("14.29 / 28.57 / 14.29 %  (1 / 2 / 1)"), std::string::npos) << m.table();
}
