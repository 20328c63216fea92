// The WORKDIR of `prepare --corpus`, and of `prepare --timit`, whose
// utterances are spilled there as they are processed, is written through the
// staging folder (data/prepare_stage.h, issues 41 and 43): a prepare that
// fails or is interrupted (SIGINT, sent by the process to itself at a known
// check: TIMITSEG_TEST_SIGINT_AT_CHECK) leaves no WORKDIR it created, no empty
// parent folder, no staging folder, and a WORKDIR of an earlier run as it was.
// The split files of both paths are assembled from streams byte for byte as
// st::save writes them.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/atomic_file.h"
#include "common/files.h"
#include "common/safetensors.h"
#include "data/dataset.h"
#include "data/prepare_stage.h"
#include "data/synth.h"
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

// write_split_safetensors (the split files of both prepare paths, assembled
// from streams) against st::save of the same File: the same bytes, for random
// tensors in pieces of random sizes, empty tensors, and an "utterances" value
// with characters JSON escapes (quotes, backslashes, control and UTF-8
// characters), whose length moves the header's padding through every residue.
TEST(PrepareStaging, StreamedSplitFileIsWhatStSaveWrites) {
  namespace st = timitseg::st;
  testutil::TempDir d;
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 24; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    const int64_t F = trial % 5 == 0 ? 0 : static_cast<int64_t>(rng() % 50), U = trial % 5 == 0 ? 0 : 1 + rng() % 4;
    std::vector<float> feats(static_cast<size_t>(F) * 3);
    for (auto& x : feats) x = static_cast<float>(static_cast<int64_t>(rng() % 2001) - 1000) / 7.0f;
    std::vector<int32_t> labels(static_cast<size_t>(F));
    for (auto& x : labels) x = static_cast<int32_t>(rng() % 61);
    std::vector<int64_t> nsamp(static_cast<size_t>(U));
    for (auto& x : nsamp) x = static_cast<int64_t>(rng() % 100000);
    nlohmann::ordered_json utts = nlohmann::ordered_json::array();
    for (int64_t u = 0; u < U; ++u)
      utts.push_back({{"id", "dr1/\"q\\" + std::string(static_cast<size_t>(trial % 8), 'x') + "\t\xc3\xa9"},
                      {"speaker", "s" + std::to_string(u)}});
    st::File f;
    f.metadata = {{"format_version", "3"}, {"split", "train"}, {"labels", "index"}, {"utterances", utts.dump()}};
    f.tensors["features"] = st::Tensor::from<float>({F, 3}, feats);
    f.tensors["labels"] = st::Tensor::from<int32_t>({F}, labels);
    f.tensors["num_samples"] = st::Tensor::from<int64_t>({U}, nsamp);
    st::save(d.str("saved.safetensors"), f);
    // the same, streamed: each tensor written in pieces of random sizes
    auto pieces = [&](const void* data, size_t bytes) {
      return [data, bytes, &rng](timitseg::AtomicFile& out) {
        for (size_t at = 0; at < bytes;) {
          const size_t n = std::min(bytes - at, 1 + static_cast<size_t>(rng() % 37));
          out.write(static_cast<const char*>(data) + at, n);
          at += n;
        }
      };
    };
    std::map<std::string, std::string> meta = f.metadata;
    meta["utterances"] = "";
    const std::string escaped = json_escaped(utts.dump());
    write_split_safetensors(d.str("streamed.safetensors"), meta, escaped.size(),
                            [&](timitseg::AtomicFile& out) { out.write(escaped); },
                            {{"features", st::DType::F32, {F, 3}, feats.size() * 4, pieces(feats.data(), feats.size() * 4)},
                             {"labels", st::DType::I32, {F}, labels.size() * 4, pieces(labels.data(), labels.size() * 4)},
                             {"num_samples", st::DType::I64, {U}, nsamp.size() * 8, pieces(nsamp.data(), nsamp.size() * 8)}});
    ASSERT_EQ(timitseg::read_file(d.str("streamed.safetensors")), timitseg::read_file(d.str("saved.safetensors")));
  }
  // tensors out of name order, or "utterances" not the last key: a logic error, nothing written
  auto none = [](timitseg::AtomicFile&) {};
  EXPECT_THROW(write_split_safetensors(d.str("bad.safetensors"), {{"utterances", ""}}, 0, none,
                                       {{"labels", st::DType::I32, {0}, 0, none}, {"features", st::DType::F32, {0}, 0, none}}),
               std::logic_error);
  EXPECT_THROW(write_split_safetensors(d.str("bad.safetensors"), {{"utterances", ""}, {"zz", "1"}}, 0, none, {}),
               std::logic_error);
  EXPECT_FALSE(fs::exists(d.str("bad.safetensors")));
}

// TIMIT's path (--timit) spills its utterances into the staging folder as they
// are processed: SIGINT before any, halfway, or after the last (before the
// renames) is one line, exit 130, and leaves neither the spill nor the folders
// it created; a WORKDIR of an earlier run stays as it was.
TEST(PrepareStaging, SigintDuringTimitPrepareIsOneLineExit130AndNoFolder) {
  testutil::TempDir d;
  SynthOptions so;
  so.out_dir = d.str("timit");
  so.speakers = 4;
  so.utterances_per_speaker = 2;  // 8 utterances besides the SA1s
  so.seed = 5;
  synth_corpus(so);
  const std::string bin = TIMITSEG_BINARY;
  auto prepare_cmd = [&](const std::string& at, const std::string& out, const std::string& more) {
    return (at.empty() ? "" : "TIMITSEG_TEST_SIGINT_AT_CHECK=" + at + " ") + bin + " prepare --timit " + so.out_dir +
           " --out " + out + " --threads 1 --no-progress" + more;
  };
  auto line = [&](const std::string& what) {
    return "error: prepare interrupted (SIGINT): " + what + ", nothing written (" + d.str("new/wd") +
           " is as it was); run the same command again";
  };
  // check k (one thread) comes before utterance k; check 9 is the last one, before the renames
  for (const auto& [at, want] : std::vector<std::pair<std::string, std::string>>{
           {"1", line("0 of 8 utterances processed")},
           {"5", line("4 of 8 utterances processed")},
           {"9", line("every utterance processed")}}) {
    SCOPED_TRACE("SIGINT at check " + at);
    std::string out;
    EXPECT_EQ(testutil::run_capture(prepare_cmd(at, d.str("new/wd"), ""), &out), 130) << out;
    EXPECT_EQ(error_lines(out), std::vector<std::string>{want}) << out;
    EXPECT_FALSE(fs::exists(d.str("new"))) << "an interrupted prepare left the folders it created";
  }
  std::string out;
  ASSERT_EQ(testutil::run_capture(prepare_cmd("", d.str("wd"), ""), &out), 0) << out;
  std::map<std::string, std::string> before;
  for (const auto& e : entries(d.str("wd"))) before[e] = timitseg::read_file(d.str("wd/" + e));
  for (const std::string at : {"3", "9"}) {
    EXPECT_EQ(testutil::run_capture(prepare_cmd(at, d.str("wd"), " --force"), &out), 130) << out;
    std::map<std::string, std::string> after;
    for (const auto& e : entries(d.str("wd"))) after[e] = timitseg::read_file(d.str("wd/" + e));
    EXPECT_EQ(after, before) << "SIGINT at check " << at;
  }
}
