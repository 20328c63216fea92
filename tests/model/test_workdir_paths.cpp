// Issue 31, items 1 and 8, with the built binary on a tiny synth corpus: a run
// trained with a relative data.workdir records it as an absolute path
// (config.yaml, run.json, checkpoint metadata), so that evaluate, report and
// train --resume work from another folder; a WORKDIR moved since gets one line
// naming the option of that command (--workdir, --set data.workdir=DIR), and
// that option works; a resumed call's summary line gives the run's first dev
// PER (metrics.jsonl's epoch 1) and which epochs this call ran.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "model/checkpoint.h"
#include "tests/support/cli.h"

namespace fs = std::filesystem;
using testsupport::Cmd;
using testsupport::sh;
using testsupport::slurp;

namespace {

// `cd DIR && timitseg ARGS`
Cmd run_in(const fs::path& dir, const std::string& args) {
  return sh("cd '" + dir.string() + "' && " + testsupport::binary() + " " + args);
}

std::string percent(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", 100 * v);
  return buf;
}

}  // namespace

TEST(WorkdirPaths, RelativeWorkdirWorksFromAnyFolderAndAfterAMove) {
  const fs::path dir = testsupport::fresh_temp_dir("timitseg_workdir_paths");
  const fs::path a = dir / "a", b = dir / "b";
  fs::create_directories(b);
  const Cmd c = testsupport::make_prepared_corpus(testsupport::binary(), a, 6, 4, 5);
  ASSERT_EQ(c.rc, 0) << c.output;
  const std::string tiny = " --set model.hidden_dim=16 --set model.num_layers=1 --set train.threads=2";
  // trained in a/ with the relative path "work"
  Cmd r = run_in(a, "train --config " + std::string(TIMITSEG_SOURCE_DIR) +
                        "/configs/synth.yaml --set data.workdir=work/ --set train.run_dir=run --set train.epochs=1" + tiny);
  ASSERT_EQ(r.rc, 0) << r.output;
  const std::string abs = (a / "work").string();
  EXPECT_NE(slurp(a / "run" / "config.yaml").find("workdir: \"" + abs + "\""), std::string::npos)
      << slurp(a / "run" / "config.yaml");
  EXPECT_EQ(nlohmann::json::parse(slurp(a / "run" / "run.json")).at("config").at("data").at("workdir"), abs);
  EXPECT_EQ(timitseg::model::load_checkpoint((a / "run/checkpoints/best.safetensors").string()).config.data_workdir, abs);

  // from b/: evaluate, report, resume (one more epoch) with the paths a user types there
  r = run_in(b, "evaluate --checkpoint ../a/run/checkpoints/best.safetensors --split test");
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("PER"), std::string::npos) << r.output;
  // its progress (issue 31 item 10; not a terminal here: a line at each 10 %), none with --no-progress
  EXPECT_NE(r.output.find("evaluate test: 100% "), std::string::npos) << r.output;
  r = run_in(b, "evaluate --checkpoint ../a/run/checkpoints/best.safetensors --split test --no-progress");
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(r.output.find("evaluate test:"), std::string::npos) << r.output;
  r = run_in(b, "report ../a/run --out report.html --threads 2");
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_TRUE(fs::exists(b / "report.html"));
  EXPECT_EQ(r.output.find("warn"), std::string::npos) << r.output;  // the dev plots were drawn (no "n/a" warning)
  r = run_in(b, "train --resume ../a/run --set train.epochs=2");
  ASSERT_EQ(r.rc, 0) << r.output;
  // item 8: the run's first dev PER (epoch 1, trained by the first call), this call's epochs
  const std::vector<nlohmann::json> m = testsupport::metrics_lines(a / "run");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_NE(r.output.find("done: 1 epoch(s) in this call (epochs 2-2 of the run's 2); the run's first dev PER " +
                          percent(m[0].at("dev_per").get<double>()) + " (epoch 1), last dev PER " +
                          percent(m[1].at("dev_per").get<double>()) + ";"),
            std::string::npos)
      << r.output;

  // the WORKDIR moved: one line naming the option each command accepts, which then works
  fs::rename(a / "work", a / "moved");
  r = run_in(b, "evaluate --checkpoint ../a/run/checkpoints/best.safetensors --split dev");
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.output, "error: " + abs + ": no such folder (data.workdir is a prepared WORKDIR); make it with `timitseg "
                      "prepare --timit CORPUS --out " + abs + "` (TIMIT's layout) or `timitseg prepare --corpus PATH "
                      "--out " + abs + "` (another corpus), or point data.workdir at one (--workdir DIR)\n");
  r = run_in(b, "report ../a/run --out report2.html");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.output.find("or point data.workdir at one (--workdir DIR)\n"), std::string::npos) << r.output;
  r = run_in(b, "train --resume ../a/run --set train.epochs=3");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.output.find("or point data.workdir at one (--set data.workdir=DIR)\n"), std::string::npos) << r.output;
  EXPECT_EQ(testsupport::metrics_lines(a / "run").size(), 2u);  // nothing written

  r = run_in(b, "evaluate --checkpoint ../a/run/checkpoints/best.safetensors --split dev --workdir ../a/moved");
  EXPECT_EQ(r.rc, 0) << r.output;
  r = run_in(b, "report ../a/run --out report2.html --workdir ../a/moved --threads 2");
  EXPECT_EQ(r.rc, 0) << r.output;
  r = run_in(b, "train --resume ../a/run --set train.epochs=3 --set data.workdir=../a/moved");
  EXPECT_EQ(r.rc, 0) << r.output;
  // the new place is recorded (absolute) for the next resume
  EXPECT_EQ(timitseg::model::load_checkpoint((a / "run/checkpoints/epoch-3.safetensors").string()).config.data_workdir,
            (a / "moved").string());
  fs::remove_all(dir);
}
