// Per-phone boundary shifts (eval/boundary_shifts.h): the fit is each phone's
// median signed error (values worked out by hand), the move is the rounded
// shift in samples with every phone kept >= 1 sample, and the file round-trips
// and is refused, naming itself, for another phone set, a label outside it or
// a shift that is not a number.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/boundary_shifts.h"
#include "model/labels.h"
#include "tests/support/cli.h"

namespace fs = std::filesystem;
using namespace timitseg;

TEST(BoundaryShifts, FitIsEachPhonesMedianOfTheBoundariesIntoIt) {
  // a: {-10, -30, 5} -> -10; b: {1, 2, 3, 4} -> 2.5; c: two boundaries, below the minimum of 3;
  // "" (not named) left out whatever its error.
  const std::vector<std::string> into = {"a", "b", "a", "c", "b", "", "a", "b", "c", "b", ""};
  const std::vector<double> err = {-10, 4, -30, 7, 1, 99, 5, 3, 8, 2, -99};
  const eval::BoundaryShifts s = eval::fit_boundary_shifts({}, into, err, "set", 3);
  EXPECT_EQ(s.phone_set, "set");
  EXPECT_EQ(s.min_boundaries, 3);
  ASSERT_EQ(s.shift_ms.size(), 2u);
  EXPECT_DOUBLE_EQ(s.shift_ms.at("a"), -10.0);
  EXPECT_DOUBLE_EQ(s.shift_ms.at("b"), 2.5);
  EXPECT_EQ(s.boundaries.at("a"), 3);
  EXPECT_EQ(s.boundaries.at("b"), 4);
  EXPECT_EQ(s.shift("x", "c"), 0.0);  // no shift: unmoved
  EXPECT_TRUE(s.pair_shift_ms.empty());
  const eval::BoundaryShifts s2 = eval::fit_boundary_shifts({}, into, err, "set", 2);
  EXPECT_DOUBLE_EQ(s2.shift_ms.at("c"), 7.5);
  EXPECT_THROW(eval::fit_boundary_shifts({}, into, err, "set", 0), std::invalid_argument);
  EXPECT_THROW(eval::fit_boundary_shifts({}, into, err, "set", 2, eval::ShiftContext::pair), std::invalid_argument);
}

TEST(BoundaryShifts, PairsFitTheirOwnMedianAndBackOffToThePhone) {
  // into a: after v {-20, -30, -40} -> -30 (a pair of 3); after s {10, 0} -> too few: a's own median
  // {-20, -30, -40, 10, 0} = -20; into b: after v {5, 7, 9} -> 7, its phone median 7.
  const std::vector<std::string> from = {"v", "v", "s", "v", "s", "v", "v", "v", ""};
  const std::vector<std::string> into = {"a", "a", "a", "a", "a", "b", "b", "b", "b"};
  const std::vector<double> err = {-20, -30, 10, -40, 0, 5, 7, 9, 100};
  const eval::BoundaryShifts s = eval::fit_boundary_shifts(from, into, err, "set", 3, eval::ShiftContext::pair);
  EXPECT_EQ(s.context, eval::ShiftContext::pair);
  EXPECT_DOUBLE_EQ(s.shift_ms.at("a"), -20.0);
  EXPECT_DOUBLE_EQ(s.shift_ms.at("b"), 8.0);  // {5, 7, 9, 100}: (7 + 9) / 2, the unnamed "before" counts for b
  ASSERT_EQ(s.pair_shift_ms.size(), 2u);
  EXPECT_DOUBLE_EQ(s.pair_shift_ms.at({"v", "a"}), -30.0);
  EXPECT_DOUBLE_EQ(s.pair_shift_ms.at({"v", "b"}), 7.0);
  EXPECT_EQ(s.pair_boundaries.at({"v", "a"}), 3);
  EXPECT_DOUBLE_EQ(s.shift("v", "a"), -30.0);  // the pair
  EXPECT_DOUBLE_EQ(s.shift("s", "a"), -20.0);  // backs off to the phone
  EXPECT_DOUBLE_EQ(s.shift("s", "c"), 0.0);
  // Applied: sil -> v -> a moves a by the pair's 30 ms (480 samples later); s -> a by a's 20 ms.
  std::vector<int64_t> starts = {0, 1000, 2000, 4000, 5000};
  eval::apply_boundary_shifts(s, {"sil", "v", "a", "s", "a"}, 16000, 9000, &starts);
  EXPECT_EQ(starts, (std::vector<int64_t>{0, 1000, 2480, 4000, 5320}));
}

TEST(BoundaryShifts, ApplyMovesByTheRoundedShiftAndKeepsEveryPhone) {
  eval::BoundaryShifts s;
  s.shift_ms = {{"a", -10.0}, {"b", 2.53}, {"c", 50.0}};
  // 16 kHz: a starts 160 samples later, b round(40.48) = 40 earlier; d has no shift.
  std::vector<int64_t> starts = {0, 1600, 3200, 4000};
  eval::ShiftCount n;
  eval::apply_boundary_shifts(s, {"sil", "a", "b", "d"}, 16000, 6000, &starts, &n);
  EXPECT_EQ(starts, (std::vector<int64_t>{0, 1760, 3160, 4000}));
  EXPECT_EQ(n.boundaries, 3);
  EXPECT_EQ(n.moved, 2);
  EXPECT_EQ(n.clamped, 0);
  // c would start 800 samples earlier, before a's start (at 1000 - 800 = 200 < 500): held at a's start + 1.
  starts = {0, 500, 1000, 1200};
  eval::apply_boundary_shifts(s, {"sil", "a", "c", "d"}, 16000, 2000, &starts, &n);
  EXPECT_EQ(starts, (std::vector<int64_t>{0, 660, 661, 1200}));
  EXPECT_EQ(n.boundaries, 6);
  EXPECT_EQ(n.moved, 4);
  EXPECT_EQ(n.clamped, 1);
  // a moved past the end: held one sample before the next phone, which is held before the end.
  s.shift_ms = {{"a", -1000.0}};
  starts = {0, 10, 20};
  eval::apply_boundary_shifts(s, {"sil", "a", "a"}, 16000, 30, &starts);
  EXPECT_EQ(starts, (std::vector<int64_t>{0, 28, 29}));
  // One phone: nothing to move; mismatched labels: an error.
  starts = {0};
  eval::apply_boundary_shifts(s, {"a"}, 16000, 30, &starts);
  EXPECT_EQ(starts, (std::vector<int64_t>{0}));
  EXPECT_THROW(eval::apply_boundary_shifts(s, {"a"}, 16000, 30, &(starts = {0, 5})), std::invalid_argument);
}

TEST(BoundaryShifts, FileRoundTripsAndBadFilesNameThemselves) {
  const fs::path dir = testsupport::fresh_temp_dir("timitseg_boundary_shifts");
  const model::LabelSet ls = model::LabelSet::make(39);
  eval::BoundaryShifts s = eval::fit_boundary_shifts({"sil", "sil", "s"}, {"s", "s", "iy"}, {-4.0, -6.0, 3.0},
                                                     ls.spec.name, 1, eval::ShiftContext::pair);
  s.fitted_on = {{"split", "dev"}};
  const std::string path = (dir / "shifts.json").string();
  eval::save_boundary_shifts(s, path);
  const eval::BoundaryShifts t = eval::load_boundary_shifts(path, ls);
  EXPECT_EQ(t.shift_ms, (std::map<std::string, double>{{"iy", 3.0}, {"s", -5.0}}));
  EXPECT_EQ(t.boundaries, (std::map<std::string, int64_t>{{"iy", 1}, {"s", 2}}));
  EXPECT_EQ(t.fitted_on["split"], "dev");
  EXPECT_EQ(t.context, eval::ShiftContext::pair);
  EXPECT_EQ(t.pair_shift_ms, (std::map<std::pair<std::string, std::string>, double>{{{"sil", "s"}, -5.0}, {{"s", "iy"}, 3.0}}));
  EXPECT_EQ(t.pair_boundaries.at({"sil", "s"}), 2);
  auto refused = [&](nlohmann::json j, const std::string& why) {
    const std::string p = (dir / "bad.json").string();
    std::ofstream(p) << j.dump();
    try {
      eval::load_boundary_shifts(p, ls);
      ADD_FAILURE() << "accepted: " << j.dump();
    } catch (const std::exception& e) {
      EXPECT_EQ(std::string(e.what()).rfind(p + ": ", 0), 0u) << e.what();
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  const nlohmann::json good = s.to_json();
  nlohmann::json j = good;
  j["phone_set"] = "espeak-es";
  refused(j, "fitted for phone set 'espeak-es'");
  j = good;
  j["shift_ms"]["zz"] = 1.0;
  refused(j, "phone 'zz' is not in the checkpoint's phone set");
  j = good;
  j["shift_ms"]["s"] = nullptr;
  refused(j, "the shift of phone 's' is null");
  j = good;
  j["pair_shift_ms"]["sil"]["qq"] = 2.0;
  refused(j, "phone 'qq' is not in the checkpoint's phone set");
  j = good;
  j["pair_shift_ms"]["sil"]["s"] = "x";
  refused(j, "the shift of the pair 'sil' -> 's' is \"x\"");
  j = good;
  j.erase("pair_shift_ms");
  refused(j, "\"context\": \"pair\" without a \"pair_shift_ms\" object");
  j = good;
  j["context"] = "triple";
  refused(j, "\"context\": \"triple\"");
  j = good;
  j["version"] = 2;
  refused(j, "version 2");
  refused(nlohmann::json::array(), "not a boundary-shifts file");
  {
    std::ofstream(dir / "bad.json") << "{";
    EXPECT_THROW(eval::load_boundary_shifts((dir / "bad.json").string(), ls), std::runtime_error);
  }
  fs::remove_all(dir);
}
