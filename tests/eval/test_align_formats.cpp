// `timitseg align --format`: each writer on a hand-made alignment, its text
// checked line by line (hand-computed seconds), the JSON parsed back, the
// format list validated.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/align_formats.h"

using namespace timitseg;

namespace {

eval::AlignedOutput sample(bool words) {
  eval::AlignedOutput a;
  a.utterance = "spk1_utt2";
  a.audio = "in/a.wav";
  a.sample_rate = 16000;
  a.num_samples = 16000;
  a.phones = {{0, 4000, "sil"}, {4000, 8800, "ah"}, {8800, 16000, "s"}};
  a.has_words = words;
  if (words) a.words = {{0, 4000, ""}, {4000, 16000, "us, \"we\""}};
  return a;
}

std::string text_of(const std::vector<std::pair<std::string, std::string>>& files, const std::string& suffix) {
  for (const auto& [s, t] : files)
    if (s == suffix) return t;
  ADD_FAILURE() << "no " << suffix;
  return "";
}

}  // namespace

TEST(AlignFormats, EveryFormatWithWords) {
  const auto files = eval::render_alignment(sample(true), {"phn", "textgrid", "csv", "json", "ctm"});
  std::vector<std::string> suffixes;
  for (const auto& f : files) suffixes.push_back(f.first);
  EXPECT_EQ(suffixes, (std::vector<std::string>{".PHN", ".TextGrid", ".csv", ".json", ".ctm", ".words.ctm"}));
  EXPECT_EQ(text_of(files, ".PHN"), "0 4000 sil\n4000 8800 ah\n8800 16000 s\n");
  EXPECT_EQ(text_of(files, ".csv"),
            "tier,start,end,start_sample,end_sample,label\n"
            "phone,0.000000,0.250000,0,4000,sil\n"
            "phone,0.250000,0.550000,4000,8800,ah\n"
            "phone,0.550000,1.000000,8800,16000,s\n"
            "word,0.250000,1.000000,4000,16000,\"us, \"\"we\"\"\"\n");
  EXPECT_EQ(text_of(files, ".ctm"),
            "spk1_utt2 1 0.000000 0.250000 sil\nspk1_utt2 1 0.250000 0.300000 ah\nspk1_utt2 1 0.550000 0.450000 s\n");
  EXPECT_EQ(text_of(files, ".words.ctm"), "spk1_utt2 1 0.250000 0.750000 us, \"we\"\n");
  const nlohmann::json j = nlohmann::json::parse(text_of(files, ".json"));
  EXPECT_EQ(j["utterance"], "spk1_utt2");
  EXPECT_EQ(j["audio"], "in/a.wav");
  EXPECT_EQ(j["sample_rate"], 16000);
  EXPECT_EQ(j["num_samples"], 16000);
  ASSERT_EQ(j["phones"].size(), 3u);
  EXPECT_EQ(j["phones"][1]["label"], "ah");
  EXPECT_DOUBLE_EQ(j["phones"][1]["start"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(j["phones"][1]["end"].get<double>(), 0.55);
  EXPECT_EQ(j["phones"][1]["start_sample"], 4000);
  EXPECT_EQ(j["phones"][1]["end_sample"], 8800);
  ASSERT_EQ(j["words"].size(), 1u);  // the gap is not a word
  EXPECT_EQ(j["words"][0]["label"], "us, \"we\"");
  const std::string tg = text_of(files, ".TextGrid");
  EXPECT_NE(tg.find("size = 2\n"), std::string::npos) << tg;
  EXPECT_NE(tg.find("text = \"us, \"\"we\"\"\""), std::string::npos) << tg;
}

TEST(AlignFormats, WithoutWordsNoWordOutput) {
  const auto files = eval::render_alignment(sample(false), {"csv", "ctm", "json"});
  ASSERT_EQ(files.size(), 3u);  // no .words.ctm
  EXPECT_EQ(text_of(files, ".csv").find("word,"), std::string::npos);
  EXPECT_FALSE(nlohmann::json::parse(text_of(files, ".json")).contains("words"));
  EXPECT_EQ(eval::render_alignment(sample(false), {"textgrid"})[0].second.find("words"), std::string::npos);
}

TEST(AlignFormats, ParseListKeepsTableOrderAndRejectsUnknown) {
  EXPECT_EQ(eval::parse_align_formats({"ctm", "phn", "ctm"}), (std::vector<std::string>{"phn", "ctm"}));
  try {
    eval::parse_align_formats({"phn", "srt"});
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "--format: unknown format 'srt' (one or more of phn, textgrid, csv, json, ctm)");
  }
  EXPECT_THROW(eval::parse_align_formats({}), std::invalid_argument);
}
