// The run folder and the commands around it, with the built binary on a tiny
// synth corpus: `compare` (both run folders, the JSON table, a second call
// reuses, an unfinished run resumes bitwise), train.log / run.json /
// metrics.jsonl (dev_loss against Executor::gradients, grad_norm,
// wall_clock), train.keep_checkpoints with --resume, `export` (tensors bit
// for bit, the docs/export.md snippet in torch) and "n/a" for an empty dev split.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/safetensors.h"
#include "common/sha256.h"
#include "data/dataset.h"
#include "model/batch.h"
#include "model/checkpoint.h"
#include "model/executor.h"

#include "model/make_executor.h"
#include "tests/support/cli.h"

namespace fs = std::filesystem;
using namespace timitseg;

namespace {

using testsupport::Cmd;
using testsupport::sh;
using testsupport::slurp;
using testsupport::run;

using testsupport::metrics_lines;

std::set<std::string> files_in(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

void expect_same_tensors(const fs::path& a, const fs::path& b) {
  const st::File fa = st::load(a.string()), fb = st::load(b.string());
  ASSERT_EQ(fa.tensors.size(), fb.tensors.size()) << a << " vs " << b;
  for (const auto& [name, t] : fa.tensors) {
    ASSERT_TRUE(fb.has(name)) << name;
    EXPECT_EQ(t.bytes, fb.get(name).bytes) << name << " differs: " << a << " vs " << b;
  }
}

class RunFolder : public ::testing::Test {
 protected:
  static fs::path dir_;
  static void SetUpTestSuite() {
    dir_ = testsupport::fresh_temp_dir("timitseg_run_folder");
    const Cmd c = testsupport::make_prepared_corpus(TIMITSEG_BINARY, dir_, 6, 4, 5);
    ASSERT_EQ(c.rc, 0) << c.output;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  // A tiny config (2 epochs unless overridden) with its run_dir.
  static std::string config(const std::string& name, const fs::path& workdir, const fs::path& run_dir,
                            int epochs = 2) {
    const std::string path = (dir_ / (name + ".yaml")).string();
    std::ofstream(path) << "data:\n  workdir: " << workdir.string()
                        << "\nmodel:\n  hidden_dim: 16\n  num_layers: 1\n  dropout: 0.1\n"
                           "crf:\n  max_duration: 12\n  reg: 0.001\n"
                           "train:\n  epochs: "
                        << epochs << "\n  batch_size: 4\n  lr: 0.01\n  seed: 3\n  threads: 2\n  run_dir: "
                        << run_dir.string() << "\n";
    return path;
  }
};
fs::path RunFolder::dir_;

const char* kCompareKeys[] = {"per",          "boundary_f1_tol0", "boundary_f1_tol1", "boundary_f1_tol2",
                              "segment_f1",   "duration_mae",     "duration_kl",      "frame_accuracy",
                              "decode_seconds"};

}  // namespace

TEST_F(RunFolder, CompareTrainsBothRunsReusesThemAndResumesAnUnfinishedOne) {
  const fs::path runs = dir_ / "cmp", json = dir_ / "cmp.json";
  const std::string cfg = config("cmp", dir_ / "work", runs);
  Cmd c = run("compare --config " + cfg + " --json " + json.string());
  ASSERT_EQ(c.rc, 0) << c.output;
  EXPECT_NE(c.output.find("1 seed"), std::string::npos) << c.output;
  for (const char* row : {"PER", "boundary F1 tol 0", "segment F1", "duration MAE", "duration KL", "frame accuracy",
                          "train frames/s", "decode time"})
    EXPECT_NE(c.output.find(row), std::string::npos) << row << "\n" << c.output;
  EXPECT_EQ(c.output.find("nan"), std::string::npos) << c.output;
  // both run folders, same seed and schedule, K = 1 and K = 12
  for (const auto& [name, K] : {std::pair<std::string, int>{"linear", 1}, {"semicrf", 12}}) {
    const fs::path rd = runs / name;
    ASSERT_EQ(metrics_lines(rd).size(), 2u) << name;
    for (const char* f : {"config.yaml", "run.json", "train.log", "checkpoints/best.safetensors",
                          "checkpoints/epoch-2.safetensors"})
      EXPECT_TRUE(fs::exists(rd / f)) << rd / f;
    const model::ModelState s = model::load_checkpoint((rd / "checkpoints" / "epoch-2.safetensors").string());
    EXPECT_EQ(s.config.crf_max_duration, K);
    EXPECT_EQ(s.config.train_seed, 3u);
    EXPECT_EQ(s.config.model_hidden_dim, 16);
    EXPECT_EQ(s.config.train_epochs, 2);
  }
  const auto j = nlohmann::json::parse(slurp(json));
  for (const char* name : {"linear", "semicrf"}) {
    const auto& r = j.at("runs").at(name);
    ASSERT_TRUE(r.contains("train_frames_per_sec")) << name;
    EXPECT_GT(r["train_frames_per_sec"]["mean"].get<double>(), 0);
    for (const char* split : {"dev", "core-test"})
      for (const char* key : kCompareKeys) {
        ASSERT_TRUE(r.contains(split) && r[split].contains(key)) << name << " " << split << " " << key;
        const double v = r[split][key]["mean"].get<double>();
        EXPECT_TRUE(std::isfinite(v) && v >= 0) << name << " " << split << " " << key << " = " << v;
        EXPECT_EQ(r[split][key]["n"], 1);
        EXPECT_FALSE(r[split][key].contains("std")) << "one seed has no spread";
      }
  }
  // evaluation of the best checkpoint: the dev PER of its epoch in metrics.jsonl
  for (const char* name : {"linear", "semicrf"}) {
    double best = 1e300;
    for (const auto& l : metrics_lines(runs / name)) best = std::min(best, l["dev_per"].get<double>());
    EXPECT_DOUBLE_EQ(j["runs"][name]["dev"]["per"]["mean"].get<double>(), best) << name;
  }

  // a second call reuses both runs: no training, same numbers
  const auto mtime = fs::last_write_time(runs / "semicrf" / "checkpoints" / "epoch-2.safetensors");
  const fs::path json2 = dir_ / "cmp2.json";
  Cmd again = run("compare --config " + cfg + " --json " + json2.string());
  ASSERT_EQ(again.rc, 0) << again.output;
  EXPECT_NE(again.output.find((runs / "linear").string() + " is finished (epoch 2/2): reused"), std::string::npos)
      << again.output;
  EXPECT_NE(again.output.find((runs / "semicrf").string() + " is finished (epoch 2/2): reused"), std::string::npos)
      << again.output;
  EXPECT_EQ(again.output.find("epoch 1:"), std::string::npos) << "trained again:\n" << again.output;
  EXPECT_EQ(fs::last_write_time(runs / "semicrf" / "checkpoints" / "epoch-2.safetensors"), mtime);
  const auto j2 = nlohmann::json::parse(slurp(json2));
  EXPECT_EQ(j2["runs"]["semicrf"]["core-test"]["per"], j["runs"]["semicrf"]["core-test"]["per"]);

  // an unfinished run (stopped after epoch 1) is resumed, bitwise as the uninterrupted one
  const fs::path keep = dir_ / "linear-epoch2.safetensors";
  fs::copy_file(runs / "linear" / "checkpoints" / "epoch-2.safetensors", keep);
  fs::remove(runs / "linear" / "checkpoints" / "epoch-2.safetensors");
  {
    std::istringstream in(slurp(runs / "linear" / "metrics.jsonl"));
    std::string first;
    std::getline(in, first);
    std::ofstream(runs / "linear" / "metrics.jsonl") << first << "\n";
  }
  Cmd resumed = run("compare --config " + cfg);
  ASSERT_EQ(resumed.rc, 0) << resumed.output;
  EXPECT_NE(resumed.output.find((runs / "linear").string() + " stopped after epoch 1/2: resuming"), std::string::npos)
      << resumed.output;
  EXPECT_NE(resumed.output.find((runs / "semicrf").string() + " is finished (epoch 2/2): reused"), std::string::npos);
  expect_same_tensors(keep, runs / "linear" / "checkpoints" / "epoch-2.safetensors");
  // train.log holds both calls (appended); run.json one resume
  const std::string log = slurp(runs / "linear" / "train.log");
  EXPECT_NE(log.find("training " + (runs / "linear").string()), std::string::npos) << log;
  EXPECT_NE(log.find("resuming " + (runs / "linear").string()), std::string::npos) << log;
  const auto rj = nlohmann::json::parse(slurp(runs / "linear" / "run.json"));
  ASSERT_TRUE(rj.contains("resumes"));
  EXPECT_EQ(rj["resumes"].size(), 1u);

  // a config that differs from the run's is refused, naming the key
  Cmd other = run("compare --config " + cfg + " --set train.lr=0.02");
  EXPECT_EQ(other.rc, 1) << other.output;
  EXPECT_NE(other.output.find("train.lr"), std::string::npos) << other.output;
}

TEST_F(RunFolder, CompareSeedsShowMeanAndStd) {
  const fs::path runs = dir_ / "seeds", json = dir_ / "seeds.json";
  const std::string cfg = config("seeds", dir_ / "work", runs, 1);
  Cmd c = run("compare --config " + cfg + " --seeds 3,4 --json " + json.string());
  ASSERT_EQ(c.rc, 0) << c.output;
  EXPECT_NE(c.output.find("2 seeds, mean ± std"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find(" ± "), std::string::npos) << c.output;
  for (const char* seed : {"seed-3", "seed-4"})
    for (const char* name : {"linear", "semicrf"})
      EXPECT_TRUE(fs::exists(runs / seed / name / "checkpoints" / "epoch-1.safetensors")) << seed << " " << name;
  const auto j = nlohmann::json::parse(slurp(json));
  EXPECT_EQ(j["seeds"], nlohmann::json({3, 4}));
  const auto& per = j["runs"]["semicrf"]["dev"]["per"];
  ASSERT_EQ(per["values"].size(), 2u);
  const double a = per["values"][0], b = per["values"][1];
  EXPECT_DOUBLE_EQ(per["mean"].get<double>(), (a + b) / 2);
  EXPECT_NEAR(per["std"].get<double>(), std::abs(a - b) / std::sqrt(2.0), 1e-12);  // sample std of two values
  Cmd bad = run("compare --config " + cfg + " --seeds 1,x");
  EXPECT_EQ(bad.rc, 1) << bad.output;
  EXPECT_NE(bad.output.find("'x' is not a non-negative integer"), std::string::npos) << bad.output;
}

// train.log, run.json, metrics.jsonl keys; keep_checkpoints with --resume (bitwise).
TEST_F(RunFolder, RunFolderFilesAndKeepCheckpointsWithResume) {
  const fs::path a = dir_ / "keep_a", b = dir_ / "keep_b";
  const std::string cfg = config("keep", dir_ / "work", a, 4);
  Cmd t = run("train --config " + cfg + " --set train.keep_checkpoints=1");
  ASSERT_EQ(t.rc, 0) << t.output;
  EXPECT_EQ(files_in(a / "checkpoints"),
            (std::set<std::string>{"best.safetensors", "epoch-3.safetensors", "epoch-4.safetensors"}));
  // best: the model only; the last epoch: the full state for --resume
  const st::File best = st::load((a / "checkpoints" / "best.safetensors").string());
  const st::File last = st::load((a / "checkpoints" / "epoch-4.safetensors").string());
  for (const auto& [name, _] : best.tensors) EXPECT_EQ(name.rfind("optimizer.", 0), std::string::npos) << name;
  EXPECT_TRUE(last.has("optimizer.exp_avg.crf.transition"));
  EXPECT_GT(last.tensors.size(), best.tensors.size());

  // metrics.jsonl: dev_loss, grad_norm mean/max, wall_clock (ISO 8601, start <= end)
  const auto lines = metrics_lines(a);
  ASSERT_EQ(lines.size(), 4u);
  const std::regex iso(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)");
  std::string prev_end;
  for (const auto& l : lines) {
    const double dl = l.at("dev_loss").get<double>();
    EXPECT_TRUE(std::isfinite(dl) && dl > 0) << l.dump();
    EXPECT_LE(l.at("grad_norm_mean").get<double>(), l.at("grad_norm_max").get<double>());
    EXPECT_GT(l.at("grad_norm_mean").get<double>(), 0);
    const std::string s = l.at("wall_clock").at("start"), e = l.at("wall_clock").at("end");
    EXPECT_TRUE(std::regex_match(s, iso)) << s;
    EXPECT_TRUE(std::regex_match(e, iso)) << e;
    EXPECT_LE(s, e);
    EXPECT_LE(prev_end, s);
    prev_end = e;
  }
  // run.json: version, commit, build, machine, device, backend, start time
  const auto rj = nlohmann::json::parse(slurp(a / "run.json"));
  for (const char* k : {"timitseg_version", "git_commit", "build_type", "machine", "device", "crf_backend",
                        "start_time", "executor"})
    EXPECT_TRUE(rj.contains(k)) << k;
  for (const char* k : {"cpu", "cores", "threads", "gpu"}) EXPECT_TRUE(rj["machine"].contains(k)) << k;
  EXPECT_EQ(rj["machine"]["threads"], 2);
  EXPECT_EQ(rj["device"], "cpu");
  EXPECT_EQ(rj["crf_backend"], "cpu");
  EXPECT_FALSE(rj.contains("resumes"));
  // train.log: the console log, though the output went to a pipe
  const std::string log = slurp(a / "train.log");
  for (int e = 1; e <= 4; ++e)
    EXPECT_NE(log.find("epoch " + std::to_string(e) + ": train loss"), std::string::npos) << log;

  // B: the same run stopped after epoch 3, resumed with keep_checkpoints=0
  fs::remove_all(b);
  fs::create_directories(b / "checkpoints");
  fs::copy_file(a / "checkpoints" / "epoch-3.safetensors", b / "checkpoints" / "epoch-3.safetensors");
  {
    std::istringstream in(slurp(a / "metrics.jsonl"));
    std::ofstream out(b / "metrics.jsonl");
    std::string line;
    for (int i = 0; i < 3 && std::getline(in, line); ++i) out << line << "\n";
  }
  Cmd r = run("train --resume " + b.string() + " --set train.keep_checkpoints=0");
  ASSERT_EQ(r.rc, 0) << r.output;
  expect_same_tensors(a / "checkpoints" / "epoch-4.safetensors", b / "checkpoints" / "epoch-4.safetensors");
  std::set<std::string> got = files_in(b / "checkpoints");
  got.erase("best.safetensors");  // written when epoch 4 beats epochs 1-3
  EXPECT_EQ(got, (std::set<std::string>{"epoch-4.safetensors"}));
  const auto lb = metrics_lines(b);
  ASSERT_EQ(lb.size(), 4u);
  EXPECT_EQ(lb[3]["train_loss"], lines[3]["train_loss"]);
  EXPECT_EQ(lb[3]["dev_loss"], lines[3]["dev_loss"]);
  EXPECT_EQ(lb[3]["grad_norm_max"], lines[3]["grad_norm_max"]);
}

// dev_loss of metrics.jsonl against an independent path: Executor::gradients
// (the CRF's backward, no dropout, no penalty) on the dev split as one batch.
TEST_F(RunFolder, DevLossEqualsTheLossOfAGradientPass) {
  const fs::path a = dir_ / "devloss";
  Cmd t = run("train --config " + config("devloss", dir_ / "work", a, 1));
  ASSERT_EQ(t.rc, 0) << t.output;
  const auto lines = metrics_lines(a);
  ASSERT_EQ(lines.size(), 1u);
  const model::ModelState s = model::load_checkpoint((a / "checkpoints" / "epoch-1.safetensors").string());
  const data::Split dev = data::load_split((dir_ / "work").string(), "dev");
  ASSERT_FALSE(dev.utterances.empty());
  ASSERT_LE(dev.utterances.size(), 4u) << "one batch of train.batch_size";
  std::vector<const data::Utterance*> utts;
  for (const auto& u : dev.utterances) utts.push_back(&u);
  const model::Batch batch = model::make_batch(utts, s.has_cmvn ? &s.cmvn : nullptr, s.labels, 0);
  model::ExecutorOptions xo;
  xo.threads = 2;
  xo.crf_backend = crf::BackendKind::reference;  // float64 oracle backend
  auto exec = model::make_executor(model::Device::cpu, s.dims, xo);
  exec->set_state(s.params, s.optimizer);
  model::StepOptions so;  // dropout 0, crf_reg 0, per-utterance normalization
  std::vector<float> grad;
  const model::StepResult g = exec->gradients(batch, so, grad);
  EXPECT_NEAR(lines[0]["dev_loss"].get<double>(), g.loss, 1e-6 * std::abs(g.loss));
  // and Executor::decode's nll per utterance sums to the same
  std::vector<double> nll;
  exec->decode(batch, nullptr, &nll);
  ASSERT_EQ(nll.size(), utts.size());
  double sum = 0;
  for (double x : nll) sum += x;
  EXPECT_NEAR(sum, g.nll_sum, 1e-9 * std::abs(g.nll_sum));
}

TEST_F(RunFolder, ExportWritesTheModelTensorsBitForBit) {
  const fs::path a = dir_ / "export_run", out = dir_ / "model.safetensors";
  Cmd t = run("train --config " + config("export", dir_ / "work", a, 1));
  ASSERT_EQ(t.rc, 0) << t.output;
  const fs::path ckpt = a / "checkpoints" / "epoch-1.safetensors";
  Cmd e = run("export " + ckpt.string() + " --out " + out.string());
  ASSERT_EQ(e.rc, 0) << e.output;
  const st::File c = st::load(ckpt.string()), x = st::load(out.string());
  size_t model_tensors = 0;
  for (const auto& [name, tensor] : c.tensors) {
    if (name.rfind("optimizer.", 0) == 0) {
      EXPECT_FALSE(x.has(name)) << name;
      continue;
    }
    ++model_tensors;
    ASSERT_TRUE(x.has(name)) << name;
    EXPECT_EQ(x.get(name).dtype, tensor.dtype) << name;
    EXPECT_EQ(x.get(name).shape, tensor.shape) << name;
    EXPECT_EQ(x.get(name).bytes, tensor.bytes) << name;
  }
  EXPECT_EQ(x.tensors.size(), model_tensors);
  EXPECT_TRUE(x.has("cmvn.mean"));
  for (const char* m : {"dims", "label_names", "label_set", "feature_options"})
    EXPECT_EQ(x.metadata.at(m), c.metadata.at(m)) << m;
  EXPECT_EQ(x.metadata.at("format"), "timitseg-model-1");
  // an unreadable checkpoint leaves nothing behind
  const fs::path none = dir_ / "none.safetensors";
  Cmd bad = run("export " + (dir_ / "missing.safetensors").string() + " --out " + none.string());
  EXPECT_EQ(bad.rc, 1) << bad.output;
  EXPECT_FALSE(fs::exists(none));
}

// The Python block of docs/export.md, run as written: it loads the exported
// model into torch.nn and reproduces evaluate --dump-scores' scores.
TEST_F(RunFolder, ExportedModelLoadsIntoTorch) {
  // The first interpreter that has torch and numpy: TIMITSEG_PYTHON, CMake's
  // Python3 (a pyenv shim, say), /usr/bin/python3, python3 on PATH.
  const char* env = std::getenv("TIMITSEG_PYTHON");
  std::vector<std::string> candidates;
  if (env && *env) candidates.push_back(env);
  for (const std::string c : {std::string(TIMITSEG_CMAKE_PYTHON), std::string("/usr/bin/python3"), std::string("python3")})
    if (!c.empty() && std::find(candidates.begin(), candidates.end(), c) == candidates.end()) candidates.push_back(c);
  std::string python, tried;
  for (const std::string& c : candidates) {
    if (sh("'" + c + "' -c 'import torch, numpy'").rc == 0) {
      python = "'" + c + "'";
      break;
    }
    tried += (tried.empty() ? "" : ", ") + c;
  }
  if (python.empty())
    GTEST_SKIP() << "no Python that can import torch and numpy (tried " << tried
                 << "); set TIMITSEG_PYTHON=/path/to/python3, or configure with -DPython3_EXECUTABLE=/path/to/python3";
  const std::string doc = slurp(fs::path(TIMITSEG_SOURCE_DIR) / "docs" / "export.md");
  const size_t b = doc.find("```python\n"), e = doc.find("\n```", b + 10);
  ASSERT_NE(b, std::string::npos) << "docs/export.md has no ```python block";
  ASSERT_NE(e, std::string::npos);
  const fs::path snippet = dir_ / "load_model.py";
  std::ofstream(snippet) << doc.substr(b + 10, e - b - 10 + 1);

  const fs::path a = dir_ / "torch_run", out = dir_ / "torch_model.safetensors", dump = dir_ / "torch_dump";
  Cmd t = run("train --config " + config("torch", dir_ / "work", a, 1));
  ASSERT_EQ(t.rc, 0) << t.output;
  const fs::path ckpt = a / "checkpoints" / "epoch-1.safetensors";
  ASSERT_EQ(run("export " + ckpt.string() + " --out " + out.string()).rc, 0);
  Cmd ev = run("evaluate --checkpoint " + ckpt.string() + " --split dev --dump-scores " + dump.string());
  ASSERT_EQ(ev.rc, 0) << ev.output;
  // the snippet runs as a script too
  Cmd direct = sh(python + " " + snippet.string() + " " + out.string());
  ASSERT_EQ(direct.rc, 0) << direct.output;
  EXPECT_NE(direct.output.find("39 classes"), std::string::npos) << direct.output;
  const fs::path check = dir_ / "check.py";
  std::ofstream(check) << "import sys, glob, runpy\n"
                          "ns = runpy.run_path(sys.argv[1])\n"
                          "import torch\n"
                          "model, tensors, meta = ns['load_model'](sys.argv[2])\n"
                          "files = sorted(glob.glob(sys.argv[3] + '/*.safetensors'))\n"
                          "assert files, 'no dumps'\n"
                          "worst = 0.0\n"
                          "for f in files:\n"
                          "    d, _ = ns['load_safetensors'](f)\n"
                          "    with torch.no_grad():\n"
                          "        s = model(d['features'][None])[0]\n"
                          "    assert s.shape == d['scores'].shape, (s.shape, d['scores'].shape)\n"
                          "    worst = max(worst, (s - d['scores']).abs().max().item())\n"
                          "print(f'{len(files)} utterances, max |torch - timitseg| = {worst:.3g}')\n"
                          "sys.exit(0 if worst <= 1e-4 else 1)\n";
  Cmd r = sh(python + " " + check.string() + " " + snippet.string() + " " + out.string() + " " + dump.string());
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("utterances, max |torch - timitseg|"), std::string::npos) << r.output;
}

// A workdir whose dev split is empty: train logs "dev PER n/a" (never nan),
// metrics.jsonl has no dev_* key, compare's JSON no dev metrics.
TEST_F(RunFolder, EmptyDevSplitIsNotApplicable) {
  const fs::path work = dir_ / "work_nodev";
  fs::remove_all(work);
  fs::copy(dir_ / "work", work, fs::copy_options::recursive);
  {
    // dev.safetensors: the train split's format with no utterance (core-test of a corpus
    // without core-test speakers is what prepare writes for an empty split)
    const fs::path synth2 = dir_ / "synth_nocore";
    fs::remove_all(synth2);
    fs::copy(dir_ / "synth", synth2, fs::copy_options::recursive);
    bool removed = false;
    for (const auto& e : fs::recursive_directory_iterator(synth2 / "TEST"))
      if (e.is_directory() && e.path().filename() == "FMLD0") {
        fs::remove_all(e.path());
        removed = true;
        break;
      }
    ASSERT_TRUE(removed) << "the synth corpus layout changed (core-test speaker FMLD0)";
    const fs::path w2 = dir_ / "work_nocore";
    fs::remove_all(w2);
    Cmd p = run("prepare --timit " + synth2.string() + " --out " + w2.string());
    ASSERT_EQ(p.rc, 0) << p.output;
    ASSERT_TRUE(data::load_split(w2.string(), "core-test").utterances.empty()) << p.output;
    fs::copy_file(w2 / "core-test.safetensors", work / "dev.safetensors", fs::copy_options::overwrite_existing);
    auto manifest = nlohmann::json::parse(slurp(work / "manifest.json"));
    uint64_t bytes = 0;
    const std::string sha = sha256_file((work / "dev.safetensors").string(), &bytes);
    manifest["files"]["dev.safetensors"] = {{"bytes", bytes}, {"sha256", sha}};
    std::ofstream(work / "manifest.json") << manifest.dump(2);
    ASSERT_TRUE(data::load_split(work.string(), "dev").utterances.empty());
  }
  const fs::path runs = dir_ / "nodev", json = dir_ / "nodev.json";
  const std::string cfg = config("nodev", work, runs);
  Cmd c = run("compare --config " + cfg + " --json " + json.string());
  ASSERT_EQ(c.rc, 0) << c.output;
  EXPECT_NE(c.output.find("dev PER n/a"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("dev loss n/a"), std::string::npos) << c.output;
  EXPECT_EQ(c.output.find("nan"), std::string::npos) << c.output;
  EXPECT_EQ(c.output.find("NaN"), std::string::npos) << c.output;
  for (const auto& l : metrics_lines(runs / "semicrf"))
    for (const char* k : {"dev_per", "dev_loss", "dev_frame_accuracy", "dev_boundary_f1_tol2"})
      EXPECT_FALSE(l.contains(k)) << k << " in " << l.dump();
  // no best checkpoint without a dev split: compare evaluates the last one
  EXPECT_FALSE(fs::exists(runs / "semicrf" / "checkpoints" / "best.safetensors"));
  // evaluate on the empty split: n/a, a JSON without metrics, exit 0
  const fs::path ej = dir_ / "nodev_eval.json";
  Cmd e = run("evaluate --checkpoint " + (runs / "semicrf" / "checkpoints" / "epoch-2.safetensors").string() +
              " --split dev --json " + ej.string());
  ASSERT_EQ(e.rc, 0) << e.output;
  EXPECT_NE(e.output.find("has no utterances: PER, boundaries, segments, durations and frame accuracy are n/a"),
            std::string::npos)
      << e.output;
  const auto ejson = nlohmann::json::parse(slurp(ej));
  EXPECT_EQ(ejson["utterances"], 0);
  EXPECT_FALSE(ejson.contains("per"));
  const auto j = nlohmann::json::parse(slurp(json));
  for (const char* name : {"linear", "semicrf"}) {
    EXPECT_FALSE(j["runs"][name].contains("dev")) << name;
    EXPECT_TRUE(j["runs"][name]["core-test"].contains("per")) << name;
  }
}

// The error that stops a run is in train.log too (main() prints it on stderr).
TEST_F(RunFolder, TrainLogHoldsTheErrorThatStoppedTheRun) {
  const fs::path a = dir_ / "stopped";
  Cmd t = run("train --config " + config("stopped", dir_ / "work", a, 1) +
              " --set debug.inject_nonfinite=1:2");
  ASSERT_EQ(t.rc, 1) << t.output;
  const std::string log = slurp(a / "train.log");
  EXPECT_NE(log.find("[error] training stopped at epoch 1, batch 2/"), std::string::npos) << log;
  EXPECT_NE(t.output.find("error: training stopped at epoch 1, batch 2/"), std::string::npos) << t.output;
}
