// `timitseg align --format`: each writer on a hand-made alignment, its text
// checked line by line (hand-computed seconds), the JSON parsed back, the
// format list validated.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/align.h"
#include "eval/formats.h"

using namespace timitseg;

namespace {

using Fmt = eval::OutputFormat;

eval::Segmentation sample(bool words) {
  eval::Segmentation a;
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
  const auto files = eval::render_segmentation(sample(true), {Fmt::phn, Fmt::textgrid, Fmt::csv, Fmt::json, Fmt::ctm});
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
  const auto files = eval::render_segmentation(sample(false), {Fmt::csv, Fmt::ctm, Fmt::json});
  ASSERT_EQ(files.size(), 3u);  // no .words.ctm
  EXPECT_EQ(text_of(files, ".csv").find("word,"), std::string::npos);
  EXPECT_FALSE(nlohmann::json::parse(text_of(files, ".json")).contains("words"));
  EXPECT_EQ(eval::render_segmentation(sample(false), {Fmt::textgrid})[0].second.find("words"), std::string::npos);
}

TEST(AlignFormats, ParseListKeepsTableOrderAndRejectsUnknown) {
  EXPECT_EQ(eval::parse_formats({"ctm", "phn", "ctm"}),
            (std::vector<Fmt>{Fmt::phn, Fmt::ctm}));
  try {
    eval::parse_formats({"phn", "srt"});
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "--format: unknown format 'srt' (one or more of phn, textgrid, csv, json, ctm)");
  }
  EXPECT_THROW(eval::parse_formats({}), std::invalid_argument);
}

// With confidences: csv columns, JSON keys, two TextGrid tiers (3 decimals).
TEST(AlignFormats, ConfidenceInCsvJsonAndTextGrid) {
  eval::Segmentation a = sample(true);
  a.phone_confidence = {{0.5, 0.25}, {0.125, 1.0}, {0.9999, 0.0}};
  a.word_confidence = {{0.0, 0.0}, {0.0625, 0.0}};
  const auto files = eval::render_segmentation(a, {Fmt::textgrid, Fmt::csv, Fmt::json});
  EXPECT_EQ(text_of(files, ".csv"),
            "tier,start,end,start_sample,end_sample,label,boundary_confidence,label_confidence\n"
            "phone,0.000000,0.250000,0,4000,sil,0.500000,0.250000\n"
            "phone,0.250000,0.550000,4000,8800,ah,0.125000,1.000000\n"
            "phone,0.550000,1.000000,8800,16000,s,0.999900,0.000000\n"
            "word,0.250000,1.000000,4000,16000,\"us, \"\"we\"\"\",0.062500,0.000000\n");
  const nlohmann::json j = nlohmann::json::parse(text_of(files, ".json"));
  EXPECT_DOUBLE_EQ(j["phones"][1]["boundary_confidence"].get<double>(), 0.125);
  EXPECT_DOUBLE_EQ(j["phones"][2]["label_confidence"].get<double>(), 0.0);
  ASSERT_EQ(j["words"].size(), 1u);
  EXPECT_DOUBLE_EQ(j["words"][0]["boundary_confidence"].get<double>(), 0.0625);
  const std::string tg = text_of(files, ".TextGrid");
  EXPECT_NE(tg.find("size = 4\n"), std::string::npos);
  EXPECT_NE(tg.find("name = \"boundary_confidence\""), std::string::npos);
  EXPECT_NE(tg.find("name = \"label_confidence\""), std::string::npos);
  EXPECT_NE(tg.find("text = \"1.000\""), std::string::npos);  // 0.9999 and 1.0 at 3 decimals
  EXPECT_NE(tg.find("text = \"0.125\""), std::string::npos);
  // Without confidences nothing changes.
  const auto plain = eval::render_segmentation(sample(true), {Fmt::csv, Fmt::json});
  EXPECT_EQ(text_of(plain, ".csv").substr(0, 45), "tier,start,end,start_sample,end_sample,label\n");
  EXPECT_FALSE(nlohmann::json::parse(text_of(plain, ".json"))["phones"][0].contains("boundary_confidence"));
}

// Per word: min(first phone's start window, last phone's end window), min of
// its phones' label confidences; skipped phones left out; the means.
TEST(AlignFormats, UtteranceConfidenceByHand) {
  // phones: sil(word -1) | w0: a b | skipped sil | w1: c
  const std::vector<int32_t> dur{3, 2, 4, 0, 5};
  const std::vector<int> first{-1, 0, 0, -1, 1}, last{-1, 0, 0, -1, 1};
  const double boundary[] = {0.9, 0.8, 0.7, 0.3, 0.6};
  const double start[] = {0.95, 0.85, 0.75, 0.3, 0.65};
  const double end[] = {0.92, 0.82, 0.72, 0.3, 0.62};
  const double label[] = {0.5, 0.4, 0.9, 0.0, 0.2};
  const eval::UtteranceConfidence u =
      eval::utterance_confidence(dur, first, last, 2, boundary, start, end, label);
  ASSERT_EQ(u.phones.size(), 4u);
  EXPECT_EQ(u.phones[3], std::make_pair(0.6, 0.2));
  ASSERT_EQ(u.words.size(), 2u);
  EXPECT_DOUBLE_EQ(u.words[0].first, 0.72);   // min(start of a 0.85, end of b 0.72)
  EXPECT_DOUBLE_EQ(u.words[0].second, 0.4);   // min(0.4, 0.9)
  EXPECT_DOUBLE_EQ(u.words[1].first, 0.62);   // min(0.65, 0.62)
  EXPECT_DOUBLE_EQ(u.mean_boundary, (0.9 + 0.8 + 0.7 + 0.6) / 4);
  EXPECT_DOUBLE_EQ(u.mean_label, (0.5 + 0.4 + 0.9 + 0.2) / 4);
}

// decode's posterior: a csv column and a JSON key on the phones only.
TEST(AlignFormats, DecodePosteriorColumnAndKey) {
  eval::Segmentation a = sample(true);
  a.phone_posterior = {0.5, 0.25, 1.0};
  const auto files = eval::render_segmentation(a, {Fmt::csv, Fmt::json});
  EXPECT_EQ(text_of(files, ".csv"),
            "tier,start,end,start_sample,end_sample,label,posterior\n"
            "phone,0.000000,0.250000,0,4000,sil,0.500000\n"
            "phone,0.250000,0.550000,4000,8800,ah,0.250000\n"
            "phone,0.550000,1.000000,8800,16000,s,1.000000\n"
            "word,0.250000,1.000000,4000,16000,\"us, \"\"we\"\"\",\n");
  const nlohmann::json j = nlohmann::json::parse(text_of(files, ".json"));
  EXPECT_DOUBLE_EQ(j["phones"][1]["posterior"].get<double>(), 0.25);
  EXPECT_FALSE(j["words"][0].contains("posterior"));
}

// The words of the flags below the CLI (read into these enums by app/): a word changed here changes --help and
// docs/cli.md too.
TEST(AlignFormats, FlagWordsInTableOrder) {
  EXPECT_EQ(timitseg::common::enum_choices<Fmt>(), "phn, textgrid, csv, json, ctm");
  EXPECT_EQ(timitseg::common::enum_choices<eval::TranscriptSource>(), "auto, phn, wrd, txt");
  eval::TranscriptSource t{};
  ASSERT_TRUE(timitseg::common::parse_enum("wrd", &t));
  EXPECT_EQ(t, eval::TranscriptSource::wrd);
  EXPECT_FALSE(timitseg::common::parse_enum("PHN", &t));
  EXPECT_TRUE(eval::writes_posterior(Fmt::csv));
  EXPECT_TRUE(eval::writes_posterior(Fmt::json));
  EXPECT_FALSE(eval::writes_posterior(Fmt::phn));
  EXPECT_FALSE(eval::writes_posterior(Fmt::textgrid));
  EXPECT_FALSE(eval::writes_posterior(Fmt::ctm));
}
