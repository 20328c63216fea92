// The pieces of forced alignment in the model layer: transcripts into a label
// set (merged repeats, word ranges), the reference runs of frame labels, the
// boundary metrics against hand-computed values, and the multi-tier TextGrid.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "data/phones.h"
#include "eval/align.h"
#include "eval/align_metrics.h"

using namespace timitseg;

TEST(AlignModel, ToClassesMapsMergesAndKeepsWords) {
  const model::LabelSet ls = model::LabelSet::make(39);
  data::Transcript t;
  t.source = "u.WRD";
  // h# and bcl both map to sil in the 39 set: one phone; q is dropped.
  t.phones = {"h#", "bcl", "b", "q", "ah", "s", "s", "t", "aa", "pcl", "p", "h#"};
  t.words = {"bus", "stop"};
  t.word_of_phone = {-1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, -1};
  const eval::ClassSequence cs = eval::to_classes(t, ls);
  std::vector<std::string> names;
  for (int32_t c : cs.classes) names.push_back(ls.names[c]);
  EXPECT_EQ(names, (std::vector<std::string>{"sil", "b", "ah", "s", "t", "aa", "sil", "p", "sil"}));
  EXPECT_EQ(cs.word_first, (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1, -1}));
  EXPECT_EQ(cs.word_last, (std::vector<int>{0, 0, 0, 1, 1, 1, 1, 1, -1}));
  t.phones[4] = "xx";
  try {
    eval::to_classes(t, ls);
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
  const eval::ClassSequence co = eval::to_classes(o, ls);
  names.clear();
  for (int32_t c : co.classes) names.push_back(ls.names[c]);
  // 39 set: pau, h# and bcl are all sil: "pau h#" merge (optional), "pau bcl" merge (obligatory).
  EXPECT_EQ(names, (std::vector<std::string>{"sil", "sh", "sil", "iy", "sil", "b", "sil"}));
  EXPECT_EQ(co.optional, (std::vector<int32_t>{1, 0, 1, 0, 0, 0, 1}));
  const model::LabelSet l61 = model::LabelSet::make(61);
  const eval::ClassSequence c61 = eval::to_classes(o, l61);  // 61 set: pau then h# are two optional phones
  names.clear();
  for (int32_t c : c61.classes) names.push_back(l61.names[c]);
  EXPECT_EQ(names, (std::vector<std::string>{"h#", "sh", "pau", "iy", "pau", "bcl", "b", "h#"}));
  EXPECT_EQ(c61.optional, (std::vector<int32_t>{1, 0, 1, 0, 1, 0, 0, 1}));
  o.phones = {"h#", "pau"};
  o.optional = {1, 1};
  EXPECT_THROW(eval::to_classes(o, l61), data::TranscriptError);
  // The label set's own names are accepted too (cl, vcl in the 48 set).
  const model::LabelSet l48 = model::LabelSet::make(48);
  data::Transcript u;
  u.source = "l";
  u.phones = {"sil", "vcl", "b", "cl", "t", "sil"};
  EXPECT_EQ(eval::to_classes(u, l48).classes.size(), 6u);
  u.phones = {"q"};
  EXPECT_THROW(eval::to_classes(u, l48), data::TranscriptError);
}

TEST(AlignModel, ReferenceRunsAndBoundaryMetrics) {
  const model::LabelSet ls = model::LabelSet::make(39);
  const data::PhoneSet& ps = data::PhoneSet::timit();
  data::Utterance u;
  for (const char* p : {"h#", "h#", "pau", "s", "s", "s", "ix", "ih", "t"})  // h#, pau -> sil; ix, ih -> ih
    u.labels.push_back(ps.index61(p));
  u.num_frames = static_cast<int32_t>(u.labels.size());
  const auto runs = eval::reference_runs(u, ls);
  ASSERT_EQ(runs.size(), 4u);
  EXPECT_EQ(runs[0].second, 3);
  EXPECT_EQ(runs[1].second, 3);
  EXPECT_EQ(runs[2].second, 2);
  EXPECT_EQ(runs[3].second, 1);
  eval::AlignMetrics m;
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
  EXPECT_DOUBLE_EQ(j["mean_signed_ms"].get<double>(), -2.5);  // (0 + 20 - 40 + 10) / 4: early on balance
  EXPECT_FALSE(eval::AlignMetrics().to_json().contains("mean_abs_ms"));  // no boundary: no NaN
  EXPECT_FALSE(eval::AlignMetrics().to_json().contains("mean_signed_ms"));
}

TEST(AlignModel, BroadClassesOfEveryPhoneSet) {
  const data::PhoneSet& ps = data::PhoneSet::timit();
  const std::vector<std::string>& names = data::broad_class_names();
  ASSERT_EQ(names.size(), 6u);
  auto cls = [&](const char* p) { return ps.broad_class(p); };
  EXPECT_EQ(names[cls("ax-h")], "vowels");
  EXPECT_EQ(names[cls("axr")], "vowels");
  EXPECT_EQ(names[cls("jh")], "stops");
  EXPECT_EQ(names[cls("dx")], "stops");
  EXPECT_EQ(names[cls("hv")], "fricatives");
  EXPECT_EQ(names[cls("zh")], "fricatives");
  EXPECT_EQ(names[cls("eng")], "nasals");
  EXPECT_EQ(names[cls("nx")], "nasals");
  EXPECT_EQ(names[cls("el")], "liquids_glides");
  EXPECT_EQ(names[cls("y")], "liquids_glides");
  for (const char* p : {"h#", "pau", "epi", "bcl", "kcl", "cl", "vcl", "sil"}) EXPECT_EQ(names[cls(p)], "silence") << p;
  EXPECT_EQ(cls("q"), -1);
  EXPECT_EQ(cls("xx"), -1);
  // every phone of the three sets has a class; the 39 set splits 14/9/8/3/4/1
  for (int set : {61, 48, 39})
    for (const std::string& p : ps.names(set)) EXPECT_TRUE(p == "q" || cls(p.c_str()) >= 0) << p;
  std::vector<int> count(6, 0);
  for (const std::string& p : ps.names(39)) ++count[cls(p.c_str())];
  EXPECT_EQ(count, (std::vector<int>{14, 9, 8, 3, 4, 1}));
}

TEST(AlignModel, PhnReferenceMergesQGapsAndEqualClasses) {
  const model::LabelSet ls = model::LabelSet::make(39);
  std::vector<data::PhnEntry> phn;
  for (const auto& [b, e, p] : std::vector<std::tuple<int64_t, int64_t, std::string>>{
           {0, 100, "q"}, {100, 2000, "h#"}, {2000, 2500, "bcl"}, {2500, 2700, "b"}, {2800, 4000, "ah"},
           {4000, 4300, "q"}, {4300, 5000, "t"}, {5000, 6000, "h#"}})
    phn.push_back({b, e, p, 0});
  const auto ref = eval::phn_reference(phn, ls);
  // leading q -> h#; h# bcl -> one sil; the gap 2700-2800 -> b; the q 4000-4300 -> ah
  std::vector<std::tuple<std::string, int64_t, int64_t>> got;
  for (const eval::RefPhone& r : ref) got.emplace_back(ls.names[r.cls], r.start, r.end);
  EXPECT_EQ(got, (std::vector<std::tuple<std::string, int64_t, int64_t>>{
                     {"sil", 0, 2500}, {"b", 2500, 2800}, {"ah", 2800, 4300}, {"t", 4300, 5000}, {"sil", 5000, 6000}}));
}

TEST(AlignModel, SampleAccurateMetricsInMsAcrossRates) {
  eval::AlignMetrics m;
  // reference at 16 kHz: 100 ms, 200 ms; aligned at 8 kHz: 101 ms, 197.5 ms -> errors 1, 2.5 ms
  m.add_samples({1600, 3200}, 16000, {808, 1580}, 8000, {0, 5});
  m.add_samples({16000}, 16000, {8100}, 8000, {0});  // 1000 ms against 1012.5 ms -> 12.5 ms
  m.utterances = 2;
  const nlohmann::json j = m.to_json()["samples"];
  EXPECT_EQ(j["boundaries"], 3);
  EXPECT_NEAR(j["within_ms"]["10"].get<double>(), 2.0 / 3.0, 1e-12);
  EXPECT_NEAR(j["within_ms"]["20"].get<double>(), 1.0, 1e-12);
  EXPECT_NEAR(j["mean_abs_ms"].get<double>(), 16.0 / 3.0, 1e-9);
  EXPECT_NEAR(j["median_abs_ms"].get<double>(), 2.5, 1e-9);
  EXPECT_NEAR(j["mean_signed_ms"].get<double>(), (1.0 - 2.5 + 12.5) / 3.0, 1e-9);  // aligned - reference
  EXPECT_NEAR(j["by_class"]["vowels"]["mean_signed_ms"].get<double>(), (1.0 + 12.5) / 2.0, 1e-9);
  EXPECT_NEAR(j["by_class"]["silence"]["mean_signed_ms"].get<double>(), -2.5, 1e-9);
  EXPECT_EQ(j["by_class"]["vowels"]["boundaries"], 2);
  EXPECT_NEAR(j["by_class"]["vowels"]["mean_abs_ms"].get<double>(), 6.75, 1e-9);
  EXPECT_NEAR(j["by_class"]["vowels"]["within_ms"]["10"].get<double>(), 0.5, 1e-12);
  EXPECT_NEAR(j["by_class"]["silence"]["median_abs_ms"].get<double>(), 2.5, 1e-9);
  EXPECT_FALSE(j["by_class"].contains("stops"));
  EXPECT_EQ(j["without_phn"], 0);
  const std::string t = m.table();
  EXPECT_NE(t.find("frame-quantized"), std::string::npos) << t;
  EXPECT_NE(t.find("sample-accurate        3   66.67  100.00  100.00  100.00     5.33     2.50"), std::string::npos) << t;
  EXPECT_NE(t.find("vowels"), std::string::npos) << t;
}

// Per phone: the boundaries into each label and each aligned phone's length error, by hand.
TEST(AlignModel, PerPhoneBiasAndLengthError) {
  eval::AlignMetrics m;
  // utterance 1: a | b | c, reference boundaries 100, 200 ms; aligned 110, 195 ms -> errors +10, -5:
  // a ends 10 ms late (+10), b starts 10 late and ends 5 early (-15), c starts 5 early (+5)
  m.add_samples({1600, 3200}, 16000, {1760, 3120}, 16000, {0, 0}, {"a", "b", "c"});
  // utterance 2: b | a, boundary 50 ms aligned at 40 ms -> -10: b -10, a +10
  m.add_samples({800}, 16000, {640}, 16000, {0}, {"b", "a"});
  m.utterances = 2;
  const nlohmann::json j = m.to_json()["samples"]["by_phone"];
  ASSERT_EQ(j.size(), 3u) << j.dump();
  EXPECT_EQ(j["a"]["boundaries"], 1);
  EXPECT_NEAR(j["a"]["mean_signed_ms"].get<double>(), -10.0, 1e-9);
  EXPECT_EQ(j["a"]["phones"], 2);
  EXPECT_NEAR(j["a"]["mean_length_error_ms"].get<double>(), 10.0, 1e-9);
  EXPECT_NEAR(j["b"]["mean_signed_ms"].get<double>(), 10.0, 1e-9);
  EXPECT_NEAR(j["b"]["mean_length_error_ms"].get<double>(), -12.5, 1e-9);
  EXPECT_NEAR(j["c"]["mean_signed_ms"].get<double>(), -5.0, 1e-9);
  EXPECT_NEAR(j["c"]["within_ms"]["10"].get<double>(), 1.0, 1e-12);
  EXPECT_NEAR(j["c"]["mean_length_error_ms"].get<double>(), 5.0, 1e-9);
  // the lengths add up: each utterance keeps its start and end
  double total = 0;
  for (const auto& [label, p] : j.items()) total += p["phones"].get<double>() * p["mean_length_error_ms"].get<double>();
  EXPECT_NEAR(total, 0.0, 1e-9);
  // fewer than 20 boundaries into any phone: no phone rows in the table
  EXPECT_EQ(m.table().find("furthest off"), std::string::npos) << m.table();
  for (int k = 0; k < 20; ++k) m.add_samples({1600}, 16000, {1280}, 16000, {0}, {"c", "p"});  // into p 20 ms early
  const std::string t = m.table();
  EXPECT_NE(t.find("furthest off"), std::string::npos) << t;
  EXPECT_NE(t.find("into p              20    0.00  100.00  100.00  100.00    20.00    20.00   -20.00  length +20.00 ms"),
            std::string::npos) << t;
  EXPECT_EQ(t.find("into a"), std::string::npos) << t;  // one boundary only
  // a label count that does not fit the boundaries is refused
  EXPECT_THROW(m.add_samples({1600}, 16000, {1600}, 16000, {0}, {"a"}), std::invalid_argument);
  // without names, no per-phone scores; an unnamed utterance among named ones counts in no phone's row
  eval::AlignMetrics n;
  n.add_samples({1600}, 16000, {1600}, 16000, {0});
  EXPECT_FALSE(n.to_json()["samples"].contains("by_phone"));
  n.add_samples({1600}, 16000, {1920}, 16000, {0}, {"a", "b"});  // into b 20 ms late
  const nlohmann::json k = n.to_json()["samples"];
  EXPECT_EQ(k["boundaries"], 2);
  EXPECT_EQ(k["by_phone"]["b"]["boundaries"], 1);
  EXPECT_NEAR(k["by_phone"]["b"]["mean_signed_ms"].get<double>(), 20.0, 1e-9);
}

// A phone set without broad classes: the per-class scores are left out, with a note (docs/phone_sets.md);
// one with its own classes scores by them, a phone through its fold target.
TEST(AlignModel, BroadClassesComeFromThePhoneSet) {
  eval::AlignMetrics m;
  m.samples.class_names = {};
  m.phone_set = "derived";
  m.add_samples({1600, 3200}, 16000, {1616, 3200}, 16000, {-1, -1});
  m.utterances = 1;
  const nlohmann::json j = m.to_json()["samples"];
  EXPECT_EQ(j["boundaries"], 2);
  EXPECT_TRUE(j["by_class"].empty());
  EXPECT_EQ(j["by_class_note"], "phone set 'derived' names no broad classes: per-class scores omitted");
  const std::string t = m.table();
  EXPECT_NE(t.find("  (phone set 'derived' names no broad classes: per-class rows omitted)\n"), std::string::npos) << t;
  EXPECT_EQ(t.find("vowels"), std::string::npos) << t;

  data::PhoneSetSpec s;
  s.name = "ipa";
  s.phones = {"a", "ə", "t", "sil"};
  s.silence = {"sil"};
  s.fold = {{"ə", "a"}};
  s.broad_classes = {{"vowels", {"a"}}, {"stops", {"t"}}};
  const model::LabelSet ls = model::LabelSet::make(s);
  EXPECT_EQ(ls.spec.broad_class("ə"), 0);
  EXPECT_EQ(ls.spec.broad_class("sil"), -1);
  eval::AlignMetrics n;
  n.samples.class_names = ls.spec.broad_class_names();
  n.add_samples({1600, 3200, 4800}, 16000, {1600, 3232, 4800}, 16000,
                {ls.spec.broad_class("ə"), ls.spec.broad_class("t"), ls.spec.broad_class("sil")});
  const nlohmann::json k = n.to_json()["samples"]["by_class"];
  EXPECT_EQ(k["vowels"]["boundaries"], 1);
  EXPECT_NEAR(k["stops"]["mean_abs_ms"].get<double>(), 2.0, 1e-12);
  EXPECT_EQ(k.size(), 2u);
}

TEST(AlignModel, TextGridTiers) {
  const std::string tg = eval::textgrid_tiers(
      {{"phones", {{0, 8000, "sil"}, {8000, 16000, "aa"}}}, {"words", {{0, 8000, ""}, {8000, 16000, "say \"a\""}}}},
      16000, 16000);
  EXPECT_NE(tg.find("size = 2\n"), std::string::npos);
  EXPECT_NE(tg.find("item [2]:\n        class = \"IntervalTier\"\n        name = \"words\""), std::string::npos);
  EXPECT_NE(tg.find("text = \"say \"\"a\"\"\""), std::string::npos);
  EXPECT_NE(tg.find("xmin = 0.5\n            xmax = 1\n"), std::string::npos);
}
