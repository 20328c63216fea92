// prepare / load round trip on a small synthetic corpus, CMVN, the no-op re-run,
// corrupted-cache detection, and the `features` command.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "data/corpus.h"
#include "data/dataset.h"
#include "common/safetensors.h"
#include "data/synth.h"
#include "util.h"

using namespace timitseg::data;

namespace {
struct Prepared {
  testutil::TempDir dir;
  PrepareOptions po;
  PrepareSummary first;
  Prepared() {
    SynthOptions so;
    so.out_dir = dir.str("corpus");
    so.speakers = 6;
    so.utterances_per_speaker = 2;
    so.seed = 7;
    synth_corpus(so);
    po.timit_dir = so.out_dir;
    po.workdir = dir.str("work");
    po.threads = 2;
    po.progress = false;
    first = prepare(po);
  }
};
}  // namespace

TEST(Prepare, RoundTripMatchesDirectComputation) {
  Prepared p;
  EXPECT_FALSE(p.first.up_to_date);
  const FeatureOptions fo = load_feature_options(p.po.workdir);
  EXPECT_EQ(feature_options_to_json(fo).dump(), feature_options_to_json(FeatureOptions()).dump());
  int64_t total = 0;
  for (const auto& name : split_names()) {
    Split s = load_split(p.po.workdir, name);
    EXPECT_EQ(s.name, name);
    ASSERT_FALSE(s.utterances.empty()) << name;
    total += static_cast<int64_t>(s.utterances.size());
    for (const auto& u : s.utterances) {
      SCOPED_TRACE(u.id);
      const Audio a = read_audio(u.audio_path);
      int32_t T = 0;
      const auto x = compute_features(a, fo, &T);
      ASSERT_EQ(u.num_frames, T);
      ASSERT_EQ(u.dim, 39);
      EXPECT_EQ(u.num_samples, static_cast<int64_t>(a.samples.size()));
      ASSERT_EQ(u.features, x);  // bitwise
      std::string phn_path = u.audio_path;
      phn_path.replace(phn_path.size() - 3, 3, "PHN");
      std::vector<Problem> probs;
      auto ph = parse_phn(phn_path, timitseg::read_file(phn_path), u.num_samples, &probs);
      EXPECT_TRUE(probs.empty());
      EXPECT_EQ(u.labels, frame_labels(ph, T, fo));
      // segments tile the utterance, each a run of one label, adjacent runs differ
      int32_t pos = 0;
      for (size_t k = 0; k < u.segments.size(); ++k) {
        const auto& sg = u.segments[k];
        EXPECT_EQ(sg.start, pos);
        for (int32_t t = sg.start; t < sg.start + sg.length; ++t) EXPECT_EQ(u.labels[t], sg.label);
        if (k) EXPECT_NE(sg.label, u.segments[k - 1].label);
        pos += sg.length;
      }
      EXPECT_EQ(pos, T);
      EXPECT_EQ(u.speaker, u.id.substr(u.id.find('/', u.id.find('/') + 1) + 1, 5));
    }
  }
  // CMVN = float64 mean / population variance of the loaded train features
  Split train = load_split(p.po.workdir, "train");
  Cmvn c = load_cmvn(p.po.workdir);
  ASSERT_EQ(c.mean.size(), 39u);
  std::vector<double> s1(39, 0), s2(39, 0);
  int64_t n = 0;
  for (const auto& u : train.utterances)
    for (int t = 0; t < u.num_frames; ++t, ++n)
      for (int d = 0; d < 39; ++d) s1[d] += u.features[t * 39 + d];
  for (int d = 0; d < 39; ++d) s1[d] /= n;
  for (const auto& u : train.utterances)
    for (int t = 0; t < u.num_frames; ++t)
      for (int d = 0; d < 39; ++d) s2[d] += std::pow(u.features[t * 39 + d] - s1[d], 2);
  for (int d = 0; d < 39; ++d) {
    EXPECT_NEAR(c.mean[d], s1[d], 1e-9 * std::max(1.0, std::abs(s1[d])));
    EXPECT_NEAR(c.var[d], s2[d] / n, 1e-9 * std::max(1.0, s2[d] / n));
  }
  // applied to train: mean 0, variance 1 per dimension
  std::vector<double> m(39, 0), v(39, 0);
  for (auto& u : train.utterances) {
    c.apply(u.features.data(), u.num_frames);
    for (int t = 0; t < u.num_frames; ++t)
      for (int d = 0; d < 39; ++d) { m[d] += u.features[t * 39 + d]; v[d] += std::pow(u.features[t * 39 + d], 2); }
  }
  for (int d = 0; d < 39; ++d) {
    EXPECT_NEAR(m[d] / n, 0.0, 1e-4);
    EXPECT_NEAR(v[d] / n, 1.0, 1e-4);
  }
  // manifest: counts and checksums of every file
  nlohmann::json man = nlohmann::json::parse(timitseg::read_file(p.po.workdir + "/manifest.json"));
  EXPECT_EQ(man["format_version"], kPreparedFormatVersion);
  EXPECT_EQ(man["splits"]["train"]["utterances"], train.utterances.size());
  for (const std::string f : {"train.safetensors", "dev.safetensors", "core-test.safetensors", "test.safetensors",
                              "cmvn.safetensors", "phones.json", "durations.json"})
    EXPECT_EQ(man["files"][f]["sha256"].get<std::string>().size(), 64u) << f;
  nlohmann::json dur = nlohmann::json::parse(timitseg::read_file(p.po.workdir + "/durations.json"));
  const auto& sil = dur["train"]["39"]["sil"];
  EXPECT_GT(sil["count"].get<int>(), 0);
  EXPECT_LE(sil["median"].get<double>(), sil["p95"].get<double>());
  EXPECT_LE(sil["p95"].get<double>(), sil["max"].get<double>());
}

// A manifest whose files and options match but whose summary does not read
// (hand-edited: a count that is not a number, a split missing) is rebuilt like
// a cache that does not match, not an error without the file's name.
TEST(Prepare, AManifestWhoseSummaryDoesNotReadIsRebuilt) {
  Prepared p;
  const std::string path = p.po.workdir + "/manifest.json";
  for (int edit = 0; edit < 2; ++edit) {
    nlohmann::json m = nlohmann::json::parse(timitseg::read_file(path));
    if (edit == 0)
      m["splits"]["train"]["frames"] = "many";
    else
      m["splits"].erase("dev");
    testutil::write_text(path, m.dump(2));
    const PrepareSummary again = prepare(p.po);
    EXPECT_FALSE(again.up_to_date) << edit;
    ASSERT_EQ(again.splits.size(), p.first.splits.size());
    for (size_t i = 0; i < again.splits.size(); ++i) EXPECT_EQ(again.splits[i].frames, p.first.splits[i].frames);
    EXPECT_TRUE(prepare(p.po).up_to_date) << edit;  // the rebuilt manifest reads
  }
}

TEST(Prepare, ReRunIsANoOpUnlessForcedOrChanged) {
  Prepared p;
  auto again = prepare(p.po);
  EXPECT_TRUE(again.up_to_date);
  ASSERT_EQ(again.splits.size(), p.first.splits.size());
  for (size_t i = 0; i < again.splits.size(); ++i) EXPECT_EQ(again.splits[i].frames, p.first.splits[i].frames);
  PrepareOptions f = p.po;
  f.force = true;
  EXPECT_FALSE(prepare(f).up_to_date);
  PrepareOptions fb = p.po;
  fb.features = FeatureOptions::defaults_for(FeatureType::fbank);
  EXPECT_FALSE(prepare(fb).up_to_date);
  EXPECT_EQ(load_split(p.po.workdir, "dev").utterances[0].dim, 40);
  EXPECT_TRUE(prepare(fb).up_to_date);
}

TEST(Prepare, CorruptedCacheIsDetected) {
  Prepared p;
  const std::string train = p.po.workdir + "/train.safetensors";
  auto expect_caught = [&](const std::string& file) {
    try {
      load_split(p.po.workdir, "train");
      FAIL() << "not detected";
    } catch (const std::runtime_error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(file), std::string::npos) << m;
      EXPECT_NE(m.find("re-run `timitseg prepare`"), std::string::npos) << m;
    }
  };
  std::string bytes = timitseg::read_file(train);
  // one edited byte deep in the feature data (size unchanged)
  std::string edited = bytes;
  edited[edited.size() / 2] ^= 0x01;
  testutil::write_text(train, edited);
  expect_caught("train.safetensors");
  // truncated
  testutil::write_text(train, bytes.substr(0, bytes.size() - 100));
  expect_caught("train.safetensors");
  // restored: loads again; a no-op re-run notices nothing; an edited file makes
  // prepare rebuild instead of a no-op
  testutil::write_text(train, bytes);
  EXPECT_NO_THROW(load_split(p.po.workdir, "train"));
  testutil::write_text(train, edited);
  EXPECT_FALSE(prepare(p.po).up_to_date);
  EXPECT_NO_THROW(load_split(p.po.workdir, "train"));
  // cmvn and a missing manifest
  std::string cm = timitseg::read_file(p.po.workdir + "/cmvn.safetensors");
  cm[cm.size() - 3] ^= 0x40;
  testutil::write_text(p.po.workdir + "/cmvn.safetensors", cm);
  EXPECT_THROW(load_cmvn(p.po.workdir), std::runtime_error);
  std::filesystem::remove(p.po.workdir + "/manifest.json");
  expect_caught("manifest.json");
}

TEST(FeaturesCommand, OneTensorPerInputNamedByPath) {
  testutil::TempDir d;
  const auto a = testutil::test_signal(5000, 3), b = testutil::test_signal(3000, 4);
  testutil::write_audio(d.str("a.wav"), a, 16000, SF_FORMAT_NIST);
  testutil::write_audio(d.str("b.wav"), b, 16000, SF_FORMAT_WAV);
  const std::string out = d.str("f.safetensors");
  ASSERT_EQ(testutil::run(std::string(TIMITSEG_BINARY) + " features " + d.str("a.wav") + " " + d.str("b.wav") +
                          " --features fbank --num-mel-bins 80 --out " + out),
            0);
  auto f = timitseg::st::load(out);
  ASSERT_EQ(f.tensors.size(), 2u);
  FeatureOptions o = FeatureOptions::defaults_for(FeatureType::fbank);
  o.num_mel_bins = 80;
  for (const auto& [name, sig] : {std::pair{d.str("a.wav"), a}, std::pair{d.str("b.wav"), b}}) {
    const auto& t = f.get(name);
    Audio au;
    au.sample_rate = 16000;
    for (short s : sig) au.samples.push_back(s);
    int32_t T = 0;
    auto x = compute_features(au, o, &T);
    EXPECT_EQ(t.shape, (std::vector<int64_t>{T, 80}));
    EXPECT_EQ(t.to<float>(), x);
  }
  // a missing input: non-zero exit, no output file
  EXPECT_NE(testutil::run(std::string(TIMITSEG_BINARY) + " features " + d.str("nope.wav") + " --out " +
                          d.str("g.safetensors")),
            0);
  EXPECT_FALSE(std::filesystem::exists(d.str("g.safetensors")));
}

TEST(Prepare, OutputIndependentOfThreadCount) {
  Prepared p;  // 2 threads
  PrepareOptions one = p.po;
  one.workdir = p.dir.str("work1");
  one.threads = 1;
  prepare(one);
  for (const std::string f : {"train.safetensors", "dev.safetensors", "core-test.safetensors", "test.safetensors",
                              "cmvn.safetensors", "durations.json", "phones.json"})
    EXPECT_EQ(timitseg::read_file(p.po.workdir + "/" + f), timitseg::read_file(one.workdir + "/" + f)) << f;
}

// The TIMIT path assembles its split files from the utterance spill of the
// staging folder: each is byte for byte what st::save writes of the tensors
// and metadata it holds, and the WORKDIR holds the prepared files only (no
// spill, no staging folder left).
TEST(Prepare, SplitFilesAreWhatStSaveWritesAndNoSpillIsLeft) {
  Prepared p;
  for (const auto& name : split_names()) {
    const std::string path = p.po.workdir + "/" + name + ".safetensors";
    timitseg::st::save(p.dir.str("resaved.safetensors"), timitseg::st::load(path));
    EXPECT_EQ(timitseg::read_file(path), timitseg::read_file(p.dir.str("resaved.safetensors"))) << name;
  }
  std::set<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(p.po.workdir)) files.insert(e.path().filename().string());
  EXPECT_EQ(files, (std::set<std::string>{"cmvn.safetensors", "core-test.safetensors", "dev.safetensors",
                                          "durations.json", "manifest.json", "phone_set.yaml", "phones.json",
                                          "test.safetensors", "train.safetensors"}));
}

// A TIMIT prepare that fails after its utterances were spilled (every TRAIN
// utterance unusable: CMVN has nothing to come from) is one error, and leaves
// neither the WORKDIR nor the parent folder it created.
TEST(Prepare, FailureAfterTheSpillLeavesNoWorkdirNorParent) {
  testutil::TempDir dir;
  SynthOptions so;
  so.out_dir = dir.str("corpus");
  so.speakers = 4;
  so.utterances_per_speaker = 2;
  so.seed = 3;
  synth_corpus(so);
  int broken = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir.str("corpus/TRAIN")))
    if (e.path().extension() == ".PHN") testutil::write_text(e.path().string(), "0 10 zz\n"), ++broken;
  ASSERT_GT(broken, 0);
  PrepareOptions po;
  po.timit_dir = so.out_dir;
  po.workdir = dir.str("new/work");
  po.progress = false;
  try {
    prepare(po);
    ADD_FAILURE() << "prepare succeeded without a usable TRAIN utterance";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no usable TRAIN utterance"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(dir.str("new")));
}
