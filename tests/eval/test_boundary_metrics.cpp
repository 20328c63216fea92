// The field's segmentation metrics (eval/metrics.h, docs/training.md
// "Boundary metrics at 20 ms"): boundary precision, recall, F1 and R-value at
// 20 ms, one-to-one.
// Oracles: values worked out by hand (in the comments), R-values published by a
// third party from their own implementation, and an exhaustive maximum
// bipartite matching for the greedy matcher.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/text.h"
#include "eval/metrics.h"

using namespace timitseg::eval;

namespace {

// Frame labels [T] whose internal boundaries (run starts after the first) are
// exactly `boundaries` (sorted, in (0, T)): runs alternate labels 0 and 1.
std::vector<int> labels_with_boundaries(const std::vector<int>& boundaries, int T) {
  std::vector<int> l(static_cast<size_t>(T), 0);
  int label = 0;
  size_t k = 0;
  for (int t = 0; t < T; ++t) {
    if (k < boundaries.size() && boundaries[k] == t) label = 1 - label, ++k;
    l[static_cast<size_t>(t)] = label;
  }
  return l;
}

// Maximum matching by exhaustive search: each reference boundary either stays
// unmatched or takes any free predicted boundary within tol (memoised over
// (reference index, set of used predictions); lists of at most 12).
int64_t exhaustive_matching(const std::vector<int>& ref, const std::vector<int>& pred, int tol) {
  std::vector<std::vector<int>> memo(ref.size() + 1, std::vector<int>(size_t{1} << pred.size(), -1));
  std::function<int(size_t, unsigned)> best = [&](size_t i, unsigned used) -> int {
    if (i == ref.size()) return 0;
    int& m = memo[i][used];
    if (m >= 0) return m;
    m = best(i + 1, used);
    for (size_t j = 0; j < pred.size(); ++j)
      if (!(used >> j & 1u) && std::abs(ref[i] - pred[j]) <= tol) m = std::max(m, 1 + best(i + 1, used | 1u << j));
    return m;
  };
  return best(0, 0);
}

}  // namespace

TEST(BoundaryMetrics, ToleranceInFramesIsTheFloor) {
  EXPECT_EQ(tolerance_frames_for_ms(20, 10), 2);        // the default features
  EXPECT_EQ(tolerance_frames_for_ms(20, 6), 3);         // 3.33 -> 3
  EXPECT_EQ(tolerance_frames_for_ms(20, 8), 2);         // 2.5 -> 2
  EXPECT_EQ(tolerance_frames_for_ms(20, 20.0 / 3), 3);  // 3 up to rounding: 3, not 2
  EXPECT_EQ(tolerance_frames_for_ms(20, 25), 0);        // a frame longer than the tolerance: exact only
  EXPECT_EQ(tolerance_frames_for_ms(20, 5), 4);
  EXPECT_THROW(tolerance_frames_for_ms(20, 0), std::invalid_argument);
  EXPECT_THROW(tolerance_frames_for_ms(20, -10), std::invalid_argument);
  EXPECT_THROW(tolerance_frames_for_ms(20, std::nan("")), std::invalid_argument);
  EXPECT_THROW(Metrics({"a"}, 0.0), std::invalid_argument);
  EXPECT_EQ(Metrics({"a"}).tolerance_20ms_frames(), 2);
  EXPECT_EQ(Metrics({"a"}, 5.0).tolerance_20ms_frames(), 4);
}

TEST(BoundaryMetrics, RValueByHand) {
  // Perfect: HR = 1, OS = 0 -> r1 = 0, r2 = 0 -> R = 1.
  EXPECT_DOUBLE_EQ(r_value(7, 7, 7), 1.0);
  // Nothing predicted: HR = 0, OS = 0/10 - 1 = -1 -> r1 = sqrt(1 + 1) = sqrt 2,
  // r2 = (1 + 0 - 1)/sqrt 2 = 0 -> R = 1 - sqrt(2)/2 = 0.29289 (P = 0 handled by the counts).
  EXPECT_DOUBLE_EQ(r_value(0, 10, 0), 1.0 - std::sqrt(2.0) / 2);
  // All 10 predictions miss: HR = 0, OS = 0 -> r1 = 1, r2 = -1/sqrt 2 -> R = 1 - (1 + 0.70711)/2 = 0.14645.
  EXPECT_NEAR(r_value(0, 10, 10), 0.1464466094, 1e-10);
  // 9 of 10 reference boundaries hit by 12 predictions (P = 0.75, R = 0.9): OS = 12/10 - 1 = 0.2,
  // r1 = sqrt(0.1^2 + 0.2^2) = sqrt(0.05) = 0.2236068, r2 = (-0.2 + 0.9 - 1)/sqrt 2 = -0.2121320,
  // R = 1 - (0.2236068 + 0.2121320)/2 = 0.7821306.
  EXPECT_NEAR(r_value(9, 10, 12), 0.7821306, 1e-7);
  // No reference boundary: 0, never NaN.
  EXPECT_EQ(r_value(0, 0, 3), 0.0);
}

TEST(BoundaryMetrics, RValueReproducesPublishedFigures) {
  // kamperh/vqwordseg results.md (Buckeye val), printed as P, R, OS, R-value in %
  // from that project's own evaluation code. Counts out of 10000 reference
  // boundaries reproduce the printed HR and OS: matched = 10000 HR,
  // num_pred = 10000 (1 + OS); the R-value must agree to the 2 decimals printed.
  struct Case {
    double hr, os, r_value;  // in %
  };
  for (const Case& c : {Case{75.77, 14.08, 72.44},     // VQ-VAE phones: P 66.42
                        Case{71.14, 0.86, 75.06},      // VQ-VAE dur_weight=4 phones: P 70.54
                        Case{74.68, 34.04, 57.80},     // VQ-CPC phones: P 55.72
                        Case{68.13, 330.90, -194.47}}) {  // VQ-VAE words: P 15.81, R-value below 0
    const int64_t matched = std::llround(c.hr * 100), num_pred = std::llround(10000 + c.os * 100);
    EXPECT_NEAR(100 * r_value(matched, 10000, num_pred), c.r_value, 0.005 + 1e-9) << c.hr << " " << c.os;
  }
}

TEST(BoundaryMetrics, HandMadeUtterance) {
  // The utterance of Metrics.HandMadeUtterance (tests/eval/test_metrics_config.cpp):
  // ref boundaries 3, 5; pred boundaries 2, 5, 6; 20 ms = 2 frames at 10 ms.
  // One-to-one: 2<->3, 5<->5; 6 is left (5 is taken) -> matched 2,
  // P = 2/3, R = 2/2 = 1, F1 = 2 (2/3)(1) / (2/3 + 1) = 0.8;
  // OS = 3/2 - 1 = 0.5, r1 = sqrt(0 + 0.25) = 0.5, r2 = (-0.5 + 1 - 1)/sqrt 2 = -0.3535534,
  // R-value = 1 - (0.5 + 0.3535534)/2 = 0.5732233.
  Metrics m({"a", "b", "c"});
  m.add({0, 0, 0, 1, 1, 2, 2, 2}, {0, 0, 1, 1, 1, 0, 2, 2});
  EXPECT_EQ(m.boundary_20ms().matched_ref, 2);
  EXPECT_EQ(m.boundary_20ms().num_ref, 2);
  EXPECT_EQ(m.boundary_20ms().num_pred, 3);
  EXPECT_DOUBLE_EQ(m.boundary_20ms().precision(), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(m.boundary_20ms().recall(), 1.0);
  EXPECT_DOUBLE_EQ(m.boundary_20ms().f1(), 0.8);
  EXPECT_NEAR(m.boundary_20ms_r_value(), 0.5732233, 1e-7);
  const auto j = m.to_json()["boundary_20ms"];
  // exactly the keys other code reads (compare, bench/accuracy/run.py)
  std::set<std::string> keys;
  for (auto& [k, v] : j.items()) keys.insert(k);
  EXPECT_EQ(keys, (std::set<std::string>{"tolerance_ms", "tolerance_frames", "precision", "recall", "f1", "r_value",
                                         "matched", "num_ref", "num_pred"}));
  EXPECT_TRUE(j["tolerance_ms"].is_number_integer());
  EXPECT_EQ(j["tolerance_ms"].get<int>(), 20);
  EXPECT_EQ(j["tolerance_frames"].get<int>(), 2);
  EXPECT_DOUBLE_EQ(j["precision"].get<double>(), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(j["recall"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(j["f1"].get<double>(), 0.8);
  EXPECT_NEAR(j["r_value"].get<double>(), 0.5732233, 1e-7);
  EXPECT_EQ(j["matched"].get<int64_t>(), 2);
  EXPECT_EQ(j["num_ref"].get<int64_t>(), 2);
  EXPECT_EQ(j["num_pred"].get<int64_t>(), 3);
  // the printed table carries the four numbers
  const std::string table = m.table();
  EXPECT_NE(table.find("boundaries (20 ms, 2 fr)    66.67 %   100.00 %    80.00 %   R-value 57.32 %"), std::string::npos)
      << table;
}

TEST(BoundaryMetrics, TenBoundariesTwelvePredictions) {
  // Reference boundaries 10, 20, ..., 100 (10 of them, T = 110). Predictions:
  // 12, 22, ..., 92 (9 of them, each exactly 2 frames = 20 ms late: all hit),
  // and 15, 35, 55 (5 frames from any reference boundary: misses); 100 is
  // missed. Matched 9 -> P = 9/12 = 0.75, R = 0.9, F1 = 2(0.75)(0.9)/1.65 = 0.8181818,
  // R-value 0.7821306 (RValueByHand).
  std::vector<int> rb, pb{15, 35, 55};
  for (int b = 10; b <= 100; b += 10) rb.push_back(b);
  for (int b = 12; b <= 92; b += 10) pb.push_back(b);
  std::sort(pb.begin(), pb.end());
  Metrics m({"x", "y"});
  m.add(labels_with_boundaries(rb, 110), labels_with_boundaries(pb, 110));
  const PRF& b = m.boundary_20ms();
  EXPECT_EQ(b.matched_ref, 9);
  EXPECT_EQ(b.num_ref, 10);
  EXPECT_EQ(b.num_pred, 12);
  EXPECT_DOUBLE_EQ(b.precision(), 0.75);
  EXPECT_DOUBLE_EQ(b.recall(), 0.9);
  EXPECT_NEAR(b.f1(), 0.8181818, 1e-7);
  EXPECT_NEAR(m.boundary_20ms_r_value(), 0.7821306, 1e-7);
  // the same predictions 3 frames (30 ms) late hit nothing: 13 is 3 from 10 and 7 from 20, and so on
  std::vector<int> late;
  for (int b2 = 13; b2 <= 93; b2 += 10) late.push_back(b2);
  Metrics m3({"x", "y"});
  m3.add(labels_with_boundaries(rb, 110), labels_with_boundaries(late, 110));
  EXPECT_EQ(m3.boundary_20ms().matched_ref, 0);
  // at 5 ms frames the tolerance is 4 frames: 3 frames late is a hit (9 of 10)
  Metrics m5({"x", "y"}, 5.0);
  m5.add(labels_with_boundaries(rb, 110), labels_with_boundaries(late, 110));
  EXPECT_EQ(m5.boundary_20ms().matched_ref, 9);
  EXPECT_EQ(m5.to_json()["boundary_20ms"]["tolerance_frames"].get<int>(), 4);
}

TEST(BoundaryMetrics, ToleranceEdges) {
  // One reference boundary at frame 10 (T = 20); one prediction at 10 + d.
  for (int d : {-3, -2, -1, 0, 1, 2, 3}) {
    Metrics m({"x", "y"});
    m.add(labels_with_boundaries({10}, 20), labels_with_boundaries({10 + d}, 20));
    const bool hit = std::abs(d) <= 2;  // exactly 2 frames (20 ms) away matches, 3 (30 ms) does not
    EXPECT_EQ(m.boundary_20ms().matched_ref, hit ? 1 : 0) << "d = " << d;
    EXPECT_DOUBLE_EQ(m.boundary_20ms().f1(), hit ? 1.0 : 0.0) << "d = " << d;
    // hit: P = R = 1 -> R-value 1; miss: HR 0, OS 0 -> 1 - (1 + 1/sqrt 2)/2
    EXPECT_NEAR(m.boundary_20ms_r_value(), hit ? 1.0 : 1.0 - (1.0 + 1.0 / std::sqrt(2.0)) / 2, 1e-15) << "d = " << d;
  }
}

TEST(BoundaryMetrics, OneToOne) {
  // Two predictions (9 and 11) around one reference boundary (10): one match.
  // P = 1/2, R = 1, F1 = 2/3; OS = 2/1 - 1 = 1, r1 = sqrt(0 + 1) = 1,
  // r2 = (-1 + 1 - 1)/sqrt 2 = -0.7071068, R-value = 1 - (1 + 0.7071068)/2 = 0.1464466.
  Metrics m({"x", "y", "z"});
  m.add({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1},   // boundary 10
        {0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 1, 1, 1, 1});  // boundaries 9, 11
  EXPECT_EQ(m.boundary_20ms().matched_ref, 1);
  EXPECT_DOUBLE_EQ(m.boundary_20ms().precision(), 0.5);
  EXPECT_DOUBLE_EQ(m.boundary_20ms().recall(), 1.0);
  EXPECT_DOUBLE_EQ(m.boundary_20ms().f1(), 2.0 / 3.0);
  EXPECT_NEAR(m.boundary_20ms_r_value(), 0.1464466, 1e-7);
  // and the other way: one prediction between two reference boundaries (8 and 12, pred 10)
  EXPECT_EQ(match_boundaries({8, 12}, {10}, 2), 1);
  EXPECT_EQ(match_boundaries({10}, {9, 11}, 2), 1);
  // where pairing the nearest two first would lose one: ref 2, 5; pred 4, 7 at tol 2. Nearest first
  // takes 5<->4 (1 apart) and leaves 2 and 7 (5 apart); the maximum is 2<->4, 5<->7.
  EXPECT_EQ(match_boundaries({2, 5}, {4, 7}, 2), 2);
}

TEST(BoundaryMetrics, GreedyIsAMaximumMatching) {
  // Random sorted lists of distinct frames (0..9 boundaries each in [1, 30)), tolerances 0..4:
  // the greedy count equals the exhaustive maximum bipartite matching's.
  std::mt19937 rng(20);
  int cases = 0, nontrivial = 0;
  for (int it = 0; it < 4000; ++it) {
    auto draw = [&](int n) {
      std::set<int> s;
      while (static_cast<int>(s.size()) < n) s.insert(1 + static_cast<int>(rng() % 29));
      return std::vector<int>(s.begin(), s.end());
    };
    const std::vector<int> ref = draw(static_cast<int>(rng() % 10)), pred = draw(static_cast<int>(rng() % 10));
    const int tol = static_cast<int>(rng() % 5);
    const int64_t want = exhaustive_matching(ref, pred, tol);
    ASSERT_EQ(match_boundaries(ref, pred, tol), want) << "case " << it << " tol " << tol;
    ++cases;
    nontrivial += want > 0 && want < static_cast<int64_t>(std::min(ref.size(), pred.size()));
  }
  EXPECT_EQ(cases, 4000);
  EXPECT_GT(nontrivial, 500);  // many cases where not everything can be matched
}

TEST(BoundaryMetrics, AgreesWithTolerance2AtTenMs) {
  // At 10 ms the 20 ms counts are those of boundary(2), summed over utterances.
  std::mt19937 rng(3);
  Metrics m({"a", "b", "c", "d"});
  for (int u = 0; u < 50; ++u) {
    const int T = 5 + static_cast<int>(rng() % 60);
    std::vector<int> ref(T), pred(T);
    int a = 0, b = 0;
    for (int t = 0; t < T; ++t) {
      if (rng() % 5 == 0) a = static_cast<int>(rng() % 4);
      if (rng() % 4 == 0) b = static_cast<int>(rng() % 4);
      ref[t] = a, pred[t] = b;
    }
    m.add(ref, pred);
  }
  EXPECT_EQ(m.boundary_20ms().matched_ref, m.boundary(2).matched_ref);
  EXPECT_EQ(m.boundary_20ms().num_ref, m.boundary(2).num_ref);
  EXPECT_EQ(m.boundary_20ms().num_pred, m.boundary(2).num_pred);
  EXPECT_GT(m.boundary_20ms().num_ref, 100);
  // R-value from its definition with R and P as fractions (both > 0 here): OS = R/P - 1
  const double P = m.boundary_20ms().precision(), R = m.boundary_20ms().recall(), os = R / P - 1;
  const double want = 1 - (std::hypot(1 - R, os) + std::abs((-os + R - 1) / std::sqrt(2.0))) / 2;
  EXPECT_NEAR(m.boundary_20ms_r_value(), want, 1e-12);
}

// The per-phone rows of evaluate's table line up whatever the label's bytes: "ɔ̃" (4 bytes,
// one column) and "tʃ" (3 bytes, two columns) are padded to the columns of "a".
TEST(BoundaryMetrics, PerPhoneTablePadsIpaLabelsByDisplayWidth) {
  timitseg::eval::Metrics m({"a", "ɔ̃", "tʃ"});
  m.add({0, 0, 1, 1, 2, 2}, {0, 0, 1, 1, 2, 2});
  std::istringstream in(m.table());
  std::map<std::string, std::string> rows;  // label -> its row
  for (std::string line; std::getline(in, line);)
    for (const std::string label : {"a ", "ɔ̃ ", "tʃ "})
      if (line.rfind(label, 0) == 0) rows[label] = line;
  ASSERT_EQ(rows.size(), 3u) << m.table();
  for (const auto& [label, line] : rows) {  // equal counts and means: equal columns when the labels are padded so
    EXPECT_EQ(timitseg::display_width(line), timitseg::display_width(rows["a "])) << line;
  }
}
