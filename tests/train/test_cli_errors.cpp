// The error convention of the `timitseg` binary (issue 13), run as a user
// would: every failure is one stderr line starting "error:", exit 1; usage
// errors exit 2; --help exits 0; SIGINT / SIGTERM during `train` stop between
// steps with one line naming the command that resumes, and --resume then
// continues from the last finished epoch; `--resume --set` refuses keys that
// may not change on resume.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "train/interrupt.h"
#include "train/train.h"

#include "tests/support/cli.h"

namespace fs = std::filesystem;

namespace {

struct Proc {
  int rc = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(line);
  return out;
}

// Runs `timitseg ARGS` with stdout and stderr captured separately.
Proc run(const std::string& args) {
  static int n = 0;
  const fs::path base =
      fs::temp_directory_path() / ("timitseg_clierr_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
  const std::string cmd = std::string(TIMITSEG_BINARY) + " " + args + " >" + base.string() + ".out 2>" +
                          base.string() + ".err </dev/null";
  const int status = std::system(cmd.c_str());
  Proc r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(base.string() + ".out");
  r.err = slurp(base.string() + ".err");
  fs::remove(base.string() + ".out");
  fs::remove(base.string() + ".err");
  return r;
}

// stderr is exactly one line, starting "error:".
void expect_one_error_line(const Proc& r, const std::string& what) {
  const std::vector<std::string> l = lines_of(r.err);
  ASSERT_EQ(l.size(), 1u) << what << ": stderr:\n" << r.err;
  EXPECT_EQ(l[0].rfind("error: ", 0), 0u) << what << ": " << l[0];
}

int count_error_lines(const std::string& text) {
  int n = 0;
  for (const std::string& l : lines_of(text))
    if (l.rfind("error:", 0) == 0) ++n;
  return n;
}

}  // namespace

TEST(CliErrors, NoArgumentsPrintTheMainHelp) {
  const Proc r = run("");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out, run("--help").out);  // the same text as --help: the subcommands and global options
  EXPECT_NE(r.out.find("evaluate"), std::string::npos) << r.out;
}

// Unknown subcommands and options (issue 31): one line, exit 2, the word not
// understood and the nearest valid name by edit distance.
TEST(CliErrors, UnknownNamesGetASuggestion) {
  struct Case {
    const char* args;
    const char* line;
  } cases[] = {
      {"trian", "error: unknown subcommand 'trian' (did you mean 'train'?) (usage: timitseg --help)"},
      {"trian --help", "error: unknown subcommand 'trian' (did you mean 'train'?) (usage: timitseg --help)"},
      {"evalute --checkpoint x", "error: unknown subcommand 'evalute' (did you mean 'evaluate'?) (usage: timitseg --help)"},
      {"zzzzzz", "error: unknown subcommand 'zzzzzz' (usage: timitseg --help)"},
      {"bench crff", "error: unknown subcommand 'crff' of bench (did you mean 'crf'?) (usage: timitseg bench --help)"},
      {"train --confg configs/synth.yaml",
       "error: unknown option '--confg' of train (did you mean '--config'?) (usage: timitseg train --help)"},
      {"train --config=x --rsume r",
       "error: unknown option '--rsume' of train (did you mean '--resume'?) (usage: timitseg train --help)"},
      {"--log-levl debug train", "error: unknown option '--log-levl' (did you mean '--log-level'?) (usage: timitseg --help)"},
      {"evaluate --checkpoint x --wrkdir=w",
       "error: unknown option '--wrkdir' of evaluate (did you mean '--workdir'?) (usage: timitseg evaluate --help)"},
      {"train --qqqqqqqq", "error: unknown option '--qqqqqqqq' of train (usage: timitseg train --help)"},
  };
  for (const Case& c : cases) {
    const Proc r = run(c.args);
    EXPECT_EQ(r.rc, 2) << c.args;
    EXPECT_EQ(r.err, std::string(c.line) + "\n") << c.args;
    EXPECT_EQ(r.out, "") << c.args;
  }
}

TEST(CliErrors, UsageErrorsExit2WithOneLine) {
  struct Case {
    const char* args;
    const char* says;
  } cases[] = {
      {"--bogus", "--bogus"},
      {"train --bogus-flag", "--bogus-flag"},
      {"evaluate", "--checkpoint is required"},
      {"evaluate --checkpoint x.safetensors --split nope", "nope"},
      {"evaluate --checkpoint x.safetensors --threads many", "many"},
      {"nosuchcommand", "nosuchcommand"},
  };
  for (const Case& c : cases) {
    const Proc r = run(c.args);
    EXPECT_EQ(r.rc, 2) << c.args << "\n" << r.err;
    expect_one_error_line(r, c.args);
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << ": " << r.err;
  }
  // The hint names the subcommand whose options were wrong.
  const Proc r = run("train --bogus-flag");
  EXPECT_NE(r.err.find("(usage: timitseg train --help)"), std::string::npos) << r.err;
}

TEST(CliErrors, HelpAndVersionExit0) {
  Proc r = run("--help");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("train"), std::string::npos) << r.out;
  EXPECT_EQ(r.err, "");
  r = run("train --help");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("--resume"), std::string::npos) << r.out;
  r = run("--version");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("timitseg 0.1.0"), std::string::npos) << r.out;
}

// --log-level's levels as --help lists them: critical and off print no log
// line (timitseg logs nothing at critical), yet a failure's one error line.
TEST(CliErrors, LogLevelsCriticalAndOffKeepOnlyTheErrorLine) {
  EXPECT_NE(run("--help").out.find("trace, debug, info, warn, error, critical, off (critical and off: no log lines"),
            std::string::npos);
  const fs::path dir = fs::temp_directory_path() / ("timitseg_clierr_levels_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string synth = " synth --speakers 4 --utterances-per-speaker 1 --out ";
  Proc r = run(synth + (dir / "info").string());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("] [info] "), std::string::npos) << r.err;  // the summary line at the default level
  for (const char* level : {"critical", "off"}) {
    r = run(std::string("--log-level ") + level + synth + (dir / level).string());
    ASSERT_EQ(r.rc, 0) << level << ": " << r.err;
    EXPECT_EQ(r.err.find("] ["), std::string::npos) << level << ": " << r.err;  // no log line
    r = run(std::string("--log-level ") + level + synth + (dir / level).string());  // not empty now: fails
    EXPECT_EQ(r.rc, 1) << level;
    expect_one_error_line(r, level);
    EXPECT_NE(r.err.find("folder exists and is not empty"), std::string::npos) << level << ": " << r.err;
  }
  fs::remove_all(dir);
}

// --no-progress is global: before or after the subcommand, no bar; the log lines stay.
TEST(CliErrors, NoProgressBeforeOrAfterTheSubcommand) {
  const fs::path dir = fs::temp_directory_path() / ("timitseg_clierr_progress_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string synth = " synth --speakers 4 --utterances-per-speaker 1 --out ";
  Proc r = run(synth + (dir / "bars").string());
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("synth tones: 100% 8/8 utt"), std::string::npos) << r.err;  // the bar's last line
  for (const std::string& line : {"--no-progress" + synth + (dir / "before").string(),
                                  synth + (dir / "after").string() + " --no-progress"}) {
    r = run(line);
    ASSERT_EQ(r.rc, 0) << line << ": " << r.err;
    EXPECT_EQ(r.err.find("synth tones:"), std::string::npos) << line << ": " << r.err;
    EXPECT_NE(r.err.find("] [info] "), std::string::npos) << line << ": " << r.err;
  }
  EXPECT_NE(run("--help").out.find("--no-progress"), std::string::npos);
  fs::remove_all(dir);
}

// A bad value of a global option is a usage error pointing at the main help, before or after the
// subcommand; evaluate's own --no-progress points at evaluate's (it once crashed with "error: stoll").
TEST(CliErrors, BadValueOfAGlobalOptionNamesTheMainHelp) {
  const fs::path dir = fs::temp_directory_path() / ("timitseg_clierr_global_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string out = " --out " + dir.string();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--no-progress=maybe synth" + out, "error: Could not convert: --no-progress = maybe (usage: timitseg --help)"},
      {"synth" + out + " --no-progress=maybe", "error: Could not convert: --no-progress = maybe (usage: timitseg --help)"},
      {"synth --log-level loud" + out,
       "error: --log-level: loud not in {trace,debug,info,warn,error,critical,off} (usage: timitseg --help)"},
      {"evaluate --checkpoint c.safetensors --no-progress=maybe",
       "error: Could not convert: --no-progress = maybe (usage: timitseg evaluate --help)"},
      {"synth --speakers x" + out, "error: --speakers: Value x not in range 4 to 10000 (usage: timitseg synth --help)"}};
  for (const auto& [line, want] : cases) {
    const Proc r = run(line);
    EXPECT_EQ(r.rc, 2) << line << ": " << r.err;
    ASSERT_EQ(lines_of(r.err).size(), 1u) << line << ": " << r.err;
    EXPECT_EQ(lines_of(r.err).at(0), want) << line;
    EXPECT_FALSE(fs::exists(dir)) << line;
  }
}

TEST(CliErrors, FailuresExit1WithOneLine) {
  const fs::path dir = fs::temp_directory_path() / ("timitseg_clierr_cfg_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string bad = (dir / "dup.yaml").string();
  std::ofstream(bad) << "data:\n  workdir: w\ntrain:\n  epochs: 30\n  epochs: 1\n";
  Proc r = run("train --config " + bad);
  EXPECT_EQ(r.rc, 1);
  expect_one_error_line(r, "duplicate key");
  EXPECT_EQ(lines_of(r.err).at(0), "error: " + bad +
                                       ":5: duplicate key 'train.epochs' (first at line 4, again at line 5); each key "
                                       "may appear only once");
  const std::string typed = (dir / "typed.yaml").string();
  std::ofstream(typed) << "train:\n  epochs: abc\n";
  r = run("train --config " + typed);
  EXPECT_EQ(r.rc, 1);
  expect_one_error_line(r, "wrong type");
  EXPECT_EQ(lines_of(r.err).at(0), "error: " + typed + ":2: train.epochs: expected an integer, got 'abc'");
  r = run("train --config " + (dir / "missing.yaml").string());
  EXPECT_EQ(r.rc, 1);
  expect_one_error_line(r, "missing config");
  r = run("evaluate --checkpoint " + (dir / "missing.safetensors").string());
  EXPECT_EQ(r.rc, 1);
  expect_one_error_line(r, "missing checkpoint");
  fs::remove_all(dir);
}

// A tiny synth corpus trained for many short epochs, interrupted by a signal.
class TrainInterrupt : public ::testing::Test {
 protected:
  static fs::path dir_;
  static void SetUpTestSuite() {
    dir_ = testsupport::fresh_temp_dir("timitseg_interrupt");
    const Proc s = run("synth --out " + (dir_ / "synth").string() + " --speakers 6 --utterances-per-speaker 4 --seed 5");
    ASSERT_EQ(s.rc, 0) << s.err;
    const Proc p = run("prepare --timit " + (dir_ / "synth").string() + " --out " + (dir_ / "work").string());
    ASSERT_EQ(p.rc, 0) << p.err;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  // Config of a run that would take 1000 epochs.
  static std::string config(const std::string& run_name) {
    const std::string path = (dir_ / (run_name + ".yaml")).string();
    std::ofstream(path) << "data:\n  workdir: " << (dir_ / "work").string()
                        << "\nmodel:\n  hidden_dim: 8\n  num_layers: 1\n  dropout: 0.1\n"
                           "crf:\n  max_duration: 12\n"
                           "train:\n  epochs: 1000\n  batch_size: 2\n  lr: 0.01\n  seed: 3\n  threads: 1\n"
                           "  run_dir: "
                        << (dir_ / run_name).string() << "\n";
    return path;
  }

  // Starts `timitseg ARGS`, waits for a stderr line containing `wait_for`,
  // sends `sig`, and returns the exit status and all of stderr.
  static Proc interrupt(const std::vector<std::string>& args, const std::string& wait_for, int sig) {
    int fds[2];
    if (pipe(fds) != 0) return {};
    const pid_t pid = fork();
    if (pid == 0) {
      dup2(fds[1], 2);
      close(fds[0]);
      close(fds[1]);
      if (freopen("/dev/null", "w", stdout) == nullptr) _exit(127);
      std::vector<char*> argv;
      std::string bin = TIMITSEG_BINARY;
      argv.push_back(bin.data());
      std::vector<std::string> copy = args;
      for (std::string& a : copy) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(bin.c_str(), argv.data());
      _exit(127);
    }
    close(fds[1]);
    Proc r;
    FILE* in = fdopen(fds[0], "r");
    char buf[4096];
    bool sent = false;
    while (std::fgets(buf, sizeof buf, in)) {
      r.err += buf;
      if (!sent && std::string(buf).find(wait_for) != std::string::npos) {
        kill(pid, sig);
        sent = true;
      }
    }
    std::fclose(in);
    int status = 0;
    waitpid(pid, &status, 0);
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (!sent) r.rc = -2;  // never saw the line
    return r;
  }

  static std::vector<int> metrics_epochs(const fs::path& run_dir) {
    std::vector<int> out;
    for (const std::string& l : lines_of(slurp(run_dir / "metrics.jsonl"))) {
      const size_t at = l.find("\"epoch\":");
      if (at != std::string::npos) out.push_back(std::atoi(l.c_str() + at + 8));
    }
    return out;
  }
};
fs::path TrainInterrupt::dir_;

TEST_F(TrainInterrupt, SigintStopsWithResumeLineAndResumeContinues) {
  const fs::path run_dir = dir_ / "run_int";
  const Proc r = interrupt({"train", "--config", config("run_int")}, "epoch 2/1000", SIGINT);
  ASSERT_NE(r.rc, -2) << "no 'epoch 2/1000' progress line:\n" << r.err;
  EXPECT_EQ(r.rc, 130) << r.err;
  EXPECT_EQ(count_error_lines(r.err), 1) << r.err;
  std::smatch m;
  const std::string last = lines_of(r.err).back();
  const std::regex re("error: interrupted at epoch ([0-9]+), batch ([0-9]+); resume with: timitseg train --resume " +
                      run_dir.string());
  ASSERT_TRUE(std::regex_match(last, m, re)) << r.err;
  const int stopped_in = std::stoi(m[1]);
  ASSERT_GE(stopped_in, 2);
  // Nothing half-written: finished epochs 1..E-1 only, each with its checkpoint, no temporary files.
  std::vector<int> expect;
  for (int e = 1; e < stopped_in; ++e) expect.push_back(e);
  EXPECT_EQ(metrics_epochs(run_dir), expect);
  EXPECT_TRUE(fs::exists(run_dir / "checkpoints" / ("epoch-" + std::to_string(stopped_in - 1) + ".safetensors")));
  EXPECT_FALSE(fs::exists(run_dir / "checkpoints" / ("epoch-" + std::to_string(stopped_in) + ".safetensors")));
  for (const auto& e : fs::recursive_directory_iterator(run_dir))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();

  // A key that may not change on resume is refused with one line, and the run is untouched.
  const std::string metrics_before = slurp(run_dir / "metrics.jsonl");
  Proc bad = run("train --resume " + run_dir.string() + " --set model.hidden_dim=16");
  EXPECT_EQ(bad.rc, 1) << bad.err;
  expect_one_error_line(bad, "refused resume key");
  EXPECT_EQ(lines_of(bad.err).at(0).rfind("error: --resume with --set model.hidden_dim=16: 'model.hidden_dim' cannot "
                                          "be changed on --resume",
                                          0),
            0u)
      << bad.err;
  bad = run("train --resume " + run_dir.string() + " --crf-reg 0.5");
  EXPECT_EQ(bad.rc, 1) << bad.err;
  EXPECT_NE(bad.err.find("'crf.reg' cannot be changed on --resume"), std::string::npos) << bad.err;
  EXPECT_EQ(slurp(run_dir / "metrics.jsonl"), metrics_before);

  // --resume continues from the last finished epoch (E-1) and runs epoch E.
  const Proc res = run("train --resume " + run_dir.string() + " --set train.epochs=" + std::to_string(stopped_in) +
                      " --set train.log_every=5");
  EXPECT_EQ(res.rc, 0) << res.err;
  EXPECT_EQ(count_error_lines(res.err), 0) << res.err;
  expect.push_back(stopped_in);
  EXPECT_EQ(metrics_epochs(run_dir), expect);
  EXPECT_TRUE(fs::exists(run_dir / "checkpoints" / ("epoch-" + std::to_string(stopped_in) + ".safetensors")));
}

TEST_F(TrainInterrupt, SigtermStopsToo) {
  const fs::path run_dir = dir_ / "run_term";
  const Proc r = interrupt({"train", "--config", config("run_term")}, "epoch 2/1000", SIGTERM);
  ASSERT_NE(r.rc, -2) << r.err;
  EXPECT_EQ(r.rc, 128 + SIGTERM) << r.err;
  EXPECT_EQ(count_error_lines(r.err), 1) << r.err;
  EXPECT_NE(lines_of(r.err).back().find("; resume with: timitseg train --resume " + run_dir.string()),
            std::string::npos)
      << r.err;
}

TEST_F(TrainInterrupt, SigintInFirstEpochSaysNothingToResume) {
  const fs::path run_dir = dir_ / "run_first";
  const Proc r = interrupt({"train", "--config", config("run_first")}, "epoch 1/1000", SIGINT);
  ASSERT_NE(r.rc, -2) << r.err;
  EXPECT_EQ(r.rc, 130) << r.err;
  EXPECT_EQ(count_error_lines(r.err), 1) << r.err;
  const std::string last = lines_of(r.err).back();
  // Usually still in epoch 1; a slow reader may see the signal land later.
  if (last.find("interrupted at epoch 1,") != std::string::npos) {
    EXPECT_NE(last.find("before the first epoch finished (nothing to resume); start again with the same `timitseg "
                        "train` command"),
              std::string::npos)
        << last;
    // The same command starts again in the same run folder.
    const Proc again = run("train --config " + config("run_first") + " --set train.epochs=1");
    EXPECT_EQ(again.rc, 0) << again.err;
  } else {
    EXPECT_NE(last.find("resume with: timitseg train --resume"), std::string::npos) << last;
  }
}

// In process, deterministic: a stop requested before the first step ends
// train() at epoch 1, batch 0, with nothing to resume and nothing written.
TEST_F(TrainInterrupt, StopBeforeFirstStepInProcess) {
  using namespace timitseg::model;
  using namespace timitseg::config;
using namespace timitseg::train;
  const Config cfg = Config::load(config("run_inproc"), {});
  const TrainData data = load_train_data(cfg);
  request_stop();
  std::string msg;
  int code = -1;
  try {
    train(cfg, data, false);
  } catch (const Interrupted& e) {
    msg = e.what();
    code = e.exit_code();
  }
  EXPECT_TRUE(stop_requested());
  clear_stop();
  EXPECT_FALSE(stop_requested());
  EXPECT_EQ(msg,
            "interrupted at epoch 1, batch 0, before the first epoch finished (nothing to resume); start again with "
            "the same `timitseg train` command");
  EXPECT_EQ(code, 1);  // requested by code, not by a signal
  const fs::path run_dir = dir_ / "run_inproc";
  EXPECT_TRUE(!fs::exists(run_dir / "metrics.jsonl") || slurp(run_dir / "metrics.jsonl").empty());
  // The same command then trains normally (the run folder counts as fresh).
  check_fresh_run_dir(cfg.train_run_dir);
  Config one = cfg;
  one.train_epochs = 1;
  const TrainResult r = train(one, data, false);
  EXPECT_EQ(r.epochs.size(), 1u);
}

// A run folder that cannot be written (its parent is a regular file; the
// tests may run as root, where permission bits do not stop a write): one
// error line naming the folder, exit 1, nothing trained.
TEST_F(TrainInterrupt, RunFolderThatCannotBeWrittenIsNamed) {
  const fs::path blocker = dir_ / "not_a_folder";
  std::ofstream(blocker) << "a file where a folder is needed\n";
  const std::string run_dir = (blocker / "run").string();
  const Proc r = run("train --config " + config("unused") + " --set train.run_dir=" + run_dir +
                     " --set train.epochs=1");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_EQ(count_error_lines(r.err), 1) << r.err;
  std::string line;
  for (const std::string& l : lines_of(r.err))
    if (l.rfind("error: ", 0) == 0) line = l;
  EXPECT_NE(line.find(run_dir), std::string::npos) << line;
  EXPECT_EQ(slurp(blocker), "a file where a folder is needed\n");  // left as it was
}
