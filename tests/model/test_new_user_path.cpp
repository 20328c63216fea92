// Issue 21's path of a new user, with the built binary on a tiny synth corpus:
// the shipped config's `auto` values on the CPU (run.json, the pick lines),
// `train --resume` of a finished run, global flags after the subcommand,
// `evaluate --device cuda` without a GPU, output paths that name a folder
// (checked before any work, for every command that writes a file), `report`
// on a folder that holds no run, the linear CRF's duration_init line, a
// data.workdir that does not exist, and `--version`.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/cuda.h"
#include "tests/support/cli.h"

namespace fs = std::filesystem;
using testsupport::Cmd;
using testsupport::run;
using testsupport::slurp;

namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

class NewUser : public ::testing::Test {
 protected:
  static fs::path dir_;
  static std::string run_;  // a finished 1-epoch run of configs/synth.yaml (shrunk)
  static Cmd train_;
  static void SetUpTestSuite() {
    dir_ = testsupport::fresh_temp_dir("timitseg_new_user");
    const Cmd c = testsupport::make_prepared_corpus(testsupport::binary(), dir_, 6, 4, 5);
    ASSERT_EQ(c.rc, 0) << c.output;
    run_ = (dir_ / "run").string();
    // the shipped config as typed, shrunk to a tiny model and one epoch
    train_ = run("train --config " + std::string(TIMITSEG_SOURCE_DIR) + "/configs/synth.yaml --set data.workdir=" +
                 (dir_ / "work").string() + " --set train.run_dir=" + run_ +
                 " --set model.hidden_dim=16 --set model.num_layers=1 --set train.epochs=1 --set train.threads=2");
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string best() { return run_ + "/checkpoints/best.safetensors"; }
};
fs::path NewUser::dir_;
std::string NewUser::run_;
Cmd NewUser::train_;

}  // namespace

TEST_F(NewUser, ShippedConfigOnTheCpuRecordsTheResolvedChoices) {
  ASSERT_EQ(train_.rc, 0) << train_.output;
  if (timitseg::cuda::device_count() > 0) GTEST_SKIP() << "a CUDA device is present: auto picks the GPU here";
  // one info line per auto key
  EXPECT_EQ(count(train_.output, "train.device = auto: cpu (no CUDA device was found"), 1u) << train_.output;
  EXPECT_EQ(count(train_.output, "train.rnn_algo = auto: standard (on the CPU the GPU recurrence is not used)"), 1u)
      << train_.output;
  EXPECT_EQ(count(train_.output, "crf.backend = auto: cpu (on the CPU)"), 1u) << train_.output;
  const auto rj = nlohmann::json::parse(slurp(fs::path(run_) / "run.json"));
  EXPECT_EQ(rj.at("device"), "cpu");
  EXPECT_EQ(rj.at("crf_backend"), "cpu");
  EXPECT_EQ(rj.at("rnn_algo"), "standard");
  // the segment heads resolved: the shipped config's onset_features auto at K = 60 is on; end_features is not set (off)
  EXPECT_EQ(rj.at("crf_onset_features"), true);
  EXPECT_EQ(rj.at("crf_end_features"), false);
  // the config as given (auto kept: a resume on a GPU machine picks the GPU)
  EXPECT_EQ(rj.at("config").at("train").at("device"), "auto");
  EXPECT_EQ(rj.at("config").at("crf").at("backend"), "auto");
  EXPECT_NE(slurp(fs::path(run_) / "config.yaml").find("device: \"auto\""), std::string::npos);
}

TEST_F(NewUser, ResumeOfAFinishedRunSaysHowToTrainLonger) {
  ASSERT_EQ(train_.rc, 0) << train_.output;
  const auto mtime = fs::last_write_time(fs::path(run_) / "run.json");
  // the temporary of a report write killed by kill -9 (a process that no longer exists) is cleared, as by any train
  const fs::path stale = fs::path(run_) / "report.html.tmp.4194303.7";
  std::ofstream(stale) << "half";
  const Cmd r = run("train --resume " + run_);
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find(run_ + " is finished: it has trained 1 of train.epochs = 1 epoch(s); nothing to do. To "
                          "train it longer: timitseg train --resume " + run_ + " --set train.epochs=N with N > 1"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("--set train.epochs=N --set train.run_dir=NEW_DIR"), std::string::npos) << r.output;
  EXPECT_EQ(count(r.output, "\n"), 1u) << "one line:\n" << r.output;
  EXPECT_EQ(r.output.find("training on"), std::string::npos) << r.output;
  EXPECT_EQ(fs::last_write_time(fs::path(run_) / "run.json"), mtime) << "the finished run was touched";
  // and the way it names works: one more epoch
  const Cmd more = run("train --resume " + run_ + " --set train.epochs=2");
  EXPECT_EQ(more.rc, 0) << more.output;
  EXPECT_TRUE(fs::exists(fs::path(run_) / "checkpoints" / "epoch-2.safetensors")) << more.output;
}

TEST_F(NewUser, GlobalFlagsAfterTheSubcommandAndEvaluateOnAMissingGpu) {
  ASSERT_EQ(train_.rc, 0) << train_.output;
  const Cmd d = run("evaluate --log-level debug --checkpoint " + best() + " --split dev --threads 2");
  EXPECT_EQ(d.rc, 0) << d.output;
  EXPECT_NE(d.output.find("PER"), std::string::npos) << d.output;
  const Cmd q = run("evaluate --checkpoint " + best() + " --split dev --threads 2 --log-level error");
  EXPECT_EQ(q.rc, 0) << q.output;
  EXPECT_EQ(q.output.find("[info]"), std::string::npos) << "--log-level error after the options:\n" << q.output;
  const Cmd bad = run("evaluate --log-level loud --checkpoint " + best());
  EXPECT_EQ(bad.rc, 2) << bad.output;
  if (timitseg::cuda::device_count() > 0) return;  // the rest needs a machine without a GPU
  for (const char* cmd : {"evaluate", "decode"}) {
    const std::string extra = std::string(cmd) == "decode" ? " x.wav --out " + (dir_ / "dec").string() : "";
    const Cmd c = run(std::string(cmd) + " --device cuda --checkpoint " + best() + extra);
    EXPECT_EQ(c.rc, 1) << c.output;
    EXPECT_EQ(c.output.rfind("error: no CUDA device was found (", 0), 0u) << c.output;
    EXPECT_NE(c.output.find("run on the CPU with --device cpu, or --device auto"), std::string::npos) << c.output;
    EXPECT_EQ(c.output.find("train.device"), std::string::npos) << c.output;
    EXPECT_EQ(count(c.output, "\n"), 1u) << c.output;
  }
}

TEST_F(NewUser, OutputPathsNamingAFolderFailBeforeAnyWork) {
  ASSERT_EQ(train_.rc, 0) << train_.output;
  const fs::path folder = dir_ / "outdir";
  fs::create_directories(folder);
  const std::string f = folder.string(), missing = (dir_ / "nodir").string();
  struct Case {
    std::string args, flag, name;
  };
  const std::string ws = " --workdir " + (dir_ / "work").string();
  const Case cases[] = {
      {"export " + best() + " --out ", "--out", "model.safetensors"},
      {"evaluate --checkpoint " + best() + " --json ", "--json", "metrics.json"},
      {"evaluate --checkpoint " + best() + " --dump-predictions ", "--dump-predictions", "predictions.jsonl"},
      {"score" + ws + " --predictions x.jsonl --json ", "--json", "metrics.json"},
      {"report " + run_ + " --out ", "--out", "report.html"},
      {"compare --config " + std::string(TIMITSEG_SOURCE_DIR) + "/configs/synth.yaml --json ", "--json",
       "compare.json"},
      {"features x.wav --out ", "--out", "features.safetensors"},
      {"bench train --utterances 2 --json ", "--json", "bench.json"},
  };
  for (const Case& c : cases) {
    // a trailing slash (the folder need not exist) and an existing folder
    for (const auto& [path, what] : {std::pair<std::string, std::string>{missing + "/", "names a folder (it ends with '/')"},
                                     {f + "/", "names a folder (it ends with '/')"},
                                     {f, "is an existing folder"}}) {
      const Cmd r = run(c.args + path);
      EXPECT_EQ(r.rc, 1) << c.args << path << "\n" << r.output;
      std::string base = path;
      while (!base.empty() && base.back() == '/') base.pop_back();
      const std::string want = "error: " + c.flag + " " + path + ": " + what + "; give a file path, e.g. " + c.flag +
                               " " + base + "/" + c.name + "\n";
      EXPECT_EQ(r.output, want) << c.args << path;
    }
  }
  // nothing was written into the folder
  EXPECT_TRUE(fs::is_empty(folder));
}

TEST_F(NewUser, ReportOnAFolderWithoutARunIsOneError) {
  const fs::path empty = dir_ / "not_a_run";
  fs::create_directories(empty);
  const Cmd r = run("report " + empty.string() + " --out " + (dir_ / "r.html").string());
  EXPECT_EQ(r.rc, 1) << r.output;
  EXPECT_EQ(r.output, "error: " + empty.string() +
                          ": not a run folder (neither metrics.jsonl nor config.yaml; give a train.run_dir)\n");
}

TEST_F(NewUser, LinearCrfSaysDurationInitDoesNothing) {
  const std::string lin = (dir_ / "linear").string();
  const Cmd r = run("train --config " + std::string(TIMITSEG_SOURCE_DIR) + "/configs/synth.yaml --set data.workdir=" +
                    (dir_ / "work").string() + " --set train.run_dir=" + lin +
                    " --set crf.max_duration=1 --set model.hidden_dim=16 --set model.num_layers=1 --set "
                    "train.epochs=1 --set train.threads=2");
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(r.output.find("gold segments"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("crf.duration_init = data: no effect on the linear CRF (K = 1: every segment is one frame)"),
            std::string::npos)
      << r.output;
}

TEST_F(NewUser, MissingWorkdirNamesPrepareWithoutForce) {
  const std::string wd = (dir_ / "never_prepared").string();
  const Cmd r = run("train --config " + std::string(TIMITSEG_SOURCE_DIR) + "/configs/synth.yaml --set data.workdir=" +
                    wd + " --set train.run_dir=" + (dir_ / "r_missing").string());
  EXPECT_EQ(r.rc, 1) << r.output;
  EXPECT_NE(r.output.find("error: " + wd + ": no such folder (data.workdir is a prepared WORKDIR); make it with "
                          "`timitseg prepare --timit CORPUS --out " + wd + "` (TIMIT's layout) or `timitseg prepare "
                          "--corpus PATH --out " + wd + "` (another corpus)"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("--force"), std::string::npos) << r.output;
  // an existing folder that is not prepared
  fs::create_directories(dir_ / "empty_wd");
  const Cmd e = run("train --config " + std::string(TIMITSEG_SOURCE_DIR) + "/configs/synth.yaml --set data.workdir=" +
                    (dir_ / "empty_wd").string() + " --set train.run_dir=" + (dir_ / "r_empty").string());
  EXPECT_EQ(e.rc, 1) << e.output;
  EXPECT_NE(e.output.find("manifest.json: missing (" + (dir_ / "empty_wd").string() + " is not a prepared WORKDIR)"),
            std::string::npos)
      << e.output;
}

TEST(NewUserCli, VersionSaysWhetherLibfliteIsBuiltInAndFeaturesHasNoPrepareFlag) {
  const Cmd v = run("--version");
  EXPECT_EQ(v.rc, 0);
  const bool with = v.output.find(" build, with libflite, ") != std::string::npos;
  const bool without = v.output.find(" build, without libflite, ") != std::string::npos;
  // and whether MPI is (mpirun launches of train, docs/multigpu.md), NCCL, and CUDA with the architectures
  // the configure step compiled for (TIMITSEG_TEST_CUDA_ARCHS: CMake's CMAKE_CUDA_ARCHITECTURES, "" without CUDA)
  const bool mpi = v.output.find(" with MPI, ") != std::string::npos;
  EXPECT_TRUE(mpi != (v.output.find(" without MPI, ") != std::string::npos)) << v.output;
  const bool nccl = v.output.find(" with NCCL, ") != std::string::npos;
  EXPECT_TRUE(nccl != (v.output.find(" without NCCL, ") != std::string::npos)) << v.output;
  std::string archs = TIMITSEG_TEST_CUDA_ARCHS;  // "80,86,89,90"
  std::replace(archs.begin(), archs.end(), ',', ';');
  EXPECT_NE(v.output.find(archs.empty() ? " without CUDA)\n" : " with CUDA for architectures " + archs + ")\n"),
            std::string::npos)
      << v.output;
  if (nccl) EXPECT_TRUE(mpi && !archs.empty()) << v.output;  // NCCL is used only with MPI and CUDA
  EXPECT_TRUE(with != without) << v.output;
  const Cmd s = run("synth --voice flite --speakers 4 --utterances-per-speaker 1 --out " +
                    (testsupport::fresh_temp_dir("timitseg_flite_probe") / "c").string());
  EXPECT_EQ(s.rc == 0, with) << v.output << s.output;  // the version line tells the truth
  const Cmd f = run("features --help");
  EXPECT_EQ(f.output.find("--allow-resample"), std::string::npos) << f.output;
  const Cmd p = run("prepare --help");
  EXPECT_NE(p.output.find("--allow-resample"), std::string::npos) << p.output;
  EXPECT_EQ(p.output.find("prepare: accept"), std::string::npos) << p.output;
}

// compare compares the three `auto` keys as resolved here: runs saved with the
// explicit values that `auto` picks on this machine are reused by a request for
// `auto`, and the reverse; another explicit value is a difference, named.
TEST_F(NewUser, CompareTreatsAutoAsItsPickOnThisMachine) {
  if (timitseg::cuda::device_count() > 0) GTEST_SKIP() << "a CUDA device is present: auto picks the GPU here";
  const std::string runs = (dir_ / "cmp").string();
  const std::string base = "compare --config " + std::string(TIMITSEG_SOURCE_DIR) +
                           "/configs/synth.yaml --set data.workdir=" + (dir_ / "work").string() +
                           " --set train.run_dir=" + runs +
                           " --set model.hidden_dim=16 --set model.num_layers=1 --set train.epochs=1 "
                           "--set train.threads=2";
  const Cmd first = run(base + " --set train.device=cpu --set crf.backend=cpu --set train.rnn_algo=standard");
  ASSERT_EQ(first.rc, 0) << first.output;
  const Cmd again = run(base);  // the shipped auto values
  EXPECT_EQ(again.rc, 0) << again.output;
  EXPECT_NE(again.output.find(runs + "/linear is finished (epoch 1/1): reused"), std::string::npos) << again.output;
  EXPECT_NE(again.output.find(runs + "/semicrf is finished (epoch 1/1): reused"), std::string::npos) << again.output;
  const Cmd other = run(base + " --set crf.backend=reference");
  EXPECT_EQ(other.rc, 1) << other.output;
  EXPECT_NE(other.output.find("crf.backend: \"cpu\" -> \"reference\""), std::string::npos) << other.output;
}
