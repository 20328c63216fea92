// End to end with the built binary on a tiny synth corpus: a 2-epoch run whose
// loss falls; evaluate (--json, --dump-scores) and decode; --resume gives a
// bitwise identical final checkpoint; a non-finite step stops training with a
// diagnostic and a crf-replay file.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "crf/backend.h"
#include "crf/segments.h"
#include "data/dataset.h"
#include "data/phones.h"
#include "common/safetensors.h"
#include "common/cuda.h"
#include "train/train.h"

#include "tests/support/cli.h"

namespace fs = std::filesystem;
using namespace timitseg;

namespace {

using testsupport::Cmd;
using testsupport::sh;
using testsupport::slurp;
using testsupport::run;

using testsupport::metrics_lines;

class TrainE2E : public ::testing::Test {
 protected:
  static fs::path dir_;
  static std::string config_;
  static void SetUpTestSuite() {
    dir_ = testsupport::fresh_temp_dir("timitseg_model_e2e");
    const Cmd c = testsupport::make_prepared_corpus(TIMITSEG_BINARY, dir_, 6, 4, 5);
    ASSERT_EQ(c.rc, 0) << c.output;
    config_ = (dir_ / "tiny.yaml").string();
    std::ofstream(config_) << "data:\n  workdir: " << (dir_ / "work").string()
                           << "\nmodel:\n  hidden_dim: 16\n  num_layers: 1\n  dropout: 0.1\n"
                              "crf:\n  max_duration: 12\n  reg: 0.001\n"
                              "train:\n  epochs: 2\n  batch_size: 4\n  lr: 0.01\n  seed: 3\n  threads: 2\n"
                              "  run_dir: "
                           << (dir_ / "run_a").string() << "\n";
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
};
fs::path TrainE2E::dir_;
std::string TrainE2E::config_;

}  // namespace

TEST_F(TrainE2E, TwoEpochsLossFallsThenEvaluateAndDecode) {
  const fs::path run_a = dir_ / "run_a";
  // a tiny drift threshold makes the drift warning fire (numerics unchanged)
  Cmd t = run("train --config " + config_ + " --set debug.drift_threshold=1e-9");
  ASSERT_EQ(t.rc, 0) << t.output;
  EXPECT_NE(t.output.find("epoch 1: CRF parameters drifting high: max|transition| = "), std::string::npos) << t.output;
  EXPECT_NE(t.output.find("consider raising --crf-reg"), std::string::npos) << t.output;
  const auto lines = metrics_lines(run_a);
  ASSERT_EQ(lines.size(), 2u) << t.output;
  for (const char* key : {"epoch", "train_loss", "dev_per", "frames_per_sec", "utterances_per_sec", "epoch_seconds",
                          "lr", "max_abs_transition", "max_abs_duration_bias"})
    for (const auto& l : lines) EXPECT_TRUE(l.contains(key)) << key;
  EXPECT_EQ(lines[0]["epoch"], 1);
  EXPECT_LT(lines[1]["train_loss"].get<double>(), lines[0]["train_loss"].get<double>()) << t.output;
  EXPECT_TRUE(fs::exists(run_a / "config.yaml"));
  EXPECT_TRUE(fs::exists(run_a / "checkpoints" / "epoch-1.safetensors"));
  EXPECT_TRUE(fs::exists(run_a / "checkpoints" / "epoch-2.safetensors"));
  EXPECT_TRUE(fs::exists(run_a / "checkpoints" / "best.safetensors"));
  // checkpoint: PyTorch names and shapes, metadata for decode and resume
  const st::File ck = st::load((run_a / "checkpoints" / "epoch-2.safetensors").string());
  EXPECT_EQ(ck.get("encoder.lstm.weight_ih_l0_reverse").shape, (std::vector<int64_t>{32, 16}));
  EXPECT_EQ(ck.get("crf.duration_bias").shape, (std::vector<int64_t>{12, 39}));
  EXPECT_TRUE(ck.has("optimizer.exp_avg.crf.transition"));
  for (const char* m : {"config", "rng_state", "epoch", "feature_options", "label_names"})
    EXPECT_TRUE(ck.metadata.count(m)) << m;

  // evaluate: the checkpoint reproduces the dev PER logged during training
  const fs::path json2 = dir_ / "eval_dev.json";
  Cmd e2 = run("evaluate --checkpoint " + (run_a / "checkpoints" / "epoch-2.safetensors").string() +
               " --split dev --json " + json2.string());
  ASSERT_EQ(e2.rc, 0) << e2.output;
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(slurp(json2))["per"].get<double>(), lines[1]["dev_per"].get<double>());

  // evaluate
  const fs::path json = dir_ / "eval.json", dump = dir_ / "dump";
  Cmd e = run("evaluate --checkpoint " + (run_a / "checkpoints" / "best.safetensors").string() +
              " --split core-test --json " + json.string() + " --dump-scores " + dump.string());
  ASSERT_EQ(e.rc, 0) << e.output;
  EXPECT_NE(e.output.find("PER"), std::string::npos);
  const auto j = nlohmann::json::parse(slurp(json));
  for (const char* k : {"per", "segment_f1", "frame_accuracy", "confusion", "durations"}) EXPECT_TRUE(j.contains(k)) << k;
  for (const char* tol : {"0", "1", "2"}) EXPECT_TRUE(j["boundary_f1"].contains(tol));
  EXPECT_GE(j["boundary_f1"]["2"].get<double>(), j["boundary_f1"]["0"].get<double>());
  int dumped = 0;
  for (const auto& f : fs::directory_iterator(dump)) {
    const st::File d = st::load(f.path().string());
    const auto& feats = d.get("features", st::DType::F32, {-1, 39});
    d.get("scores", st::DType::F32, {feats.shape[0], 39});
    const auto seg = d.get("segments", st::DType::I32, {-1, 3}).to<int32_t>();
    int64_t covered = 0;  // segments tile [0, T)
    for (size_t i = 0; i < seg.size(); i += 3) {
      EXPECT_EQ(seg[i], covered);
      covered += seg[i + 1];
    }
    EXPECT_EQ(covered, feats.shape[0]);
    ++dumped;
  }
  EXPECT_EQ(dumped, j["utterances"].get<int>());

  // decode a TIMIT tree (TEST) into .PHN + TextGrid
  const fs::path out = dir_ / "decoded";
  Cmd dcd = run("decode --checkpoint " + (run_a / "checkpoints" / "best.safetensors").string() + " " +
                (dir_ / "synth" / "TEST").string() + " --out " + out.string());
  ASSERT_EQ(dcd.rc, 0) << dcd.output;
  int phn = 0;
  for (const auto& f : fs::recursive_directory_iterator(out)) {
    if (f.path().extension() != ".PHN") continue;
    ++phn;
    EXPECT_TRUE(fs::exists(fs::path(f.path()).replace_extension(".TextGrid")));
    std::istringstream in(slurp(f.path()));
    long long b, e, prev_end = 0;
    std::string name;
    int rows = 0;
    while (in >> b >> e >> name) {
      EXPECT_EQ(b, prev_end);
      EXPECT_GT(e, b);
      prev_end = e;
      ++rows;
    }
    EXPECT_GT(rows, 0);
  }
  EXPECT_GT(phn, 0);
}

TEST_F(TrainE2E, ResumeIsBitwiseIdentical) {
  const fs::path run_a = dir_ / "run_a", run_b = dir_ / "run_b";
  if (!fs::exists(run_a / "checkpoints" / "epoch-2.safetensors")) {
    Cmd t = run("train --config " + config_);
    ASSERT_EQ(t.rc, 0) << t.output;
  }
  // B: the same run interrupted after epoch 1
  fs::remove_all(run_b);
  fs::create_directories(run_b / "checkpoints");
  fs::copy_file(run_a / "checkpoints" / "epoch-1.safetensors", run_b / "checkpoints" / "epoch-1.safetensors");
  {
    std::istringstream in(slurp(run_a / "metrics.jsonl"));
    std::string first;
    std::getline(in, first);
    std::ofstream(run_b / "metrics.jsonl") << first << "\n";
  }
  Cmd r = run("train --resume " + run_b.string());
  ASSERT_EQ(r.rc, 0) << r.output;
  const st::File a = st::load((run_a / "checkpoints" / "epoch-2.safetensors").string());
  const st::File b = st::load((run_b / "checkpoints" / "epoch-2.safetensors").string());
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (const auto& [name, t] : a.tensors) {
    ASSERT_TRUE(b.has(name)) << name;
    EXPECT_EQ(t.bytes, b.get(name).bytes) << name << " differs after --resume";
  }
  for (const auto& [k, v] : a.metadata)
    if (k != "config") EXPECT_EQ(v, b.metadata.at(k)) << k;  // config differs only in train.run_dir
  const auto la = metrics_lines(run_a), lb = metrics_lines(run_b);
  ASSERT_EQ(lb.size(), 2u);
  EXPECT_EQ(la[1]["train_loss"], lb[1]["train_loss"]);
  EXPECT_EQ(la[1]["dev_per"], lb[1]["dev_per"]);
}

TEST_F(TrainE2E, NonFiniteStepStopsWithDiagnosticsAndReplayFile) {
  const fs::path run_c = dir_ / "run_c";
  Cmd t = run("train --config " + config_ + " --set train.run_dir=" + run_c.string() +
              " --set debug.inject_nonfinite=1:2");
  EXPECT_NE(t.rc, 0);
  EXPECT_NE(t.output.find("error: training stopped at epoch 1, batch 2/"), std::string::npos) << t.output;
  EXPECT_NE(t.output.find("first non-finite tensor: CRF input"), std::string::npos) << t.output;
  EXPECT_NE(t.output.find("transition"), std::string::npos) << t.output;
  EXPECT_NE(t.output.find("utterances: train/"), std::string::npos) << t.output;
  const fs::path replay = run_c / "nonfinite-epoch1-batch2.safetensors";
  ASSERT_TRUE(fs::exists(replay)) << t.output;
  const st::File f = st::load(replay.string());
  const auto& cum = f.get("cum_scores", st::DType::F32, {4, -1, 39});
  f.get("transition", st::DType::F32, {39, 39});
  f.get("duration_bias", st::DType::F32, {12, 39});
  f.get("lengths", st::DType::I32, {4});
  f.get("labels", st::DType::I32, {4, cum.shape[1] - 1});
  // crf replay reproduces the failure, naming the tensor, and writes nothing
  const fs::path out = dir_ / "replay_out.safetensors";
  Cmd rp = run("crf replay " + replay.string() + " --backend reference --out " + out.string());
  EXPECT_NE(rp.rc, 0) << rp.output;
  EXPECT_NE(rp.output.find("transition"), std::string::npos) << rp.output;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(run_c / "checkpoints" / "epoch-1.safetensors"));
  // nothing was completed, so the same run directory can be retried (without the injection)
  EXPECT_NO_THROW(train::check_fresh_run_dir(run_c.string()));
}

// data.label_set 48 and 61 train and evaluate: C = 48 and C = 60 (61 without q,
// which prepared labels never contain), the checkpoint's label names are the
// set's, and evaluation scores on 39 phones.
TEST_F(TrainE2E, LabelSets48And61TrainAndEvaluate) {
  const std::vector<std::string>& n61 = data::PhoneSet::timit().names61();
  for (const int set : {48, 61}) {
    const fs::path run_dir = dir_ / ("run_set" + std::to_string(set));
    Cmd t = run("train --config " + config_ + " --set train.run_dir=" + run_dir.string() +
                " --set data.label_set=" + std::to_string(set) + " --set train.epochs=1");
    ASSERT_EQ(t.rc, 0) << t.output;
    const int C = set == 48 ? 48 : 60;
    const fs::path ckpt = run_dir / "checkpoints" / "epoch-1.safetensors";
    const st::File ck = st::load(ckpt.string());
    EXPECT_EQ(ck.get("crf.duration_bias").shape, (std::vector<int64_t>{12, C}));
    EXPECT_EQ(ck.get("crf.transition").shape, (std::vector<int64_t>{C, C}));
    EXPECT_EQ(ck.get("crf.projection.weight").shape, (std::vector<int64_t>{C, 16}));
    const auto names = nlohmann::json::parse(ck.metadata.at("label_names")).get<std::vector<std::string>>();
    ASSERT_EQ(static_cast<int>(names.size()), C);
    if (set == 48) {
      EXPECT_EQ(names, data::PhoneSet::timit().names(48));
    } else {
      std::vector<std::string> expect;
      for (const std::string& p : n61)
        if (p != "q") expect.push_back(p);
      EXPECT_EQ(names, expect);
    }
    const fs::path json = dir_ / ("eval_set" + std::to_string(set) + ".json");
    Cmd e = run("evaluate --checkpoint " + ckpt.string() + " --split dev --json " + json.string());
    ASSERT_EQ(e.rc, 0) << e.output;
    const auto j = nlohmann::json::parse(slurp(json));
    EXPECT_DOUBLE_EQ(j["per"].get<double>(), metrics_lines(run_dir)[0]["dev_per"].get<double>());
    EXPECT_EQ(j["confusion"].size(), 39u) << "metrics are on 39 phones";
  }
}

// crf.duration_init = data: the checkpoint after one epoch at a negligible lr
// holds log p(d | label) of the train split's gold segments, counted here with
// the CRF library's gold segmentation (crf::gold_segments), add-one smoothed;
// crf.lr_scale is recorded in the run's config.
TEST_F(TrainE2E, DurationInitDataStartsFromTheTrainDurations) {
  const fs::path run_dir = dir_ / "run_duration_init";
  Cmd t = run("train --config " + config_ + " --set train.run_dir=" + run_dir.string() +
              " --set train.epochs=1 --set train.lr=1e-12 --set crf.init_scale=0 --set crf.duration_init=data"
              " --set crf.lr_scale=20");
  ASSERT_EQ(t.rc, 0) << t.output;
  EXPECT_NE(t.output.find("crf.duration_init = data: crf.duration_bias starts at log p(duration | label) of the "),
            std::string::npos)
      << t.output;
  const int K = 12, C = 39;
  std::vector<double> n(K * C, 0.0), per(C, 0.0);
  const data::Split train = data::load_split((dir_ / "work").string(), "train");
  ASSERT_FALSE(train.utterances.empty());
  for (const data::Utterance& u : train.utterances) {
    std::vector<int32_t> y;
    for (int32_t l : u.labels) y.push_back(data::PhoneSet::timit().map(l, 39));
    for (const crf::Segment& s : crf::gold_segments(y.data(), static_cast<int32_t>(y.size()), K)) {
      n[(s.duration - 1) * C + s.label] += 1;
      per[s.label] += 1;
    }
  }
  const st::File ck = st::load((run_dir / "checkpoints" / "epoch-1.safetensors").string());
  const std::vector<float> db = ck.get("crf.duration_bias").to<float>();
  ASSERT_EQ(db.size(), size_t(K * C));
  for (int d = 0; d < K; ++d)
    for (int c = 0; c < C; ++c)
      EXPECT_NEAR(db[d * C + c], std::log((n[d * C + c] + 1) / (per[c] + K)), 1e-6) << "d " << d + 1 << " c " << c;
  EXPECT_NE(slurp(run_dir / "config.yaml").find("lr_scale: 20"), std::string::npos);
}

// A fresh run never mixes with an existing one: it refuses, writes nothing, and
// --resume still works; a bad backend or label set leaves no run directory.
TEST_F(TrainE2E, FreshRunRefusesExistingRunDir) {
  const fs::path run_d = dir_ / "run_d";
  fs::remove_all(run_d);
  Cmd t = run("train --config " + config_ + " --set train.run_dir=" + run_d.string() + " --set train.epochs=1");
  ASSERT_EQ(t.rc, 0) << t.output;
  const std::string before = slurp(run_d / "metrics.jsonl");
  const auto mtime = fs::last_write_time(run_d / "checkpoints" / "epoch-1.safetensors");
  Cmd again = run("train --config " + config_ + " --set train.run_dir=" + run_d.string() + " --set train.epochs=1");
  EXPECT_NE(again.rc, 0);
  EXPECT_NE(again.output.find("error: " + run_d.string() + " already holds a training run"), std::string::npos)
      << again.output;
  EXPECT_NE(again.output.find("--resume " + run_d.string()), std::string::npos) << again.output;
  EXPECT_EQ(slurp(run_d / "metrics.jsonl"), before);
  EXPECT_EQ(fs::last_write_time(run_d / "checkpoints" / "epoch-1.safetensors"), mtime);
  // checkpoints alone (metrics.jsonl lost) are refused as well
  fs::remove(run_d / "metrics.jsonl");
  Cmd again2 = run("train --config " + config_ + " --set train.run_dir=" + run_d.string());
  EXPECT_NE(again2.rc, 0);
  EXPECT_NE(again2.output.find("epoch-1.safetensors"), std::string::npos) << again2.output;
  // the library entry point refuses too (tests and tools call it directly)
  EXPECT_THROW(train::check_fresh_run_dir(run_d.string()), std::runtime_error);
  EXPECT_NO_THROW(train::check_fresh_run_dir((dir_ / "no_such_run").string()));

  // --resume continues the run (raising train.epochs)
  std::ofstream(run_d / "metrics.jsonl") << before;
  Cmd r = run("train --resume " + run_d.string() + " --set train.epochs=2");
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(metrics_lines(run_d).size(), 2u);

  // a configuration error leaves nothing behind
  const fs::path run_e = dir_ / "run_e";
  fs::remove_all(run_e);
  Cmd bad = run("train --config " + config_ + " --set train.run_dir=" + run_e.string() + " --crf-backend cuda");
  if (bad.rc != 0) EXPECT_FALSE(fs::exists(run_e)) << bad.output;  // (a CUDA build with a GPU may train)
}

// Flag checks that come before any work: --json's folder, --threads, CLI ranges;
// an injection step outside the run is a warning.
TEST_F(TrainE2E, EarlyChecksAndWarnings) {
  Cmd e = run("evaluate --checkpoint " + (dir_ / "missing.safetensors").string() + " --json " +
              (dir_ / "no_such_folder" / "m.json").string());
  EXPECT_NE(e.rc, 0);
  EXPECT_NE(e.output.find("error: --json " + (dir_ / "no_such_folder" / "m.json").string() + ": folder " +
                          (dir_ / "no_such_folder").string() + " does not exist"),
            std::string::npos)
      << e.output;
  for (const std::string& args : {std::string("evaluate --checkpoint x --threads -1"),
                                  std::string("decode --checkpoint x in --out o --threads -2"),
                                  std::string("train --crf-reg -1"), std::string("train --fixed-length -3")}) {
    Cmd c = run(args);
    EXPECT_NE(c.rc, 0) << args;
    EXPECT_NE(c.output.find("not in range"), std::string::npos) << args << ": " << c.output;
    EXPECT_LT(c.output.size(), 200u) << args << ": " << c.output;  // no 300-digit bound
  }
  const fs::path run_f = dir_ / "run_f";
  fs::remove_all(run_f);
  Cmd t = run("train --config " + config_ + " --set train.run_dir=" + run_f.string() +
              " --set train.epochs=1 --set debug.inject_nonfinite=3:1");
  ASSERT_EQ(t.rc, 0) << t.output;
  EXPECT_NE(t.output.find("debug.inject_nonfinite = 3:1: no such step in this run"), std::string::npos) << t.output;
}

// Without a GPU, train.device=cuda (and --device cuda on evaluate) fails with
// one line naming the problem and writes nothing.
TEST_F(TrainE2E, DeviceCudaWithoutGpuIsOneLineAndWritesNothing) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "a CUDA device is present: train.device=cuda trains";
  const fs::path run_g = dir_ / "run_g";
  fs::remove_all(run_g);
  for (const std::string& how : {std::string("--device cuda"), std::string("--set train.device=cuda")}) {
    Cmd c = run("train --config " + config_ + " --set train.run_dir=" + run_g.string() + " " + how);
    EXPECT_EQ(c.rc, 1) << c.output;
    EXPECT_EQ(c.output.rfind("error: no CUDA device was found (", 0), 0u) << c.output;
    EXPECT_EQ(std::count(c.output.begin(), c.output.end(), '\n'), 1) << c.output;
    EXPECT_FALSE(fs::exists(run_g)) << how;
  }
  // auto falls back to the CPU and says so.
  Cmd a = run("train --config " + config_ + " --set train.run_dir=" + run_g.string() +
              " --device auto --set train.epochs=1");
  ASSERT_EQ(a.rc, 0) << a.output;
  EXPECT_NE(a.output.find("train.device = auto: cpu (no CUDA device was found"), std::string::npos) << a.output;
}

// Issue 9: --inject-fault with --check-numerics stops with ONE error line naming
// epoch, batch, step, layer, pass, tensor and counts; the dump folder holds the
// four files; replay-step reproduces the hit (same layer, pass, tensor and the
// same statistics) with the run's backend, the reference backend and a fixed
// length; without the fault the step replays clean, with exactly the loss the
// uninterrupted run computed for that step (same rng, state, lr).
TEST_F(TrainE2E, CheckNumericsDumpAndReplayStep) {
  const fs::path run_n = dir_ / "run_n";
  fs::remove_all(run_n);
  const std::string common = " --set model.num_layers=2 --set train.epochs=1";
  Cmd t = run("train --config " + config_ + " --set train.run_dir=" + run_n.string() + common +
              " --inject-fault layer=lstm.1.bwd,pass=backward,step=2,value=inf --check-numerics");
  EXPECT_EQ(t.rc, 1) << t.output;
  size_t errors = 0;
  std::string line;
  {
    std::istringstream in(t.output);
    for (std::string l; std::getline(in, l);)
      if (l.rfind("error: ", 0) == 0) ++errors, line = l;
  }
  ASSERT_EQ(errors, 1u) << t.output;
  const std::string tensor = "d_encoder.lstm.weight_ih_l1_reverse";
  for (const std::string& part :
       {std::string("training stopped at epoch 1, batch 2/"), std::string(", step 2: "),
        std::string("layer lstm.1.bwd, backward pass, tensor " + tensor + ": 0 NaN, 1 Inf, finite min "),
        std::string("utterances: train/"), std::string("nonfinite-step-2"), std::string("timitseg replay-step ")})
    EXPECT_NE(line.find(part), std::string::npos) << part << "\n" << line;
  const fs::path dump = run_n / "nonfinite-step-2";
  for (const char* f : {"batch.safetensors", "state.safetensors", "config.yaml", "report.json"})
    EXPECT_TRUE(fs::exists(dump / f)) << f;
  EXPECT_FALSE(fs::exists(run_n / "nonfinite-step-2.tmp"));
  const nlohmann::json rep = nlohmann::json::parse(slurp(dump / "report.json"));
  EXPECT_EQ(rep["layer"], "lstm.1.bwd");
  EXPECT_EQ(rep["pass"], "backward");
  EXPECT_EQ(rep["tensor"], tensor);
  EXPECT_EQ(rep["inf"], 1);
  EXPECT_EQ(rep["nan"], 0);
  EXPECT_EQ(rep["epoch"], 1);
  EXPECT_EQ(rep["batch"], 2);
  EXPECT_EQ(rep["step"], 2);
  EXPECT_EQ(rep["utterance_ids"].size(), 4u);
  const st::File bf = st::load((dump / "batch.safetensors").string());
  const auto& feats = bf.get("features", st::DType::F32, {4, -1, -1});
  bf.get("labels", st::DType::I32, {4, feats.shape[1]});
  bf.get("lengths", st::DType::I32, {4});
  EXPECT_EQ(bf.metadata.at("step"), "2");
  EXPECT_EQ(bf.metadata.at("fault"), "layer=lstm.1.bwd,pass=backward,step=2,value=inf");
  // the state before the step: one update done
  const st::File sf = st::load((dump / "state.safetensors").string());
  EXPECT_EQ(sf.metadata.at("optimizer_step"), "1");
  // "tensor T: 0 NaN, 1 Inf, finite values in [...]": the same hit, to the digit
  const std::string stats = rep["message"].get<std::string>();
  for (const std::string& extra : {std::string(""), std::string(" --crf-backend reference"),
                                   std::string(" --fixed-length 40"), std::string(" --threads 1")}) {
    Cmd r = run("replay-step " + dump.string() + extra);
    EXPECT_EQ(r.rc, 1) << extra << ": " << r.output;
    EXPECT_NE(r.output.find("error: replay of " + dump.string() + ": non-finite value: layer lstm.1.bwd, backward "
                            "pass, tensor " + tensor + ": 0 NaN, 1 Inf"),
              std::string::npos)
        << extra << ": " << r.output;
    if (extra != " --fixed-length 40")  // the same batch: the same finite range, to the digit
      EXPECT_NE(r.output.find(stats), std::string::npos) << extra << ": " << r.output;
  }
  // without the fault the step is clean and its loss is the uninterrupted run's
  Cmd clean = run("replay-step " + dump.string() + " --without-fault");
  ASSERT_EQ(clean.rc, 0) << clean.output;
  double replay_loss = 0;
  {
    const size_t p = clean.output.find("step 2: loss ");
    ASSERT_NE(p, std::string::npos) << clean.output;
    replay_loss = std::stod(clean.output.substr(p + 13));
    EXPECT_NE(clean.output.find("no non-finite value"), std::string::npos) << clean.output;
  }
  const fs::path run_m = dir_ / "run_m";
  fs::remove_all(run_m);
  Cmd full = run("--log-level debug train --config " + config_ + " --set train.run_dir=" + run_m.string() + common +
                 " --set train.log_every=1");
  ASSERT_EQ(full.rc, 0) << full.output;
  const size_t p = full.output.find("epoch 1 batch 2/");
  ASSERT_NE(p, std::string::npos) << full.output;
  const size_t q = full.output.find("loss ", p);
  const double run_loss = std::stod(full.output.substr(q + 5));
  EXPECT_NEAR(replay_loss, run_loss, 1e-5 * std::abs(run_loss)) << "logged with 5 decimals";
  // a dump folder that is not one: one line naming the file
  fs::remove(dump / "state.safetensors");
  Cmd bad = run("replay-step " + dump.string());
  EXPECT_EQ(bad.rc, 1);
  EXPECT_NE(bad.output.find("state.safetensors: missing"), std::string::npos) << bad.output;
  // --inject-fault is validated before anything runs
  Cmd wrong = run("train --config " + config_ + " --set train.run_dir=" + (dir_ / "run_w").string() +
                  " --inject-fault layer=lstm.3.fwd,pass=forward,step=1,value=nan");
  EXPECT_EQ(wrong.rc, 1);
  EXPECT_NE(wrong.output.find("unknown layer 'lstm.3.fwd'"), std::string::npos) << wrong.output;
  EXPECT_FALSE(fs::exists(dir_ / "run_w"));
}

// On the CPU, results never depend on the thread count: a run with 1 thread and
// one with 3 threads and --deterministic give bitwise identical checkpoint
// tensors. metrics.jsonl carries the drift numbers (max |transition|, max
// |duration_bias|, gradient norm mean and max, the warning flag).
TEST_F(TrainE2E, CpuRunsAreBitwiseDeterministicAcrossThreadCounts) {
  const fs::path r1 = dir_ / "run_t1", r3 = dir_ / "run_t3";
  fs::remove_all(r1);
  fs::remove_all(r3);
  Cmd a = run("train --config " + config_ + " --set train.run_dir=" + r1.string() +
              " --set train.epochs=1 --set train.threads=1");
  ASSERT_EQ(a.rc, 0) << a.output;
  Cmd b = run("train --config " + config_ + " --set train.run_dir=" + r3.string() +
              " --set train.epochs=1 --set train.threads=3 --deterministic --set debug.drift_threshold=0.001");
  ASSERT_EQ(b.rc, 0) << b.output;
  const st::File fa = st::load((r1 / "checkpoints" / "epoch-1.safetensors").string());
  const st::File fb = st::load((r3 / "checkpoints" / "epoch-1.safetensors").string());
  ASSERT_EQ(fa.tensors.size(), fb.tensors.size());
  for (const auto& [name, t] : fa.tensors) {
    ASSERT_TRUE(fb.has(name)) << name;
    EXPECT_EQ(t.bytes, fb.get(name).bytes) << name << " differs between 1 and 3 threads";
  }
  const auto la = metrics_lines(r1), lb = metrics_lines(r3);
  ASSERT_EQ(la.size(), 1u);
  ASSERT_EQ(lb.size(), 1u);
  EXPECT_EQ(la[0]["train_loss"], lb[0]["train_loss"]);
  EXPECT_EQ(la[0]["grad_norm_max"], lb[0]["grad_norm_max"]);
  EXPECT_GE(la[0]["grad_norm_max"].get<double>(), la[0]["grad_norm_mean"].get<double>());
  EXPECT_GT(la[0]["grad_norm_mean"].get<double>(), 0.0);
  EXPECT_EQ(la[0]["drift_warning"], false);
  EXPECT_EQ(lb[0]["drift_warning"], true);  // threshold 0.001
  // the warning line carries the same numbers as metrics.jsonl
  std::ostringstream mt;
  mt.precision(3);
  mt << std::fixed << lb[0]["max_abs_transition"].get<double>();
  EXPECT_NE(b.output.find("CRF parameters drifting high: max|transition| = " + mt.str()), std::string::npos)
      << b.output;
  EXPECT_NE(b.output.find("gradient norm mean"), std::string::npos) << b.output;
}

// A hit in the optimizer layer is found after the update: the error says so,
// and replay-step refuses with one line instead of re-running an updated state.
TEST_F(TrainE2E, OptimizerHitIsReportedAfterTheUpdate) {
  const fs::path run_o = dir_ / "run_o";
  fs::remove_all(run_o);
  Cmd t = run("train --config " + config_ + " --set train.run_dir=" + run_o.string() +
              " --set train.epochs=1 --inject-fault layer=optimizer,pass=backward,step=1,value=nan");
  EXPECT_EQ(t.rc, 1) << t.output;
  EXPECT_NE(t.output.find("step 1: non-finite value in layer optimizer, backward pass, tensor params: 1 NaN, 0 Inf"),
            std::string::npos)
      << t.output;
  EXPECT_NE(t.output.find("(after the update)"), std::string::npos) << t.output;
  const fs::path dump = run_o / "nonfinite-step-1";
  EXPECT_EQ(st::load((dump / "state.safetensors").string()).metadata.at("optimizer_step"), "1");
  Cmd r = run("replay-step " + dump.string());
  EXPECT_EQ(r.rc, 1) << r.output;
  EXPECT_NE(r.output.find("holds the state AFTER step 1"), std::string::npos) << r.output;
}

// train.log is flushed line by line (`tail -f` sees each line as it is logged,
// and a killed run keeps every line it logged): a run SIGKILLed before its
// second step (debug.inject_exit; one batch an epoch) has epoch 1's line, whole.
TEST_F(TrainE2E, TrainLogHoldsEveryLineOfAKilledRun) {
  const fs::path run_k = dir_ / "run_k";
  fs::remove_all(run_k);
  Cmd t = run("train --config " + config_ + " --set train.run_dir=" + run_k.string() +
              " --set train.batch_size=1000 --set debug.inject_exit=0:2:kill");
  EXPECT_TRUE(t.rc == 128 + 9 || t.rc == -1) << t.rc << "\n" << t.output;  // SIGKILLed (the shell's 137), not an exit
  ASSERT_EQ(metrics_lines(run_k).size(), 1u) << t.output;  // epoch 1 finished, epoch 2 never stepped
  const std::string log = slurp(run_k / "train.log");
  EXPECT_NE(log.find("] [info] epoch 1: train loss "), std::string::npos) << log;
  ASSERT_FALSE(log.empty());
  EXPECT_EQ(log.back(), '\n') << log;  // no half line
  EXPECT_NE(t.output.find("epoch 1: train loss "), std::string::npos) << t.output;  // the console's line too
}
