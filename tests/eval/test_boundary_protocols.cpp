// Boundary scoring under the two matching rules of the segmentation literature
// (eval/metrics.h, docs/metrics.md): one-to-one (JSON "boundary_20ms_one_to_one",
// as "boundary_20ms") and lenient (SegFeat / UnsupSeg, JSON "boundary_20ms_lenient").
// Oracles: values worked out by hand (in the comments), a naive O(n m) count of the
// lenient rule as the papers' code writes it (per point, the distance to the nearest
// other point), and a maximum bipartite matching by augmenting paths (Kuhn's
// algorithm, not the greedy sweep the product uses) on random small cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "eval/metrics.h"

using namespace timitseg::eval;

namespace {

// Frame labels [T] whose internal boundaries are exactly `boundaries` (sorted, in (0, T)).
std::vector<int> labels_with(const std::vector<int>& boundaries, int T) {
  std::vector<int> l(static_cast<size_t>(T), 0);
  int label = 0;
  size_t k = 0;
  for (int t = 0; t < T; ++t) {
    if (k < boundaries.size() && boundaries[k] == t) label = 1 - label, ++k;
    l[static_cast<size_t>(t)] = label;
  }
  return l;
}

// The lenient count as UnsupSeg's utils.py and SegFeat's utils.py write it: for
// each point, min |others - point| <= tol (no others: not hit).
int64_t naive_within(const std::vector<int>& points, const std::vector<int>& others, int tol) {
  int64_t n = 0;
  for (int p : points) {
    int best = INT_MAX;
    for (int o : others) best = std::min(best, std::abs(o - p));
    n += best <= tol;
  }
  return n;
}

// Maximum bipartite matching (Kuhn's augmenting paths) between ref and pred,
// edges between boundaries at most tol apart.
int64_t kuhn_matching(const std::vector<int>& ref, const std::vector<int>& pred, int tol) {
  std::vector<int> owner(pred.size(), -1);
  std::function<bool(size_t, std::vector<char>&)> augment = [&](size_t r, std::vector<char>& seen) {
    for (size_t p = 0; p < pred.size(); ++p) {
      if (seen[p] || std::abs(ref[r] - pred[p]) > tol) continue;
      seen[p] = 1;
      if (owner[p] < 0 || augment(static_cast<size_t>(owner[p]), seen)) {
        owner[p] = static_cast<int>(r);
        return true;
      }
    }
    return false;
  };
  int64_t n = 0;
  for (size_t r = 0; r < ref.size(); ++r) {
    std::vector<char> seen(pred.size(), 0);
    n += augment(r, seen);
  }
  return n;
}

double r_by_definition(double hr, double os) {
  const double r1 = std::sqrt((1 - hr) * (1 - hr) + os * os), r2 = (-os + hr - 1) / std::sqrt(2.0);
  return 1 - (std::abs(r1) + std::abs(r2)) / 2;
}

}  // namespace

TEST(BoundaryProtocols, ThreePredictionsAroundOneReference) {
  // Reference boundary 10; predictions 9, 10, 11 (T = 20, 20 ms = 2 frames at 10 ms).
  // One-to-one: one pair -> P = 1/3, R = 1, F1 = 2(1/3)/(4/3) = 0.5;
  //   OS = 3/1 - 1 = 2, r1 = sqrt(0 + 4) = 2, r2 = (-2 + 1 - 1)/sqrt 2 = -1.4142136,
  //   R-value = 1 - (2 + 1.4142136)/2 = -0.7071068.
  // Lenient: all three predictions have the reference within 2 frames -> P = 3/3 = 1,
  //   the reference has a prediction -> R = 1, F1 = 1; OS = R/P - 1 = 0 -> R-value 1.
  Metrics m({"x", "y", "z"});
  m.add(labels_with({10}, 20), {0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1});
  const PRF& o = m.boundary_20ms(), &l = m.boundary_20ms_lenient();
  EXPECT_EQ(o.matched_pred, 1);
  EXPECT_EQ(o.num_pred, 3);
  EXPECT_DOUBLE_EQ(o.precision(), 1.0 / 3);
  EXPECT_DOUBLE_EQ(o.recall(), 1.0);
  EXPECT_DOUBLE_EQ(o.f1(), 0.5);
  EXPECT_NEAR(m.boundary_20ms_r_value(), -0.7071068, 1e-7);
  EXPECT_EQ(l.matched_pred, 3);
  EXPECT_EQ(l.matched_ref, 1);
  EXPECT_DOUBLE_EQ(l.precision(), 1.0);
  EXPECT_DOUBLE_EQ(l.recall(), 1.0);
  EXPECT_DOUBLE_EQ(l.f1(), 1.0);
  EXPECT_DOUBLE_EQ(m.boundary_20ms_lenient_r_value(), 1.0);
}

TEST(BoundaryProtocols, OnePredictionBetweenTwoReferences) {
  // References 10 and 12, one prediction 11 (T = 20).
  // One-to-one: 1 pair -> P = 1, R = 1/2, F1 = 2/3; OS = 1/2 - 1 = -0.5,
  //   r1 = sqrt(0.25 + 0.25) = 0.7071068, r2 = (0.5 + 0.5 - 1)/sqrt 2 = 0 -> R-value 0.6464466.
  // Lenient: the prediction is validated (P = 1) and both references are found
  //   (R = 2/2 = 1): one prediction validates two references; R-value 1.
  Metrics m({"x", "y", "z"});
  std::vector<int> ref = labels_with({10}, 20);
  ref[12] = ref[13] = ref[14] = ref[15] = ref[16] = ref[17] = ref[18] = ref[19] = 2;  // boundaries 10, 12
  m.add(ref, labels_with({11}, 20));
  EXPECT_EQ(m.boundary_20ms().num_ref, 2);
  EXPECT_DOUBLE_EQ(m.boundary_20ms().recall(), 0.5);
  EXPECT_DOUBLE_EQ(m.boundary_20ms().f1(), 2.0 / 3);
  EXPECT_NEAR(m.boundary_20ms_r_value(), 0.6464466, 1e-7);
  EXPECT_EQ(m.boundary_20ms_lenient().matched_ref, 2);
  EXPECT_DOUBLE_EQ(m.boundary_20ms_lenient().recall(), 1.0);
  EXPECT_DOUBLE_EQ(m.boundary_20ms_lenient_r_value(), 1.0);
}

TEST(BoundaryProtocols, LenientRValueUsesRecallOverPrecision) {
  // References 10, 20, 30, 40 (T = 50); predictions 9, 11, 21, 35.
  // Lenient: predictions validated 9, 11, 21 -> P = 3/4; references found 10, 20 -> R = 2/4.
  //   OS = R/P - 1 = (1/2)/(3/4) - 1 = -1/3 (num_pred/num_ref - 1 would be 0),
  //   r1 = sqrt(0.25 + 1/9) = 0.6009252, r2 = (1/3 + 0.5 - 1)/sqrt 2 = -0.1178511,
  //   R-value = 1 - (0.6009252 + 0.1178511)/2 = 0.6406119.
  // One-to-one: 9<->10, 21<->20 (11 is left: 10 is taken, 20 is 9 away) -> 2 pairs,
  //   P = R = 1/2, OS = 0, r1 = 0.5, r2 = -0.5/sqrt 2 = -0.3535534 -> 0.5732233.
  Metrics m({"x", "y"});
  m.add(labels_with({10, 20, 30, 40}, 50), labels_with({9, 11, 21, 35}, 50));
  EXPECT_EQ(m.boundary_20ms_lenient().matched_pred, 3);
  EXPECT_EQ(m.boundary_20ms_lenient().matched_ref, 2);
  EXPECT_NEAR(m.boundary_20ms_lenient_r_value(), 0.6406119, 1e-7);
  EXPECT_NEAR(r_value_pr(0.75, 0.5), 0.6406119, 1e-7);
  EXPECT_EQ(m.boundary_20ms().matched_ref, 2);
  EXPECT_NEAR(m.boundary_20ms_r_value(), 0.5732233, 1e-7);
  // r_value_pr by hand at the corners: perfect 1; nothing found (P = R = 0): OS = -1 -> 1 - sqrt(2)/2
  EXPECT_DOUBLE_EQ(r_value_pr(1, 1), 1.0);
  EXPECT_DOUBLE_EQ(r_value_pr(0, 0), 1.0 - std::sqrt(2.0) / 2);
}

TEST(BoundaryProtocols, JsonAndTableNameBothRules) {
  Metrics m({"x", "y", "z"});
  m.add(labels_with({10}, 20), {0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1});
  const nlohmann::json j = m.to_json();
  ASSERT_TRUE(j.contains("boundary_20ms_one_to_one"));
  ASSERT_TRUE(j.contains("boundary_20ms_lenient"));
  const auto& o = j["boundary_20ms_one_to_one"];
  const auto& l = j["boundary_20ms_lenient"];
  std::set<std::string> keys;
  for (auto& [k, v] : l.items()) keys.insert(k);
  EXPECT_EQ(keys, (std::set<std::string>{"rule", "as_in", "tolerance_ms", "tolerance_frames",
                                         "utterance_edges_counted", "precision", "recall", "f1", "r_value",
                                         "hits_pred", "hits_ref", "num_ref", "num_pred"}));
  EXPECT_EQ(o["rule"], "one-to-one");
  EXPECT_EQ(l["rule"], "lenient");
  EXPECT_EQ(l["utterance_edges_counted"], false);
  EXPECT_EQ(l["tolerance_ms"].get<int>(), 20);
  EXPECT_EQ(l["tolerance_frames"].get<int>(), 2);
  EXPECT_EQ(l["hits_pred"].get<int64_t>(), 3);
  EXPECT_EQ(l["hits_ref"].get<int64_t>(), 1);
  EXPECT_EQ(o["hits_pred"].get<int64_t>(), 1);
  // the one-to-one object carries boundary_20ms's values (unchanged key, same numbers)
  for (const char* k : {"precision", "recall", "f1", "r_value", "num_ref", "num_pred", "tolerance_frames"})
    EXPECT_EQ(o[k], j["boundary_20ms"][k]) << k;
  EXPECT_EQ(o["hits_ref"], j["boundary_20ms"]["matched"]);
  const std::string t = m.table();
  EXPECT_NE(t.find("boundaries (20 ms, 2 fr)    33.33 %   100.00 %    50.00 %   R-value -70.71 %   one-to-one"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("boundaries (20 ms, 2 fr)   100.00 %   100.00 %   100.00 %   R-value 100.00 %   lenient"),
            std::string::npos)
      << t;
}

TEST(BoundaryProtocols, UtteranceEdgesAreNotCounted) {
  // One phone in both: no internal boundary on either side (frame 0 and T are never counted).
  Metrics m({"x", "y"});
  m.add({0, 0, 0, 0}, {1, 1, 1, 1});
  EXPECT_EQ(m.boundary_20ms().num_ref, 0);
  EXPECT_EQ(m.boundary_20ms_lenient().num_pred, 0);
  EXPECT_EQ(m.to_json()["boundary_20ms_lenient"]["num_ref"].get<int64_t>(), 0);
  EXPECT_EQ(m.boundary_20ms_lenient_r_value(), 0.0);  // no reference boundary: 0 under both rules
  EXPECT_EQ(m.boundary_20ms_r_value(), 0.0);
  // A prediction at frame 1 near the start: counted as a predicted boundary, not validated by the start.
  Metrics n({"x", "y"});
  n.add(labels_with({10}, 20), labels_with({1, 10}, 20));
  EXPECT_EQ(n.boundary_20ms_lenient().num_pred, 2);
  EXPECT_EQ(n.boundary_20ms_lenient().matched_pred, 1);
}

TEST(BoundaryProtocols, RandomCasesAgainstOracles) {
  // Random sorted lists of distinct frames (0..9 each in [1, 30)), tolerances 0..4: the lenient
  // counts equal the naive count, the one-to-one count equals Kuhn's maximum matching; and through
  // Metrics on random utterances, the summed counts equal the oracles' sums.
  std::mt19937 rng(43);
  auto draw = [&](int n) {
    std::set<int> s;
    while (static_cast<int>(s.size()) < n) s.insert(1 + static_cast<int>(rng() % 29));
    return std::vector<int>(s.begin(), s.end());
  };
  int differ = 0;
  for (int it = 0; it < 3000; ++it) {
    const std::vector<int> ref = draw(static_cast<int>(rng() % 10)), pred = draw(static_cast<int>(rng() % 10));
    const int tol = static_cast<int>(rng() % 5);
    ASSERT_EQ(count_within(pred, ref, tol), naive_within(pred, ref, tol)) << "case " << it;
    ASSERT_EQ(count_within(ref, pred, tol), naive_within(ref, pred, tol)) << "case " << it;
    const int64_t kuhn = kuhn_matching(ref, pred, tol);
    ASSERT_EQ(match_boundaries(ref, pred, tol), kuhn) << "case " << it;
    differ += naive_within(pred, ref, tol) != kuhn;
  }
  EXPECT_GT(differ, 500);  // the two rules disagree on many cases
  Metrics m({"x", "y"});
  int64_t lp = 0, lr = 0, oo = 0;
  for (int u = 0; u < 200; ++u) {
    const std::vector<int> ref = draw(static_cast<int>(rng() % 10)), pred = draw(static_cast<int>(rng() % 10));
    m.add(labels_with(ref, 30), labels_with(pred, 30));
    lp += naive_within(pred, ref, 2), lr += naive_within(ref, pred, 2), oo += kuhn_matching(ref, pred, 2);
  }
  EXPECT_EQ(m.boundary_20ms_lenient().matched_pred, lp);
  EXPECT_EQ(m.boundary_20ms_lenient().matched_ref, lr);
  EXPECT_EQ(m.boundary_20ms().matched_ref, oo);
  const double P = double(lp) / m.boundary_20ms_lenient().num_pred, R = double(lr) / m.boundary_20ms_lenient().num_ref;
  EXPECT_NEAR(m.boundary_20ms_lenient_r_value(), r_by_definition(R, R / P - 1), 1e-12);
}
