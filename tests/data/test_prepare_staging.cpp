// The WORKDIR of `prepare --corpus` is written through the staging folder the
// TIMIT path uses (data/prepare_stage.h, issues 41 and 43): a prepare that
// fails or is interrupted (SIGINT, sent by the process to itself at a known
// check: TIMITSEG_TEST_SIGINT_AT_CHECK) leaves no WORKDIR it created, no empty
// parent folder, no staging folder, and a WORKDIR of an earlier run as it was.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/files.h"
#include "data/dataset.h"
#include "data/prepare_stage.h"
#include "util.h"

namespace fs = std::filesystem;
using namespace timitseg::data;

namespace {

const char* kPhoneSet = "name: tiny\nphones: [sil, aa, s]\nsilence: [sil]\n";

// A CSV manifest of `n` utterances (1 s each, speakers x0..x{n-1}; x0 and x1
// train, x2 dev, the rest test); with `audio_present` false no audio exists.
std::string write_manifest_corpus(const testutil::TempDir& d, int n, bool audio_present = true) {
  std::string csv = "id,audio,speaker,split,segments\n";
  for (int i = 0; i < n; ++i) {
    const std::string name = "u" + std::to_string(i);
    if (audio_present)
      testutil::write_audio(d.str("m/" + name + ".wav"), testutil::test_signal(16000, 7u + i), 16000, SF_FORMAT_WAV);
    const std::string split = i < 2 ? "train" : i == 2 ? "dev" : "test";
    csv += name + "," + name + ".wav,x" + std::to_string(i) + "," + split + ",\"0 0.3 sil; 0.3 0.7 aa; 0.7 1 s\"\n";
  }
  testutil::write_text(d.str("m/manifest.csv"), csv);
  testutil::write_text(d.str("tiny.yaml"), kPhoneSet);
  return d.str("m");
}

std::vector<std::string> error_lines(const std::string& out) {
  std::vector<std::string> v;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("error:", 0) == 0) v.push_back(line);
  return v;
}

// Every entry of DIR (recursively), as paths relative to it.
std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> v;
  for (const auto& e : fs::recursive_directory_iterator(dir)) v.push_back(fs::relative(e.path(), dir).string());
  return v;
}

}  // namespace

TEST(PrepareStaging, FailedCorpusPrepareLeavesNoWorkdirNorParent) {
  testutil::TempDir d;
  const std::string corpus = write_manifest_corpus(d, 4, /*audio_present=*/false);
  PrepareOptions po;
  po.corpus_dir = corpus;
  po.workdir = d.str("new/wd");  // neither folder exists
  po.phone_set = d.str("tiny.yaml");
  po.threads = 2;
  po.progress = false;
  try {
    prepare(po);
    FAIL() << "every utterance is bad";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), corpus + ": no usable train utterance: CMVN statistics come from the train split");
  }
  EXPECT_FALSE(fs::exists(d.str("new"))) << "a failed prepare left the folders it created";
  // --strict stops at the first bad utterance: nothing either
  po.strict = true;
  EXPECT_THROW(prepare(po), std::runtime_error);
  EXPECT_FALSE(fs::exists(d.str("new")));
}

TEST(PrepareStaging, SigintDuringCorpusPrepareIsOneLineExit130AndNoFolder) {
  testutil::TempDir d;
  const std::string corpus = write_manifest_corpus(d, 5);
  const std::string bin = TIMITSEG_BINARY;
  auto prepare_cmd = [&](const std::string& at, const std::string& out, const std::string& more) {
    return (at.empty() ? "" : "TIMITSEG_TEST_SIGINT_AT_CHECK=" + at + " ") + bin + " prepare --corpus " + corpus +
           " --phone-set " + d.str("tiny.yaml") + " --out " + out + " --threads 1 --no-progress" + more;
  };
  struct Case { std::string at, want; };
  // check k (one thread) comes before utterance k; check 6 is the last one, before the renames
  const std::vector<Case> cases = {
      {"1", "error: prepare interrupted (SIGINT): 0 of 5 utterances processed, nothing written (" +
                d.str("new/wd") + " is as it was); run the same command again"},
      {"3", "error: prepare interrupted (SIGINT): 2 of 5 utterances processed, nothing written (" +
                d.str("new/wd") + " is as it was); run the same command again"},
      {"6", "error: prepare interrupted (SIGINT): every utterance processed, nothing written (" + d.str("new/wd") +
                " is as it was); run the same command again"}};
  for (const Case& c : cases) {
    SCOPED_TRACE("SIGINT at check " + c.at);
    std::string out;
    EXPECT_EQ(testutil::run_capture(prepare_cmd(c.at, d.str("new/wd"), ""), &out), 130) << out;
    EXPECT_EQ(error_lines(out), std::vector<std::string>{c.want}) << out;
    EXPECT_FALSE(fs::exists(d.str("new"))) << "an interrupted prepare left the folders it created";
  }
  // a WORKDIR of an earlier run: an interrupted --force leaves it as it was, without a staging folder
  std::string out;
  ASSERT_EQ(testutil::run_capture(prepare_cmd("", d.str("wd"), ""), &out), 0) << out;
  std::map<std::string, std::string> before;
  for (const auto& e : entries(d.str("wd"))) before[e] = timitseg::read_file(d.str("wd/" + e));
  for (const std::string at : {"2", "6"}) {
    EXPECT_EQ(testutil::run_capture(prepare_cmd(at, d.str("wd"), " --force"), &out), 130) << out;
    std::map<std::string, std::string> after;
    for (const auto& e : entries(d.str("wd"))) after[e] = timitseg::read_file(d.str("wd/" + e));
    EXPECT_EQ(after, before) << "SIGINT at check " << at;
  }
  // and it is still up to date (its manifest verifies)
  ASSERT_EQ(testutil::run_capture(prepare_cmd("", d.str("wd"), ""), &out), 0) << out;
  EXPECT_NE(out.find("up to date"), std::string::npos) << out;
}

// durations.json of prepare --corpus comes from each phone's histogram of run
// lengths: the same entry as from the run lengths themselves (the oracle:
// duration_entry of the vector, sorted), for odd and even counts, ties, one run.
TEST(PrepareStaging, DurationEntryOfAHistogramIsTheEntryOfItsRuns) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 60);
    std::vector<int64_t> runs;
    std::map<int64_t, int64_t> hist;
    for (int i = 0; i < n; ++i) {
      const int64_t len = 1 + static_cast<int64_t>(rng() % (trial % 3 == 0 ? 4 : 40));  // few distinct: ties
      runs.push_back(len);
      ++hist[len];
    }
    EXPECT_EQ(duration_entry(hist).dump(), duration_entry(runs).dump()) << "trial " << trial;
  }
}
