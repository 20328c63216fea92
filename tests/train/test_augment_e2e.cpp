// Augmentation end to end with the built binary on a tiny synth corpus:
// `augment` copies chosen by augment.speed / augment.noise, spectral masks
// that change training and resume bitwise, per-utterance and per-speaker CMVN
// carried by the checkpoint, and a noisy test copy that evaluate and evaluate --align read.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/safetensors.h"
#include "data/augment.h"
#include "data/dataset.h"
#include "model/batch.h"
#include "model/checkpoint.h"
#include "train/train_data.h"

#include "tests/support/cli.h"

namespace fs = std::filesystem;
using namespace timitseg;

namespace {

using testsupport::Cmd;
using testsupport::run;
using testsupport::slurp;

class AugmentE2E : public ::testing::Test {
 protected:
  static fs::path dir_;
  static std::string config_;
  static void SetUpTestSuite() {
    dir_ = testsupport::fresh_temp_dir("timitseg_augment_e2e");
    Cmd c = testsupport::make_prepared_corpus(TIMITSEG_BINARY, dir_, 6, 4, 5);
    ASSERT_EQ(c.rc, 0) << c.output;
    const std::string synth = (dir_ / "synth").string();
    c = run("augment --timit " + synth + " --out " + (dir_ / "synth-aug").string() +
            " --speed 0.9,1.1 --noise babble --snr 0:20 --seed 1 --threads 2");
    ASSERT_EQ(c.rc, 0) << c.output;
    c = run("prepare --timit " + (dir_ / "synth-aug").string() + " --out " + (dir_ / "work-aug").string());
    ASSERT_EQ(c.rc, 0) << c.output;
    c = run("augment --timit " + synth + " --out " + (dir_ / "synth-noisy").string() +
            " --noisy-test --noise babble --snr 10 --seed 1 --threads 2");
    ASSERT_EQ(c.rc, 0) << c.output;
    c = run("prepare --timit " + (dir_ / "synth-noisy").string() + " --out " + (dir_ / "work-noisy").string());
    ASSERT_EQ(c.rc, 0) << c.output;
    config_ = (dir_ / "tiny.yaml").string();
    std::ofstream(config_) << "data:\n  workdir: " << (dir_ / "work").string()
                           << "\nmodel:\n  hidden_dim: 16\n  num_layers: 1\n  dropout: 0.1\n"
                              "crf:\n  max_duration: 12\n"
                              "train:\n  epochs: 2\n  batch_size: 4\n  lr: 0.01\n  seed: 3\n  threads: 2\n";
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static Cmd train(const std::string& run_dir, const std::string& sets) {
    return run("train --config " + config_ + " --set train.run_dir=" + (dir_ / run_dir).string() + " " + sets);
  }
};
fs::path AugmentE2E::dir_;
std::string AugmentE2E::config_;

size_t count_kind(const data::Split& s, data::Augmentation kind) {
  size_t n = 0;
  for (const auto& u : s.utterances) n += data::augmentation_of(u.id) == kind;
  return n;
}

}  // namespace

TEST_F(AugmentE2E, CopiesAreChosenByTheKeysAndNeverInDev) {
  config::Config cfg;
  cfg.data_workdir = (dir_ / "work-aug").string();
  const train::TrainData all = train::load_train_data(cfg);
  const size_t originals = count_kind(all.train, data::Augmentation::none);
  ASSERT_GT(originals, 0u);
  EXPECT_EQ(count_kind(all.train, data::Augmentation::speed), 2 * originals);  // 0.9 and 1.1 of each
  EXPECT_EQ(count_kind(all.train, data::Augmentation::noise), originals);
  for (const auto& u : all.dev.utterances) EXPECT_EQ(data::augmentation_of(u.id), data::Augmentation::none) << u.id;
  cfg.augment_speed = false;
  const train::TrainData no_speed = train::load_train_data(cfg);
  EXPECT_EQ(no_speed.train.utterances.size(), 2 * originals);
  EXPECT_EQ(count_kind(no_speed.train, data::Augmentation::speed), 0u);
  cfg.augment_noise = false;
  EXPECT_EQ(train::load_train_data(cfg).train.utterances.size(), originals);
  // the clean WORKDIR's train split is the copies' originals
  cfg.data_workdir = (dir_ / "work").string();
  EXPECT_EQ(train::load_train_data(cfg).train.utterances.size(), originals);
}

// compare loads the data of each variant with its own keys: --ablation augment's
// no-speed trains without the speed copies (it once trained on the base's data).
TEST_F(AugmentE2E, CompareAblationTrainsEachVariantOnItsOwnCopies) {
  config::Config cfg;
  cfg.data_workdir = (dir_ / "work-aug").string();
  const std::string key = train::train_data_key(cfg);
  config::Config other = cfg;
  other.train_lr = 0.5;
  other.crf_max_duration = 1;
  EXPECT_EQ(train::train_data_key(other), key);  // keys load_train_data does not read
  other.augment_speed = false;
  EXPECT_NE(train::train_data_key(other), key);
  const size_t originals = count_kind(train::load_train_data(cfg).train, data::Augmentation::none);
  ASSERT_GT(originals, 0u);

  const fs::path runs = dir_ / "cmp-ablation";
  const Cmd c = run("compare --config " + config_ + " --set data.workdir=" + cfg.data_workdir +
                    " --set train.run_dir=" + runs.string() + " --set train.epochs=1 --device cpu --jobs 1"
                    " --ablation augment --variant noaug:augment.speed=false,augment.noise=false");
  ASSERT_EQ(c.rc, 0) << c.output;
  auto trained_on = [&](const std::string& run_name) -> long {
    const std::string log = slurp(runs / run_name / "train.log");
    const size_t at = log.find(" train / ");
    if (at == std::string::npos) return -1;
    size_t from = log.rfind(' ', at - 1);
    return std::stol(log.substr(from + 1, at - from - 1));
  };
  EXPECT_EQ(trained_on("semicrf"), static_cast<long>(4 * originals));
  EXPECT_EQ(trained_on("linear"), static_cast<long>(4 * originals));
  EXPECT_EQ(trained_on("no-speed"), static_cast<long>(2 * originals));
  EXPECT_EQ(trained_on("no-noise"), static_cast<long>(3 * originals));
  EXPECT_EQ(trained_on("noaug"), static_cast<long>(originals));
}

TEST_F(AugmentE2E, SpecMasksChangeTrainingAndResumeBitwise) {
  const std::string masks =
      "--set augment.time_masks=2 --set augment.time_mask_width=10 --set augment.freq_masks=1 "
      "--set augment.freq_mask_width=5";
  Cmd a = train("run_masks", masks);
  ASSERT_EQ(a.rc, 0) << a.output;
  Cmd plain = train("run_plain", "");
  ASSERT_EQ(plain.rc, 0) << plain.output;
  const fs::path ra = dir_ / "run_masks", rb = dir_ / "run_masks_b";
  const st::File ca = st::load((ra / "checkpoints" / "epoch-2.safetensors").string());
  const st::File cp = st::load((dir_ / "run_plain" / "checkpoints" / "epoch-2.safetensors").string());
  EXPECT_NE(ca.get("crf.transition").bytes, cp.get("crf.transition").bytes) << "the masks changed nothing";
  // the same run stopped after epoch 1 and resumed: the same final checkpoint
  fs::create_directories(rb / "checkpoints");
  fs::copy_file(ra / "checkpoints" / "epoch-1.safetensors", rb / "checkpoints" / "epoch-1.safetensors");
  {
    std::istringstream in(slurp(ra / "metrics.jsonl"));
    std::string first;
    std::getline(in, first);
    std::ofstream(rb / "metrics.jsonl") << first << "\n";
  }
  Cmd r = run("train --resume " + rb.string());
  ASSERT_EQ(r.rc, 0) << r.output;
  const st::File cb = st::load((rb / "checkpoints" / "epoch-2.safetensors").string());
  ASSERT_EQ(ca.tensors.size(), cb.tensors.size());
  for (const auto& [name, t] : ca.tensors) EXPECT_EQ(t.bytes, cb.get(name).bytes) << name << " differs after --resume";
}

TEST_F(AugmentE2E, UtteranceCmvnTravelsInTheCheckpoint) {
  Cmd t = train("run_uttcmvn", "--set data.cmvn=utterance --set train.epochs=1");
  ASSERT_EQ(t.rc, 0) << t.output;
  const model::ModelState s = model::load_checkpoint((dir_ / "run_uttcmvn/checkpoints/epoch-1.safetensors").string());
  ASSERT_TRUE(s.has_cmvn);
  EXPECT_TRUE(s.cmvn.per_utterance);
  // the batch evaluate builds: every dimension of an utterance has mean 0 and variance 1 over its frames
  const data::Split dev = data::load_split((dir_ / "work").string(), "dev");
  const model::Batch b = model::make_batch({&dev.utterances[0]}, &s.cmvn, s.labels, 0);
  const int64_t T = dev.utterances[0].num_frames, D = dev.utterances[0].dim;
  for (int64_t d = 0; d < D; ++d) {
    double m = 0, v = 0;
    for (int64_t f = 0; f < T; ++f) m += b.input.features[f * D + d];
    m /= T;
    for (int64_t f = 0; f < T; ++f) v += (b.input.features[f * D + d] - m) * (b.input.features[f * D + d] - m);
    EXPECT_NEAR(m, 0.0, 1e-4) << d;
    EXPECT_NEAR(v / T, 1.0, 1e-3) << d;
  }
  Cmd e = run("evaluate --checkpoint " + (dir_ / "run_uttcmvn/checkpoints/epoch-1.safetensors").string() +
              " --split dev --no-progress");
  EXPECT_EQ(e.rc, 0) << e.output;
  const std::string exported = (dir_ / "uttcmvn-model.safetensors").string();
  Cmd x = run("export " + (dir_ / "run_uttcmvn/checkpoints/epoch-1.safetensors").string() + " --out " +
              exported);
  ASSERT_EQ(x.rc, 0) << x.output;
  EXPECT_EQ(st::load(exported).metadata.at("cmvn_mode"), "utterance");
  Cmd bad = train("run_bad", "--set data.cmvn=speakers");
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.output.find("data.cmvn"), std::string::npos) << bad.output;
}

// The features evaluate --dump-scores wrote for a split, by utterance id.
static std::map<std::string, std::vector<float>> dumped_features(const fs::path& dir) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const st::File f = st::load(e.path().string());
    out[f.metadata.at("utterance_id")] = f.get("features").to<float>();
  }
  return out;
}

TEST_F(AugmentE2E, SpeakerCmvnTravelsInTheCheckpoint) {
  Cmd t = train("run_spkcmvn", "--set data.cmvn=speaker --set train.epochs=2");
  ASSERT_EQ(t.rc, 0) << t.output;
  const std::string ck = (dir_ / "run_spkcmvn/checkpoints/epoch-2.safetensors").string();
  const model::ModelState s = model::load_checkpoint(ck);
  ASSERT_TRUE(s.has_cmvn);
  EXPECT_TRUE(s.cmvn.per_speaker);
  EXPECT_FALSE(s.cmvn.per_utterance);
  // evaluate, with nothing but the checkpoint to say how: the features it decoded (--dump-scores) are
  // each dev speaker's own normalization, against float64 statistics computed here over that speaker's
  // utterances of the dev split
  const fs::path dump = dir_ / "spkcmvn-scores";
  Cmd e = run("evaluate --checkpoint " + ck + " --split dev --no-progress --dump-scores " + dump.string());
  ASSERT_EQ(e.rc, 0) << e.output;
  const std::map<std::string, std::vector<float>> got = dumped_features(dump);
  const data::Split dev = data::load_split((dir_ / "work").string(), "dev");
  ASSERT_EQ(got.size(), dev.utterances.size());
  std::map<std::string, std::vector<const data::Utterance*>> by_speaker;
  for (const auto& u : dev.utterances) by_speaker[u.speaker].push_back(&u);
  size_t shared = 0;  // speakers with more than one utterance: where speaker and utterance CMVN differ
  for (const auto& [speaker, utts] : by_speaker) {
    const int64_t D = utts[0]->dim;
    std::vector<double> mean(D, 0.0), var(D, 0.0);
    int64_t T = 0;
    for (const auto* u : utts) {
      for (int64_t i = 0; i < int64_t(u->features.size()); ++i) mean[i % D] += u->features[i];
      T += u->num_frames;
    }
    for (auto& m : mean) m /= double(T);
    for (const auto* u : utts)
      for (int64_t i = 0; i < int64_t(u->features.size()); ++i)
        var[i % D] += (u->features[i] - mean[i % D]) * (u->features[i] - mean[i % D]) / double(T);
    shared += utts.size() > 1;
    std::vector<double> m2(D, 0.0), v2(D, 0.0);
    for (const auto* u : utts) {
      const std::vector<float>& f = got.at(u->id);
      ASSERT_EQ(f.size(), u->features.size()) << u->id;
      for (int64_t i = 0; i < int64_t(f.size()); ++i) {
        const double want = (u->features[i] - mean[i % D]) / std::sqrt(std::max(var[i % D], 1e-10));
        ASSERT_NEAR(f[i], want, 1e-4 * std::max(1.0, std::abs(want))) << u->id << " " << i;
        m2[i % D] += f[i] / double(T);
        v2[i % D] += double(f[i]) * f[i] / double(T);
      }
    }
    for (int64_t d = 0; d < D; ++d) {  // mean 0, variance 1 over the speaker's frames
      EXPECT_NEAR(m2[d], 0.0, 1e-4) << speaker << " " << d;
      if (var[d] > 1e-6) EXPECT_NEAR(v2[d] - m2[d] * m2[d], 1.0, 1e-3) << speaker << " " << d;
    }
  }
  EXPECT_GT(shared, 0u) << "no dev speaker with two utterances: the test cannot tell speaker from utterance CMVN";
  // a file decoded alone is its own speaker, said once
  Cmd d = run("decode --checkpoint " + ck + " --out " + (dir_ / "spkcmvn-decoded").string() + " " +
              dev.utterances[0].audio_path);
  ASSERT_EQ(d.rc, 0) << d.output;
  EXPECT_NE(d.output.find("data.cmvn speaker: decode normalizes each file with its own statistics"), std::string::npos)
      << d.output;
  const std::string exported = (dir_ / "spkcmvn-model.safetensors").string();
  Cmd x = run("export " + ck + " --out " + exported);
  ASSERT_EQ(x.rc, 0) << x.output;
  EXPECT_EQ(st::load(exported).metadata.at("cmvn_mode"), "speaker");
}

TEST_F(AugmentE2E, NoisyTestCopyIsEvaluatedWithTheCleanReferences) {
  // the noisy copy keeps train (features and CMVN) and the test utterances' labels; its test features differ
  const data::Split ct = data::load_split((dir_ / "work").string(), "test");
  const data::Split nt = data::load_split((dir_ / "work-noisy").string(), "test");
  ASSERT_EQ(ct.utterances.size(), nt.utterances.size());
  for (size_t i = 0; i < ct.utterances.size(); ++i) {
    EXPECT_EQ(ct.utterances[i].id, nt.utterances[i].id);
    EXPECT_EQ(ct.utterances[i].labels, nt.utterances[i].labels);
    EXPECT_NE(ct.utterances[i].features, nt.utterances[i].features);
  }
  EXPECT_EQ(data::load_cmvn((dir_ / "work").string()).mean, data::load_cmvn((dir_ / "work-noisy").string()).mean);
  Cmd t = train("run_eval", "--set train.epochs=1");
  ASSERT_EQ(t.rc, 0) << t.output;
  const std::string ck = (dir_ / "run_eval/checkpoints/epoch-1.safetensors").string();
  for (const std::string wd : {"work", "work-noisy"}) {
    const std::string json = (dir_ / (wd + ".json")).string();
    Cmd e = run("evaluate --checkpoint " + ck + " --workdir " + (dir_ / wd).string() +
                " --split test --align --no-progress --json " + json);
    ASSERT_EQ(e.rc, 0) << e.output;
    const nlohmann::json j = nlohmann::json::parse(slurp(json));
    EXPECT_TRUE(j.contains("align")) << j.dump();
    EXPECT_EQ(j.dump().find("nan"), std::string::npos);
  }
}
