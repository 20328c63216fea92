// Training from transcripts end to end with the built binary (docs/training.md
// "Training from transcripts"): a transcripts-only WORKDIR (a manifest of
// phone sequences without times) trains with a shipped config as it is; a
// timed WORKDIR trains on its phone sequences with crf.supervision=transcript,
// resumes bitwise and is scored against its times; segments on a WORKDIR
// without times stops with one line; crf.duration_init = data starts a
// transcript-trained run from the flat start (an equal split of each
// utterance's frames among its phones); several pronunciations of a word
// train as a phone graph.
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
#include "data/dataset.h"
#include "data/phones.h"
#include "tests/support/cli.h"

namespace fs = std::filesystem;
using namespace timitseg;

namespace {

using testsupport::Cmd;
using testsupport::metrics_lines;
using testsupport::run;

class TranscriptE2E : public ::testing::Test {
 protected:
  static fs::path dir_;
  static std::string config_;
  static void SetUpTestSuite() {
    dir_ = testsupport::fresh_temp_dir("timitseg_transcript_e2e");
    const Cmd c = testsupport::make_prepared_corpus(TIMITSEG_BINARY, dir_, 6, 4, 7);
    ASSERT_EQ(c.rc, 0) << c.output;
    // the same audio as a manifest of phone sequences (the .PHN labels without their times)
    fs::create_directories(dir_ / "phones");
    std::ofstream m(dir_ / "phones" / "manifest.csv");
    m << "audio,speaker,phones\n";
    for (const auto& e : fs::recursive_directory_iterator(dir_ / "synth")) {
      if (e.path().extension() != ".PHN") continue;
      std::ifstream in(e.path());
      std::string line, phones;
      while (std::getline(in, line)) {
        std::istringstream ls(line);
        long a = 0, b = 0;
        std::string p;
        if (ls >> a >> b >> p) phones += (phones.empty() ? "" : " ") + p;
      }
      fs::path wav = e.path();
      wav.replace_extension(".WAV");
      m << wav.string() << "," << e.path().parent_path().filename().string() << "," << phones << "\n";
    }
    m.close();
    const Cmd p = run("prepare --corpus " + (dir_ / "phones" / "manifest.csv").string() +
                      " --phone-set timit61 --out " + (dir_ / "work_phones").string());
    ASSERT_EQ(p.rc, 0) << p.output;
    config_ = (dir_ / "tiny.yaml").string();
    std::ofstream(config_) << "model:\n  hidden_dim: 16\n  num_layers: 1\n  dropout: 0.1\n"
                              "crf:\n  max_duration: 12\n  reg: 0.001\n"
                              "train:\n  epochs: 2\n  batch_size: 4\n  lr: 0.01\n  seed: 3\n  threads: 2\n";
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
};
fs::path TranscriptE2E::dir_;
std::string TranscriptE2E::config_;

// The 2-epoch run in `a` stopped after epoch 1 and resumed in `b`: the same
// epoch-2 checkpoint bit for bit.
void expect_resume_bitwise(const fs::path& a, const fs::path& b) {
  fs::create_directories(b / "checkpoints");
  fs::copy_file(a / "checkpoints" / "epoch-1.safetensors", b / "checkpoints" / "epoch-1.safetensors");
  {
    std::istringstream in(testsupport::slurp(a / "metrics.jsonl"));
    std::string first;
    std::getline(in, first);
    std::ofstream(b / "metrics.jsonl") << first << "\n";
  }
  const Cmd r = run("train --resume " + b.string());
  ASSERT_EQ(r.rc, 0) << r.output;
  const st::File fa = st::load((a / "checkpoints" / "epoch-2.safetensors").string());
  const st::File fb = st::load((b / "checkpoints" / "epoch-2.safetensors").string());
  for (const auto& [name, t] : fa.tensors) EXPECT_EQ(t.bytes, fb.get(name).bytes) << name;
}

// An utterance's phone sequence with its times hidden: the 39 classes of its frame labels, equal
// neighbours merged (the oracle of the flat start's tests).
std::vector<int> runs39(const data::Utterance& u) {
  std::vector<int> phones;
  for (int32_t l : u.labels) {
    const int c = data::PhoneSet::timit().map(l, 39);
    if (phones.empty() || phones.back() != c) phones.push_back(c);
  }
  return phones;
}

}  // namespace

TEST_F(TranscriptE2E, TranscriptsOnlyWorkdirTrainsWithAShippedConfig) {
  const fs::path rd = dir_ / "run_phones";
  const Cmd t = run("train --config " + std::string(TIMITSEG_SOURCE_DIR) + "/configs/synth.yaml --set data.workdir=" +
                    (dir_ / "work_phones").string() + " --set train.run_dir=" + rd.string() +
                    " --set train.epochs=2 --set model.hidden_dim=16 --set model.num_layers=1");
  ASSERT_EQ(t.rc, 0) << t.output;
  EXPECT_NE(t.output.find("train utterances train on their phone sequence (the transcript NLL), 0 on their phone times"),
            std::string::npos)
      << t.output;
  // the shipped config's crf.gaussian_head: auto (rule 9): on for a transcripts run, at its weight 0.1
  EXPECT_NE(t.output.find("crf.gaussian_head = auto: on (train utterances train on their transcript), "
                          "crf.gaussian_weight 0.1"),
            std::string::npos)
      << t.output;
  EXPECT_EQ(nlohmann::json::parse(testsupport::slurp(rd / "run.json"))["crf_gaussian_head"], true);
  // the shipped config's crf.flat_start: false: on a transcripts-only WORKDIR nothing to count, the draw alone
  EXPECT_NE(t.output.find("crf.duration_init = data: nothing to count in the 0 segments of the train split (K = 60): "
                          "0 gold; the "),
            std::string::npos)
      << t.output;
  EXPECT_NE(t.output.find("utterances that train on their transcript give none (crf.flat_start: false): "
                          "crf.duration_bias keeps the crf.init_scale draw"),
            std::string::npos)
      << t.output;
  EXPECT_EQ(t.output.find("from an equal split of the transcripts (flat start"), std::string::npos) << t.output;
  const auto lines = metrics_lines(rd);
  ASSERT_EQ(lines.size(), 2u);
  for (const auto& l : lines) {
    EXPECT_TRUE(l["dev_loss"].is_null()) << l.dump();  // no dev utterance has times
    EXPECT_TRUE(std::isfinite(l["dev_per"].get<double>())) << l.dump();
    EXPECT_GT(l["dev_utterances_without_times"].get<int>(), 0) << l.dump();
    EXPECT_TRUE(std::isfinite(l["train_loss"].get<double>())) << l.dump();
  }
  EXPECT_LT(lines[1]["train_loss"].get<double>(), lines[0]["train_loss"].get<double>());
  // times only: nothing can train
  const Cmd s = run("train --config " + config_ + " --set data.workdir=" + (dir_ / "work_phones").string() +
                    " --set train.run_dir=" + (dir_ / "run_segments").string() + " --set crf.supervision=segments");
  EXPECT_NE(s.rc, 0);
  EXPECT_NE(s.output.find("no train utterance can train under crf.supervision = segments"), std::string::npos)
      << s.output;
}

TEST_F(TranscriptE2E, TimedWorkdirTrainsOnItsPhoneSequencesResumesBitwiseAndAligns) {
  const std::string common = "--config " + config_ + " --set data.workdir=" + (dir_ / "work").string() +
                             " --set crf.supervision=transcript";
  const fs::path a = dir_ / "run_a", b = dir_ / "run_b";
  const Cmd ta = run("train " + common + " --set train.run_dir=" + a.string());
  ASSERT_EQ(ta.rc, 0) << ta.output;
  EXPECT_NE(ta.output.find("train utterances train on their phone sequence"), std::string::npos) << ta.output;
  // the same run stopped after epoch 1, resumed: the same checkpoint bit for bit
  expect_resume_bitwise(a, b);
  // scored against the times it never saw
  const Cmd e = run("evaluate --checkpoint " + (a / "checkpoints" / "best.safetensors").string() + " --workdir " +
                    (dir_ / "work").string() + " --split dev --align --json " + (dir_ / "eval.json").string());
  ASSERT_EQ(e.rc, 0) << e.output;
  EXPECT_NE(e.output.find("forced alignment"), std::string::npos) << e.output;
}

// crf.duration_init = data on a timed WORKDIR trained from its phone sequences:
// the checkpoint after one epoch at a negligible lr holds log p(d | label) of
// the flat start, computed here from the frame labels: each utterance's runs
// (39 classes, equal neighbours merged) as its phones, its frames split at
// floor(i T / n), each phone's frames cut at K as the loss cuts a run,
// add-one smoothed.
TEST_F(TranscriptE2E, DurationInitDataStartsFromTheFlatStart) {
  const fs::path rd = dir_ / "run_flat_start";
  const Cmd t = run("train --config " + config_ + " --set data.workdir=" + (dir_ / "work").string() +
                    " --set train.run_dir=" + rd.string() +
                    " --set crf.supervision=transcript --set train.epochs=1 --set train.lr=1e-12"
                    " --set crf.init_scale=0 --set crf.duration_init=data");
  ASSERT_EQ(t.rc, 0) << t.output;
  const int K = 12, C = 39;
  std::vector<double> n(K * C, 0.0), per(C, 0.0);
  const data::Split train = data::load_split((dir_ / "work").string(), "train");
  ASSERT_FALSE(train.utterances.empty());
  int64_t segments = 0;
  for (const data::Utterance& u : train.utterances) {
    const std::vector<int> phones = runs39(u);
    const int64_t T = u.num_frames, N = static_cast<int64_t>(phones.size());
    ASSERT_GE(T, N) << u.id;
    for (int64_t i = 0; i < N; ++i) {
      for (int64_t d = (i + 1) * T / N - i * T / N; d > 0; d -= K) {
        n[(std::min<int64_t>(d, K) - 1) * C + phones[i]] += 1;
        per[phones[i]] += 1;
        ++segments;
      }
    }
  }
  EXPECT_NE(t.output.find("crf.duration_bias starts at log p(duration | label) of the " + std::to_string(segments) +
                          " segments of the train split (K = 12): 0 gold, " + std::to_string(segments) +
                          " from an equal split of the transcripts (flat start"),
            std::string::npos)
      << t.output;
  const st::File ck = st::load((rd / "checkpoints" / "epoch-1.safetensors").string());
  const std::vector<float> db = ck.get("crf.duration_bias").to<float>();
  ASSERT_EQ(db.size(), size_t(K * C));
  for (int d = 0; d < K; ++d)
    for (int c = 0; c < C; ++c)
      EXPECT_NEAR(db[d * C + c], std::log((n[d * C + c] + 1) / (per[c] + K)), 1e-6) << "d " << d + 1 << " c " << c;
}

// Several pronunciations of a word (docs/training.md): the same audio as word
// transcripts, one word per phone, through an MFA dictionary that gives every
// vowel's word a second pronunciation (another vowel). prepare writes the
// slots; train sums over every path of each utterance's phone graph, says how
// many utterances offer several, and learns (finite losses, the second epoch's
// below the first); resume is bitwise as for a chain.
TEST_F(TranscriptE2E, SeveralPronunciationsOfAWordTrainAsAPhoneGraph) {
  fs::create_directories(dir_ / "words");
  std::ofstream m(dir_ / "words" / "manifest.csv");
  std::ofstream dict(dir_ / "words" / "dict.txt");
  m << "audio,speaker,text\n";
  const std::vector<std::string> vowels = {"aa", "ae", "ah", "ao", "aw", "ax", "ay", "eh", "er", "ey",
                                           "ih", "iy", "ow", "oy", "uh", "uw"};
  std::map<std::string, std::string> word_of;  // phone -> its word
  for (const auto& e : fs::recursive_directory_iterator(dir_ / "synth")) {
    if (e.path().extension() != ".PHN") continue;
    std::ifstream in(e.path());
    std::string line, text;
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      long a = 0, b = 0;
      std::string p;
      if (!(ls >> a >> b >> p) || p == "h#" || p == "pau" || p == "epi") continue;
      if (!word_of.count(p)) {
        const std::string w = "w" + std::to_string(word_of.size());
        word_of[p] = w;
        dict << w << "\t" << p << "\n";
        const auto v = std::find(vowels.begin(), vowels.end(), p);
        if (v != vowels.end()) dict << w << "\t0.5\t" << vowels[(v - vowels.begin() + 1) % vowels.size()] << "\n";
      }
      text += (text.empty() ? "" : " ") + word_of[p];
    }
    fs::path wav = e.path();
    wav.replace_extension(".WAV");
    m << wav.string() << "," << e.path().parent_path().filename().string() << "," << text << "\n";
  }
  m.close(), dict.close();
  const fs::path wd = dir_ / "work_words";
  const Cmd p = run("prepare --corpus " + (dir_ / "words" / "manifest.csv").string() + " --dict " +
                    (dir_ / "words" / "dict.txt").string() + " --phone-set timit61 --out " + wd.string());
  ASSERT_EQ(p.rc, 0) << p.output;
  const data::Split train = data::load_split(wd.string(), "train");
  int64_t graphs = 0;
  for (const data::Utterance& u : train.utterances) graphs += !u.transcript_slot.empty();
  ASSERT_GT(graphs, 0);
  const std::string common = "--config " + config_ + " --set data.workdir=" + wd.string();
  const fs::path a = dir_ / "run_graph_a", b = dir_ / "run_graph_b";
  const Cmd t = run("train " + common + " --set train.run_dir=" + a.string());
  ASSERT_EQ(t.rc, 0) << t.output;
  EXPECT_NE(t.output.find(std::to_string(graphs) + " of them offer several pronunciations of a word: the loss sums "
                          "over every path of their phone graph"),
            std::string::npos)
      << t.output;
  const auto lines = metrics_lines(a);
  ASSERT_EQ(lines.size(), 2u);
  for (const auto& l : lines) {
    EXPECT_TRUE(std::isfinite(l["train_loss"].get<double>())) << l.dump();
    EXPECT_TRUE(std::isfinite(l["dev_per"].get<double>())) << l.dump();
  }
  EXPECT_LT(lines[1]["train_loss"].get<double>(), lines[0]["train_loss"].get<double>());
  expect_resume_bitwise(a, b);
  // with the Gaussian head: after the flat start every transcript is aligned, those with several
  // pronunciations by the best of their combinations (model::pronunciation_chains), none left out
  const Cmd h = run("train " + common + " --set crf.gaussian_head=true --set train.run_dir=" + (dir_ / "run_graph_h").string());
  ASSERT_EQ(h.rc, 0) << h.output;
  EXPECT_NE(h.output.find("epoch 2: the Gaussian head (crf.gaussian_head) re-estimated from "), std::string::npos)
      << h.output;
  EXPECT_NE(h.output.find(" 0 utterances by their times, " + std::to_string(train.utterances.size()) +
                          " by their forced alignment (" + std::to_string(graphs) +
                          " of them the best of their pronunciation combinations), 0 by the flat start"),
            std::string::npos)
      << h.output;
  EXPECT_EQ(h.output.find("left out"), std::string::npos) << h.output;
}

// crf.gaussian_weight (model/gaussian_head.h) on a timed WORKDIR trained from its phone sequences: before
// epoch 1 the head comes from the flat start, computed here from the WORKDIR's frames (CMVN applied) and
// each utterance's runs split at floor(i T / n): every class's mean and second moment with 16 frames of the
// pooled ones added (the MAP prior, model::kGaussianPriorFrames), its variance floored at 0.01 times the
// pooled variance, as w * log N up to a constant; before epoch 2 from the forced
// alignment (the log says which); resume is bitwise.
TEST_F(TranscriptE2E, GaussianHeadStartsFromTheFlatStartAlignsThenResumesBitwise) {
  const fs::path a = dir_ / "run_gauss_a", b = dir_ / "run_gauss_b";
  const std::string common = "--config " + config_ + " --set data.workdir=" + (dir_ / "work").string() +
                             " --set crf.supervision=transcript --set crf.gaussian_head=auto --set crf.gaussian_weight=0.3";
  const Cmd t = run("train " + common + " --set train.run_dir=" + a.string());
  ASSERT_EQ(t.rc, 0) << t.output;
  EXPECT_NE(t.output.find("crf.gaussian_head = auto: on (train utterances train on their transcript), "
                          "crf.gaussian_weight 0.3"),
            std::string::npos)
      << t.output;
  EXPECT_EQ(nlohmann::json::parse(testsupport::slurp(a / "run.json"))["crf_gaussian_head"], true);
  const data::Split train = data::load_split((dir_ / "work").string(), "train");
  const data::Cmvn cmvn = data::load_cmvn((dir_ / "work").string());
  const int C = 39, D = train.utterances.at(0).dim;
  std::vector<double> n(C, 0.0), s1(size_t(C) * D, 0.0), s2(size_t(C) * D, 0.0);
  int64_t frames = 0;
  for (const data::Utterance& u : train.utterances) {
    const std::vector<int> phones = runs39(u);
    const int64_t T = u.num_frames, N = static_cast<int64_t>(phones.size());
    for (int64_t i = 0; i < N; ++i)
      for (int64_t f = i * T / N; f < (i + 1) * T / N; ++f) {
        n[phones[i]] += 1;
        for (int d = 0; d < D; ++d) {
          const double x = (u.features[f * D + d] - cmvn.mean[d]) / std::sqrt(std::max(cmvn.var[d], 1e-10));
          s1[size_t(phones[i]) * D + d] += x;
          s2[size_t(phones[i]) * D + d] += x * x;
        }
      }
    frames += T;
  }
  EXPECT_NE(t.output.find("epoch 1: the Gaussian head (crf.gaussian_head) re-estimated from " +
                          std::to_string(frames) + " frames: 0 utterances by their times, 0 by their forced alignment, " +
                          std::to_string(train.utterances.size()) + " by the flat start"),
            std::string::npos)
      << t.output;
  EXPECT_NE(t.output.find("epoch 2: the Gaussian head (crf.gaussian_head) re-estimated from " +
                          std::to_string(frames) + " frames: 0 utterances by their times, " +
                          std::to_string(train.utterances.size()) + " by their forced alignment, 0 by the flat start"),
            std::string::npos)
      << t.output;
  std::vector<double> pm(D, 0.0), pv(D, 0.0);
  for (int d = 0; d < D; ++d) {
    double a1 = 0, a2 = 0;
    for (int c = 0; c < C; ++c) a1 += s1[size_t(c) * D + d], a2 += s2[size_t(c) * D + d];
    pm[d] = a1 / double(frames);
    pv[d] = a2 / double(frames) - pm[d] * pm[d];
  }
  const st::File ck = st::load((a / "checkpoints" / "epoch-1.safetensors").string());
  const std::vector<float> w = ck.get("crf.gaussian_projection.weight").to<float>();
  const std::vector<float> bias = ck.get("crf.gaussian_projection.bias").to<float>();
  ASSERT_EQ(w.size(), size_t(C) * 2 * D);
  int empty = 0;
  for (int c = 0; c < C; ++c) {
    double bc = 0;
    empty += n[c] == 0;
    for (int d = 0; d < D; ++d) {
      const double r = 16.0, m = n[c] + r;
      const double mu = (s1[size_t(c) * D + d] + r * pm[d]) / m;  // n = 0: the pooled mean
      const double var = std::max((s2[size_t(c) * D + d] + r * (pv[d] + pm[d] * pm[d])) / m - mu * mu, 0.01 * pv[d]);
      EXPECT_NEAR(w[size_t(c) * 2 * D + d], -0.15 / var, 1e-3 * (0.15 / var)) << "class " << c << " dim " << d;
      EXPECT_NEAR(w[size_t(c) * 2 * D + D + d], 0.3 * mu / var, 1e-3 * (1 + std::abs(0.3 * mu / var)));
      bc += -0.5 * mu * mu / var - 0.5 * std::log(var);
    }
    EXPECT_NEAR(bias[c], 0.3 * bc, 1e-3 * (1 + std::abs(0.3 * bc))) << "class " << c;
  }
  EXPECT_GT(empty, 0);  // the tiny corpus leaves some of the 39 classes out: the pooled Gaussian
  EXPECT_LT(empty, C - 5);
  expect_resume_bitwise(a, b);
}
