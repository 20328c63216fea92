// Own corpora (issue 13): a TIMIT-layout corpus whose TEST speakers are not on
// the standard dev / core-test lists. prepare warns (one line per list), takes
// dev from the TRAIN speakers (default: a seeded 10%, at least one;
// --dev-speakers N), holds them out of train and of the CMVN statistics,
// leaves core-test empty and records the split in manifest.json.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/corpus.h"
#include "data/dataset.h"
#include "data/synth.h"
#include "data/timit_lists.h"
#include "util.h"

namespace fs = std::filesystem;
using namespace timitseg::data;

namespace {

// synth corpus (20 speakers: 14 TRAIN, 6 TEST) whose TEST speaker folders are
// renamed to ids on no TIMIT list (XQA00, XQA10, ...).
struct OwnCorpus {
  testutil::TempDir dir;
  std::string root;
  std::set<std::string> train_speakers;  // lower case, from the folders
  OwnCorpus() {
    SynthOptions so;
    so.out_dir = root = dir.str("corpus");
    so.speakers = 20;
    so.utterances_per_speaker = 1;
    so.seed = 3;
    synth_corpus(so);
    int k = 0;
    for (const auto& dr : fs::directory_iterator(fs::path(root) / "TEST")) {
      std::vector<fs::path> spk;
      for (const auto& s : fs::directory_iterator(dr.path())) spk.push_back(s.path());
      for (const auto& s : spk) fs::rename(s, dr.path() / ("XQA" + std::to_string(k++) + "0"));
    }
    for (const auto& dr : fs::directory_iterator(fs::path(root) / "TRAIN"))
      for (const auto& s : fs::directory_iterator(dr.path())) train_speakers.insert(to_lower(s.path().filename()));
  }
};

PrepareSummary prepare_into(const std::string& corpus, const std::string& out, int dev_speakers = 0) {
  PrepareOptions po;
  po.timit_dir = corpus;
  po.workdir = out;
  po.threads = 2;
  po.progress = false;
  po.dev_speakers = dev_speakers;
  return prepare(po);
}

std::set<std::string> speakers_of(const Split& s) {
  std::set<std::string> out;
  for (const auto& u : s.utterances) out.insert(u.speaker);
  return out;
}

}  // namespace

TEST(PrepareOwnCorpus, DefaultDevIsASeededTenPercentOfTrainSpeakers) {
  OwnCorpus c;
  for (const auto& s : c.train_speakers) ASSERT_EQ(dev_speakers().count(s), 0u);
  ASSERT_EQ(c.train_speakers.size(), 14u);
  const std::string wd = c.dir.str("work");
  const PrepareSummary sum = prepare_into(c.root, wd);
  EXPECT_EQ(sum.dev_rule, "from train");
  EXPECT_EQ(sum.core_test_rule, "empty");
  ASSERT_EQ(sum.dev_speaker_ids.size(), 1u);  // round(0.1 * 14) = 1
  // one warning line per list, each naming it
  int dev_lines = 0, core_lines = 0;
  for (const auto& p : sum.problems) {
    if (p.find("standard dev list") != std::string::npos) ++dev_lines;
    if (p.find("standard core-test list") != std::string::npos) ++core_lines;
  }
  EXPECT_EQ(dev_lines, 1);
  EXPECT_EQ(core_lines, 1);

  const Split dev = load_split(wd, "dev"), train = load_split(wd, "train");
  ASSERT_FALSE(dev.utterances.empty());
  EXPECT_EQ(speakers_of(dev), std::set<std::string>(sum.dev_speaker_ids.begin(), sum.dev_speaker_ids.end()));
  for (const auto& u : dev.utterances) EXPECT_EQ(u.id.rfind("train/", 0), 0u) << u.id;
  // held out of train: train + dev speakers = all TRAIN speakers, disjoint
  std::set<std::string> tr = speakers_of(train), all = tr;
  for (const auto& s : speakers_of(dev)) {
    EXPECT_EQ(tr.count(s), 0u) << s;
    all.insert(s);
  }
  EXPECT_EQ(all, c.train_speakers);
  EXPECT_TRUE(load_split(wd, "core-test").utterances.empty());
  EXPECT_EQ(speakers_of(load_split(wd, "test")).size(), 6u);

  // CMVN from the (reduced) train split only: float64 mean of its frames
  const Cmvn cmvn = load_cmvn(wd);
  std::vector<double> mean(cmvn.mean.size(), 0.0);
  int64_t n = 0;
  for (const auto& u : train.utterances) {
    for (int32_t t = 0; t < u.num_frames; ++t)
      for (int32_t d = 0; d < u.dim; ++d) mean[d] += u.features[size_t(t) * u.dim + d];
    n += u.num_frames;
  }
  for (size_t d = 0; d < mean.size(); ++d) EXPECT_NEAR(mean[d] / double(n), cmvn.mean[d], 1e-9 * (1 + std::abs(cmvn.mean[d])));

  // recorded in the manifest: which speakers, how chosen
  const auto m = nlohmann::json::parse(timitseg::read_file(wd + "/manifest.json"));
  const auto& rule = m.at("split_rule").at("dev");
  EXPECT_EQ(rule.at("rule"), "from train");
  EXPECT_EQ(rule.at("speakers").get<std::vector<std::string>>(), sum.dev_speaker_ids);
  EXPECT_EQ(rule.at("seed").get<uint64_t>(), PrepareOptions::kDefaultDevSeed);
  EXPECT_EQ(rule.at("requested"), "default");
  EXPECT_EQ(m.at("split_rule").at("core-test").at("rule"), "empty");

  // a no-op re-run reports the same split
  const PrepareSummary again = prepare_into(c.root, wd);
  EXPECT_TRUE(again.up_to_date);
  EXPECT_EQ(again.dev_speaker_ids, sum.dev_speaker_ids);
  EXPECT_EQ(again.core_test_rule, "empty");
}

TEST(PrepareOwnCorpus, DevSpeakersTwoFromTheCommandLine) {
  OwnCorpus c;
  const std::string wd = c.dir.str("work");
  std::string out;
  ASSERT_EQ(testutil::run_capture(std::string(TIMITSEG_BINARY) + " prepare --no-progress --timit " + c.root +
                                      " --out " + wd + " --dev-speakers 2",
                                  &out),
            0)
      << out;
  // exactly one warning line about the dev list, naming it
  size_t dev_warnings = 0, pos = 0;
  while ((pos = out.find("[warning]", pos)) != std::string::npos) {
    const std::string line = out.substr(pos, out.find('\n', pos) - pos);
    if (line.find("standard dev list") != std::string::npos) ++dev_warnings;
    ++pos;
  }
  EXPECT_EQ(dev_warnings, 1u) << out;
  EXPECT_NE(out.find("core-test: empty"), std::string::npos) << out;
  const auto m = nlohmann::json::parse(timitseg::read_file(wd + "/manifest.json"));
  const auto ids = m.at("split_rule").at("dev").at("speakers").get<std::vector<std::string>>();
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(m.at("split_rule").at("dev").at("requested"), 2);
  EXPECT_EQ(speakers_of(load_split(wd, "dev")), std::set<std::string>(ids.begin(), ids.end()));
  for (const auto& id : ids) EXPECT_EQ(c.train_speakers.count(id), 1u) << id;
  EXPECT_EQ(m.at("splits").at("train").at("speakers"), 12);

  // too many: train must keep a speaker; nothing written
  const std::string wd2 = c.dir.str("work2");
  EXPECT_NE(testutil::run_capture(std::string(TIMITSEG_BINARY) + " prepare --no-progress --timit " + c.root +
                                      " --out " + wd2 + " --dev-speakers 14",
                                  &out),
            0);
  EXPECT_NE(out.find("error: "), std::string::npos) << out;
  EXPECT_NE(out.find("14 dev speakers from 14 TRAIN speakers"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(wd2 + "/manifest.json"));
}

TEST(PrepareOwnCorpus, DevSpeakersIsRefusedOnAStandardCorpus) {
  testutil::TempDir dir;
  SynthOptions so;
  so.out_dir = dir.str("corpus");
  so.speakers = 6;
  so.utterances_per_speaker = 1;
  synth_corpus(so);
  std::string out;
  EXPECT_NE(testutil::run_capture(std::string(TIMITSEG_BINARY) + " prepare --no-progress --timit " + so.out_dir +
                                      " --out " + dir.str("work") + " --dev-speakers 1",
                                  &out),
            0);
  EXPECT_NE(out.find("error: --dev-speakers 1: "), std::string::npos) << out;
  // without it: the standard lists, no warning about them
  const PrepareSummary sum = prepare_into(so.out_dir, dir.str("work"));
  EXPECT_EQ(sum.dev_rule, "standard list");
  EXPECT_EQ(sum.core_test_rule, "standard list");
  for (const auto& p : sum.problems) EXPECT_EQ(p.find("standard dev list"), std::string::npos) << p;
}

TEST(PrepareOwnCorpus, ChooseDevSpeakersIsASeededSubset) {
  std::vector<std::string> spk;
  for (int i = 0; i < 30; ++i) spk.push_back("s" + std::to_string(100 + i));
  const auto a = choose_dev_speakers(spk, 5, 13);
  ASSERT_EQ(a.size(), 5u);
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
  EXPECT_EQ(std::set<std::string>(a.begin(), a.end()).size(), 5u);
  for (const auto& s : a) EXPECT_NE(std::find(spk.begin(), spk.end(), s), spk.end());
  std::vector<std::string> rev(spk.rbegin(), spk.rend());
  EXPECT_EQ(choose_dev_speakers(rev, 5, 13), a);  // input order does not matter
  std::set<std::string> seen;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const auto d = choose_dev_speakers(spk, 5, seed);
    std::string key;
    for (const auto& s : d) key += s + ",";
    seen.insert(key);
  }
  EXPECT_GT(seen.size(), 10u);  // the seed matters
  // every speaker is reachable: over many seeds each is drawn at least once
  std::set<std::string> drawn;
  for (uint64_t seed = 0; seed < 200; ++seed)
    for (const auto& s : choose_dev_speakers(spk, 3, seed)) drawn.insert(s);
  EXPECT_EQ(drawn.size(), spk.size());
  EXPECT_THROW(choose_dev_speakers(spk, 0, 1), std::invalid_argument);
  EXPECT_THROW(choose_dev_speakers(spk, 30, 1), std::invalid_argument);
  EXPECT_THROW(choose_dev_speakers({"a"}, 1, 1), std::invalid_argument);
}
