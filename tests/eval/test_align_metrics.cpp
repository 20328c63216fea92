// The pieces of forced alignment in the model layer: transcripts into a label
// set (merged repeats, word ranges), the reference runs of frame labels, the
// boundary metrics against hand-computed values, and the multi-tier TextGrid.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "data/phones.h"
#include "eval/align.h"

using namespace timitseg;

TEST(AlignModel, ToClassesMapsMergesAndKeepsWords) {
  const model::LabelSet ls = model::LabelSet::make(39);
  data::Transcript t;
  t.source = "u.WRD";
  // h# and bcl both map to sil in the 39 set: one phone; q is dropped.
  t.phones = {"h#", "bcl", "b", "q", "ah", "s", "s", "t", "aa", "pcl", "p", "h#"};
  t.words = {"bus", "stop"};
  t.word_of_phone = {-1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, -1};
  const model::ClassSequence cs = model::to_classes(t, ls);
  std::vector<std::string> names;
  for (int32_t c : cs.classes) names.push_back(ls.names[c]);
  EXPECT_EQ(names, (std::vector<std::string>{"sil", "b", "ah", "s", "t", "aa", "sil", "p", "sil"}));
  EXPECT_EQ(cs.word_first, (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1, -1}));
  EXPECT_EQ(cs.word_last, (std::vector<int>{0, 0, 0, 1, 1, 1, 1, 1, -1}));
  t.phones[4] = "xx";
  try {
    model::to_classes(t, ls);
    ADD_FAILURE() << "no error";
  } catch (const data::TranscriptError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("u.WRD: phone 'xx' is not in the label set (39 phones: ", 0), 0u) << e.what();
  }
  // Optional phones: a merged phone is optional only when all its parts are;
  // a second optional phone in a row is dropped; only optional phones left is an empty transcript.
  data::Transcript o;
  o.source = "o";
  o.phones = {"h#", "sh", "pau", "h#", "iy", "pau", "bcl", "b", "h#"};
  o.optional = {1, 0, 1, 1, 0, 1, 0, 0, 1};
  const model::ClassSequence co = model::to_classes(o, ls);
  names.clear();
  for (int32_t c : co.classes) names.push_back(ls.names[c]);
  // 39 set: pau, h# and bcl are all sil: "pau h#" merge (optional), "pau bcl" merge (obligatory).
  EXPECT_EQ(names, (std::vector<std::string>{"sil", "sh", "sil", "iy", "sil", "b", "sil"}));
  EXPECT_EQ(co.optional, (std::vector<int32_t>{1, 0, 1, 0, 0, 0, 1}));
  const model::LabelSet l61 = model::LabelSet::make(61);
  const model::ClassSequence c61 = model::to_classes(o, l61);  // 61 set: pau then h# are two optional phones
  names.clear();
  for (int32_t c : c61.classes) names.push_back(l61.names[c]);
  EXPECT_EQ(names, (std::vector<std::string>{"h#", "sh", "pau", "iy", "pau", "bcl", "b", "h#"}));
  EXPECT_EQ(c61.optional, (std::vector<int32_t>{1, 0, 1, 0, 1, 0, 0, 1}));
  o.phones = {"h#", "pau"};
  o.optional = {1, 1};
  EXPECT_THROW(model::to_classes(o, l61), data::TranscriptError);
  // The label set's own names are accepted too (cl, vcl in the 48 set).
  const model::LabelSet l48 = model::LabelSet::make(48);
  data::Transcript u;
  u.source = "l";
  u.phones = {"sil", "vcl", "b", "cl", "t", "sil"};
  EXPECT_EQ(model::to_classes(u, l48).classes.size(), 6u);
  u.phones = {"q"};
  EXPECT_THROW(model::to_classes(u, l48), data::TranscriptError);
}

TEST(AlignModel, ReferenceRunsAndBoundaryMetrics) {
  const model::LabelSet ls = model::LabelSet::make(39);
  const data::PhoneSet& ps = data::PhoneSet::timit();
  data::Utterance u;
  for (const char* p : {"h#", "h#", "pau", "s", "s", "s", "ix", "ih", "t"})  // h#, pau -> sil; ix, ih -> ih
    u.labels.push_back(ps.index61(p));
  u.num_frames = static_cast<int32_t>(u.labels.size());
  const auto runs = model::reference_runs(u, ls);
  ASSERT_EQ(runs.size(), 4u);
  EXPECT_EQ(runs[0].second, 3);
  EXPECT_EQ(runs[1].second, 3);
  EXPECT_EQ(runs[2].second, 2);
  EXPECT_EQ(runs[3].second, 1);
  model::AlignMetrics m;
  m.add({3, 6, 8}, {3, 8, 4}, 10.0);  // errors 0, 20, 40 ms
  m.add({5}, {6}, 10.0);              // 10 ms
  const nlohmann::json j = m.to_json();
  EXPECT_EQ(j["boundaries"], 4);
  EXPECT_DOUBLE_EQ(j["within_ms"]["10"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(j["within_ms"]["20"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(j["within_ms"]["25"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(j["within_ms"]["50"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(j["mean_abs_ms"].get<double>(), 17.5);
  EXPECT_DOUBLE_EQ(j["median_abs_ms"].get<double>(), 15.0);
  EXPECT_FALSE(model::AlignMetrics().to_json().contains("mean_abs_ms"));  // no boundary: no NaN
}

TEST(AlignModel, TextGridTiers) {
  const std::string tg = model::textgrid_tiers(
      {{"phones", {{0, 8000, "sil"}, {8000, 16000, "aa"}}}, {"words", {{0, 8000, ""}, {8000, 16000, "say \"a\""}}}},
      16000, 16000);
  EXPECT_NE(tg.find("size = 2\n"), std::string::npos);
  EXPECT_NE(tg.find("item [2]:\n        class = \"IntervalTier\"\n        name = \"words\""), std::string::npos);
  EXPECT_NE(tg.find("text = \"say \"\"a\"\"\""), std::string::npos);
  EXPECT_NE(tg.find("xmin = 0.5\n            xmax = 1\n"), std::string::npos);
}
