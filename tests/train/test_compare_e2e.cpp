// `timitseg compare` end to end on a tiny synth corpus (CPU): a run folder is
// reused only when its saved config equals the requested one (another
// train.epochs is refused, naming the key; --force retrains it afresh, bitwise
// as a fresh run, and puts the old run back when the new one fails in its
// first epoch); --jobs 2 gives the same checkpoints as --jobs 1, bit for bit,
// with one train.log per run; a failing run leaves the others finished and is
// named in the error; RUN_DIR/report.html names every run; the significance
// of the JSON output agrees with the per-seed values.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/safetensors.h"

#include "tests/support/cli.h"

namespace fs = std::filesystem;
using namespace timitseg;
using testsupport::Cmd;
using testsupport::metrics_lines;
using testsupport::run;
using testsupport::slurp;

namespace {

void expect_same_tensors(const fs::path& a, const fs::path& b) {
  const st::File fa = st::load(a.string()), fb = st::load(b.string());
  ASSERT_EQ(fa.tensors.size(), fb.tensors.size()) << a << " vs " << b;
  for (const auto& [name, t] : fa.tensors) {
    ASSERT_TRUE(fb.has(name)) << name;
    EXPECT_EQ(t.bytes, fb.get(name).bytes) << name << " differs: " << a << " vs " << b;
  }
}

// Lines of text that start with prefix (main's "error: " line).
size_t lines_starting(const std::string& text, const std::string& prefix) {
  size_t n = 0;
  for (size_t p = 0; p < text.size();) {
    if (text.compare(p, prefix.size(), prefix) == 0) ++n;
    const size_t e = text.find('\n', p);
    if (e == std::string::npos) break;
    p = e + 1;
  }
  return n;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

class Compare : public ::testing::Test {
 protected:
  static fs::path dir_;
  static void SetUpTestSuite() {
    dir_ = testsupport::fresh_temp_dir("timitseg_compare_e2e");
    const Cmd c = testsupport::make_prepared_corpus(TIMITSEG_BINARY, dir_, 6, 4, 7);
    ASSERT_EQ(c.rc, 0) << c.output;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  // A tiny config with its run_dir.
  static std::string config(const std::string& name, const fs::path& run_dir, int epochs = 2) {
    const std::string path = (dir_ / (name + ".yaml")).string();
    std::ofstream(path) << "data:\n  workdir: " << (dir_ / "work").string()
                        << "\nmodel:\n  hidden_dim: 16\n  num_layers: 1\n  dropout: 0.1\n"
                           "crf:\n  max_duration: 10\n  reg: 0.001\n"
                           "train:\n  epochs: "
                        << epochs << "\n  batch_size: 4\n  lr: 0.01\n  seed: 3\n  threads: 2\n  run_dir: "
                        << run_dir.string() << "\n";
    return path;
  }
};
fs::path Compare::dir_;

}  // namespace

// Issue 21: `compare` again with another train.epochs extended the finished
// runs through --resume (a broken cosine schedule). Now it stops, naming the
// key, and --force trains them afresh: the same tensors as a fresh compare.
TEST_F(Compare, AnotherEpochCountIsRefusedAndForceRetrainsAfresh) {
  const fs::path runs = dir_ / "epochs";
  const std::string cfg = config("epochs", runs, 2);
  Cmd c = run("compare --config " + cfg);
  ASSERT_EQ(c.rc, 0) << c.output;
  const auto mtime = fs::last_write_time(runs / "linear" / "checkpoints" / "epoch-2.safetensors");

  Cmd more = run("compare --config " + cfg + " --set train.epochs=3");
  EXPECT_EQ(more.rc, 1) << more.output;
  EXPECT_EQ(lines_starting(more.output, "error: "), 1u) << more.output;
  EXPECT_NE(more.output.find((runs / "linear").string() + " (train.epochs: 2 -> 3)"), std::string::npos)
      << more.output;
  EXPECT_NE(more.output.find((runs / "semicrf").string() + " (train.epochs: 2 -> 3)"), std::string::npos)
      << more.output;
  EXPECT_NE(more.output.find("--force"), std::string::npos) << more.output;
  EXPECT_EQ(more.output.find("resuming"), std::string::npos) << more.output;
  // nothing touched
  EXPECT_FALSE(fs::exists(runs / "linear" / "checkpoints" / "epoch-3.safetensors"));
  EXPECT_EQ(fs::last_write_time(runs / "linear" / "checkpoints" / "epoch-2.safetensors"), mtime);
  EXPECT_EQ(metrics_lines(runs / "linear").size(), 2u);

  // several keys at once, each old -> new
  Cmd two = run("compare --config " + cfg + " --set train.epochs=3 --set train.lr=0.02");
  EXPECT_EQ(two.rc, 1) << two.output;
  EXPECT_NE(two.output.find("train.epochs: 2 -> 3, train.lr: 0.01 -> 0.02"), std::string::npos) << two.output;

  // --force: trained afresh, as a fresh compare with 3 epochs into another folder
  Cmd forced = run("compare --config " + cfg + " --set train.epochs=3 --force");
  ASSERT_EQ(forced.rc, 0) << forced.output;
  EXPECT_NE(forced.output.find("the old run (" + (runs / "linear.replaced").string() + ") is deleted"),
            std::string::npos)
      << forced.output;
  EXPECT_FALSE(fs::exists(runs / "linear.replaced"));
  EXPECT_FALSE(fs::exists(runs / "semicrf.replaced"));
  const fs::path fresh = dir_ / "epochs_fresh";
  Cmd f = run("compare --config " + config("epochs_fresh", fresh, 3));
  ASSERT_EQ(f.rc, 0) << f.output;
  for (const char* name : {"linear", "semicrf"}) {
    const auto lines = metrics_lines(runs / name), ref = metrics_lines(fresh / name);
    ASSERT_EQ(lines.size(), 3u) << name;
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(lines[i]["lr"], ref[i]["lr"]) << name << " epoch " << i + 1;
    expect_same_tensors(runs / name / "checkpoints" / "epoch-3.safetensors",
                        fresh / name / "checkpoints" / "epoch-3.safetensors");
    // run.json of a fresh run: no resume entry
    EXPECT_FALSE(nlohmann::json::parse(slurp(runs / name / "run.json")).contains("resumes")) << name;
  }
  // now equal: reused
  Cmd again = run("compare --config " + cfg + " --set train.epochs=3");
  ASSERT_EQ(again.rc, 0) << again.output;
  EXPECT_EQ(count(again.output, "is finished (epoch 3/3): reused"), 2u) << again.output;
  // keys that change no result (train.threads, train.log_every) do not count
  Cmd threads = run("compare --config " + cfg + " --set train.epochs=3 --set train.threads=1 --set train.log_every=7");
  ASSERT_EQ(threads.rc, 0) << threads.output;
  EXPECT_EQ(count(threads.output, "): reused"), 2u) << threads.output;
}

// --force whose new run fails in its first epoch: the old run is put back.
TEST_F(Compare, ForcedRunThatFailsPutsTheOldRunBack) {
  const fs::path runs = dir_ / "restore";
  const std::string cfg = config("restore", runs, 1);
  Cmd c = run("compare --config " + cfg);
  ASSERT_EQ(c.rc, 0) << c.output;
  const std::string before = slurp(runs / "linear" / "checkpoints" / "epoch-1.safetensors");
  // a NaN planted in the first step stops the new runs in their first epoch
  Cmd bad = run("compare --config " + cfg + " --set debug.inject_nonfinite=1:1 --force");
  EXPECT_EQ(bad.rc, 1) << bad.output;
  EXPECT_NE(bad.output.find("old run is back in place"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("2 of 2 runs did not finish"), std::string::npos) << bad.output;
  EXPECT_EQ(slurp(runs / "linear" / "checkpoints" / "epoch-1.safetensors"), before);
  EXPECT_FALSE(fs::exists(runs / "linear.replaced"));
  // and it is the same run as before: reused
  Cmd again = run("compare --config " + cfg);
  ASSERT_EQ(again.rc, 0) << again.output;
  EXPECT_EQ(count(again.output, "): reused"), 2u) << again.output;
  // a leftover X.replaced (a killed --force) stops compare, saying what it is
  fs::create_directories(runs / "semicrf.replaced");
  Cmd left = run("compare --config " + cfg);
  EXPECT_EQ(left.rc, 1) << left.output;
  EXPECT_NE(left.output.find("semicrf.replaced exists"), std::string::npos) << left.output;
}

// --jobs 2 trains two runs at a time on two threads: the same checkpoints as
// --jobs 1, bit for bit; each train.log holds its own run only; console
// lines carry the run's name.
TEST_F(Compare, ConcurrentRunsGiveTheSameCheckpointsBitwise) {
  const fs::path one = dir_ / "jobs1", two = dir_ / "jobs2";
  Cmd a = run("compare --config " + config("jobs1", one) + " --seeds 2 --jobs 1");
  ASSERT_EQ(a.rc, 0) << a.output;
  EXPECT_NE(a.output.find("1 at a time"), std::string::npos) << a.output;
  EXPECT_NE(a.output.find("training wall time: "), std::string::npos) << a.output;
  EXPECT_NE(a.output.find("(--jobs 1)"), std::string::npos) << a.output;
  Cmd b = run("compare --config " + config("jobs2", two) + " --seeds 2 --jobs 2");
  ASSERT_EQ(b.rc, 0) << b.output;
  EXPECT_NE(b.output.find("(--jobs 2)"), std::string::npos) << b.output;
  EXPECT_NE(b.output.find("[seed-3/linear] "), std::string::npos) << b.output;
  EXPECT_NE(b.output.find("[seed-4/semicrf] "), std::string::npos) << b.output;
  for (const char* seed : {"seed-3", "seed-4"})
    for (const char* name : {"linear", "semicrf"}) {
      for (const char* f : {"epoch-1.safetensors", "epoch-2.safetensors", "best.safetensors"})
        expect_same_tensors(one / seed / name / "checkpoints" / f, two / seed / name / "checkpoints" / f);
      const std::string log = slurp(two / seed / name / "train.log");
      EXPECT_EQ(count(log, "training on cpu"), 1u) << seed << "/" << name << ":\n" << log;
      EXPECT_NE(log.find("training " + (two / seed / name).string()), std::string::npos) << log;
      EXPECT_EQ(count(log, "epoch 2:"), 1u) << log;
      EXPECT_TRUE(fs::exists(two / seed / name / "report.html"));
    }
  // the two tables agree up to the times (the numbers come from the same checkpoints)
  auto table = [](const std::string& out) {
    const size_t b = out.find("compare: linear CRF"), e = out.find("decode time");
    return out.substr(b, e - b);
  };
  EXPECT_EQ(table(a.output), table(b.output));
}

// One run that cannot train: the others finish, the error names it.
TEST_F(Compare, AFailingRunLeavesTheOthersFinished) {
  const fs::path runs = dir_ / "fail";
  fs::create_directories(runs);
  std::ofstream(runs / "semicrf") << "a file where the run folder should be\n";
  Cmd c = run("compare --config " + config("fail", runs, 1) + " --jobs 2");
  EXPECT_EQ(c.rc, 1) << c.output;
  EXPECT_EQ(lines_starting(c.output, "error: "), 1u) << c.output;
  EXPECT_NE(c.output.find("1 of 2 runs did not finish"), std::string::npos) << c.output;
  EXPECT_NE(c.output.find((runs / "semicrf").string() + ": "), std::string::npos) << c.output;
  EXPECT_TRUE(fs::exists(runs / "linear" / "checkpoints" / "epoch-1.safetensors"));
}

// RUN_DIR/report.html overlays every run with the tables; the JSON's
// significance agrees with the per-seed values (paired by seed).
TEST_F(Compare, OverlayReportAndSignificance) {
  const fs::path runs = dir_ / "sig", json = dir_ / "sig.json";
  Cmd c = run("compare --config " + config("sig", runs, 1) + " --seeds 3,4 --json " + json.string());
  ASSERT_EQ(c.rc, 0) << c.output;
  EXPECT_NE(c.output.find("report: " + (runs / "report.html").string()), std::string::npos) << c.output;
  EXPECT_NE(c.output.find("paired by seed (2 seeds)"), std::string::npos) << c.output;
  const std::string html = slurp(runs / "report.html");
  for (const char* seed : {"seed-3", "seed-4"})
    for (const char* name : {"linear", "semicrf"}) {
      EXPECT_NE(html.find((runs / seed / name).string()), std::string::npos) << seed << "/" << name;
      EXPECT_TRUE(fs::exists(runs / seed / name / "report.html")) << seed << "/" << name;
    }
  EXPECT_NE(html.find("id=\"significance\""), std::string::npos);
  EXPECT_NE(html.find("p (sign test)"), std::string::npos);

  const auto j = nlohmann::json::parse(slurp(json));
  EXPECT_EQ(j["report"], (runs / "report.html").string());
  for (const char* key : {"per", "boundary_f1_tol0", "segment_f1", "duration_kl", "align_within_20ms",
                          "align_mean_abs_ms", "align_samples_within_20ms", "align_samples_mean_abs_ms"}) {
    const auto& lin = j["runs"]["linear"]["dev"][key]["values"];
    const auto& semi = j["runs"]["semicrf"]["dev"][key]["values"];
    const double d0 = semi[0].get<double>() - lin[0].get<double>(), d1 = semi[1].get<double>() - lin[1].get<double>();
    const auto& s = j["significance"]["dev"][key];
    EXPECT_EQ(s["n"], 2) << key;
    EXPECT_NEAR(s["mean_difference"].get<double>(), (d0 + d1) / 2, 1e-12) << key;
    EXPECT_NEAR(s["std"].get<double>(), std::abs(d0 - d1) / std::sqrt(2.0), 1e-12) << key;
    const int pos = (d0 > 0) + (d1 > 0), neg = (d0 < 0) + (d1 < 0);
    EXPECT_EQ(s["sign_test"]["positive"], pos) << key;
    EXPECT_EQ(s["sign_test"]["negative"], neg) << key;
    // 2 pairs: both one way p = 0.5, else 1
    EXPECT_DOUBLE_EQ(s["sign_test"]["p"].get<double>(), pos == 2 || neg == 2 ? 0.5 : 1.0) << key;
    if (d0 != d1) {
      // 1 degree of freedom: Student's t is Cauchy, p = 1 - 2 atan(|t|) / pi
      const double t = (d0 + d1) / 2 / (std::abs(d0 - d1) / std::sqrt(2.0) / std::sqrt(2.0));
      EXPECT_NEAR(s["t_test"]["t"].get<double>(), t, 1e-9 * std::abs(t)) << key;
      EXPECT_EQ(s["t_test"]["df"], 1) << key;
      EXPECT_NEAR(s["t_test"]["p"].get<double>(), 1 - 2 * std::atan(std::abs(t)) / M_PI, 1e-9) << key;
    }
  }
  EXPECT_FALSE(j["significance"]["dev"].contains("decode_seconds"));
  // forced alignment rows (docs/align.md): fractions in [0, 1], in the table and the report
  for (const char* variant : {"linear", "semicrf"})
    for (const auto& v : j["runs"][variant]["dev"]["align_within_50ms"]["values"]) {
      EXPECT_GE(v.get<double>(), 0.0);
      EXPECT_LE(v.get<double>(), 1.0);
    }
  EXPECT_NE(html.find("align within 20 ms %"), std::string::npos);

  // the HTML table has the console's train frames/s row; the legend names the runs by the
  // part of their paths that differs (seed and CRF), not by whole (cut) paths
  EXPECT_NE(html.find("<td>train frames/s</td>"), std::string::npos);
  for (const char* seed : {"seed-3", "seed-4"})
    for (const char* name : {"linear", "semicrf"})
      EXPECT_NE(html.find("</svg> " + std::string(seed) + "/" + name + " &nbsp;"), std::string::npos) << seed << name;
  // 25 ms rows: left out (said once) exactly when they equal the 20 ms ones in every run
  bool same = true;
  for (const char* variant : {"linear", "semicrf"})
    for (const char* split : {"dev", "core-test"})
      if (j["runs"][variant].contains(split))
        same = same && j["runs"][variant][split]["align_within_20ms"]["values"] ==
                           j["runs"][variant][split]["align_within_25ms"]["values"];
  EXPECT_EQ(c.output.find("align within 25 ms %") == std::string::npos, same) << c.output;
  EXPECT_EQ(count(c.output, "align within 25 ms: the same as within 20 ms in every run"), same ? 1u : 0u) << c.output;

  // one seed: no significance table, one line saying why
  Cmd one = run("compare --config " + config("sig1", dir_ / "sig1", 1));
  ASSERT_EQ(one.rc, 0) << one.output;
  EXPECT_EQ(one.output.find("n/a (1 seed)"), std::string::npos) << one.output;
  EXPECT_EQ(one.output.find("paired t-test"), std::string::npos) << one.output;
  EXPECT_EQ(count(one.output, "Significance of the semi-CRF minus the linear CRF: needs 2 seeds or more (--seeds N); "
                              "this compare has 1"),
            1u)
      << one.output;
  const std::string html1 = slurp(dir_ / "sig1" / "report.html");
  EXPECT_EQ(html1.find("id=\"significance\""), std::string::npos);
  EXPECT_NE(html1.find("needs 2 seeds or more"), std::string::npos);
}
