// Config errors a user can act on (issue 13): duplicate keys anywhere name the
// file, the key and both lines; a value of the wrong type names the line, the
// key and the type expected; only true/false are booleans; `train --resume
// --set` changes only the keys documented as changeable. The expected texts
// are written out in full here (the oracle is the documented message format,
// and the line numbers are counted by hand in each YAML text).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "config/config.h"
#include "tests/support/cli.h"

namespace fs = std::filesystem;
using timitseg::config::Config;

namespace {

std::string yaml_file(const std::string& text) {
  static int n = 0;
  const fs::path p =
      fs::temp_directory_path() / ("timitseg_cfgerr_" + std::to_string(::getpid()) + "_" + std::to_string(n++) + ".yaml");
  std::ofstream(p) << text;
  return p.string();
}

// The message of Config::load's std::invalid_argument, "" when it loads.
// `path` receives the file's name (messages start with it).
std::string load_error(const std::string& text, std::string* path = nullptr,
                       const std::vector<std::string>& sets = {}) {
  const std::string p = yaml_file(text);
  if (path) *path = p;
  std::string msg;
  try {
    Config::load(p, sets);
  } catch (const std::invalid_argument& e) {
    msg = e.what();
  }
  fs::remove(p);
  return msg;
}

// Config::load's message for TEXT is FILE + `after_path` (FILE: the temporary file).
void expect_error(const std::string& text, const std::string& after_path, const std::vector<std::string>& sets = {}) {
  std::string p;
  const std::string e = load_error(text, &p, sets);
  EXPECT_EQ(e, p + after_path) << "config:\n" << text;
}

}  // namespace

TEST(ConfigErrors, DuplicateKeyInOneMappingNamesBothLines) {
  std::string p;
  const std::string e = load_error("data:\n  workdir: w\ntrain:\n  epochs: 30\n  lr: 0.1\n  epochs: 1\n", &p);
  EXPECT_EQ(e, p + ":6: duplicate key 'train.epochs' (first at line 4, again at line 6); each key may appear only once");
}

TEST(ConfigErrors, SecondSectionNamesBothLines) {
  std::string p;
  const std::string e =
      load_error("train:\n  epochs: 3\nmodel:\n  num_layers: 1\ntrain:\n  lr: 0.1\n", &p);
  EXPECT_EQ(e, p + ":5: duplicate section 'train' (first at line 1, again at line 5); each key may appear only once");
  // Repeats with the same value are refused too (the file is ambiguous to read).
  const std::string e2 = load_error("crf:\n  reg: 0.1\n  reg: 0.1\n", &p);
  EXPECT_EQ(e2, p + ":3: duplicate key 'crf.reg' (first at line 2, again at line 3); each key may appear only once");
  // Distinct keys of different sections with the same leaf are fine.
  EXPECT_EQ(load_error("train:\n  epochs: 3\ncrf:\n  reg: 0.1\nmodel:\n  dropout: 0.1\n"), "");
}

TEST(ConfigErrors, DuplicateInFlowMappingAndAfterComments) {
  std::string p;
  // Flow style on one line: both on line 2.
  const std::string e = load_error("# comment\ntrain: {epochs: 3, epochs: 4}\n", &p);
  EXPECT_EQ(e, p + ":2: duplicate key 'train.epochs' (first at line 2, again at line 2); each key may appear only once");
}

TEST(ConfigErrors, WrongTypeNamesLineKeyAndType) {
  expect_error("data:\n  workdir: w\ntrain:\n  lr: 0.1\n  epochs: abc\n", ":5: train.epochs: expected an integer, got 'abc'");
  expect_error("train:\n  epochs: 2.5\n", ":2: train.epochs: expected an integer, got '2.5'");
  expect_error("model:\n  dropout: high\n", ":2: model.dropout: expected a number, got 'high'");
  expect_error("train:\n  lr: nan\n", ":2: train.lr: expected a finite number, got 'nan'");
  expect_error("train:\n  seed: -4\n", ":2: train.seed: expected a non-negative integer, got '-4'");
  expect_error("train:\n  epochs: 99999999999\n", ":2: train.epochs: expected an integer in [-2147483648, 2147483647], got '99999999999'");
  expect_error("train:\n  lr: [1, 2]\n", ":2: train.lr: expected a single value, got a list");
  // The same message format for --set (no line: the origin is the option).
  EXPECT_EQ(load_error("", nullptr, {"train.epochs=abc"}), "--set train.epochs=abc: train.epochs: expected an integer, got 'abc'");
}

TEST(ConfigErrors, OnlyTrueAndFalseAreBooleans) {
  std::string p;
  for (const std::string v : {"yes", "no", "on", "off", "y", "n", "True", "1"}) {
    expect_error("model:\n  dropout: 0.1\nfeatures:\n  cmvn: " + v + "\n", ":4: features.cmvn: expected true or false (yes/no/on/off are not booleans here), got '" + v + "'");
  }
  EXPECT_EQ(load_error("", &p, {"debug.check_numerics=on"}),
            "--set debug.check_numerics=on: debug.check_numerics: expected true or false (yes/no/on/off are not "
            "booleans here), got 'on'");
  const Config f = Config::load(yaml_file("features:\n  cmvn: false\ndebug:\n  check_numerics: true\n"), {});
  EXPECT_FALSE(f.features_cmvn);
  EXPECT_TRUE(f.debug_check_numerics);
  const Config t = Config::load(yaml_file("features:\n  cmvn: true\n"), {"debug.check_numerics=false"});
  EXPECT_TRUE(t.features_cmvn);
  EXPECT_FALSE(t.debug_check_numerics);
}

TEST(ConfigErrors, UnknownKeysNameTheirLine) {
  std::string p;
  const std::string e = load_error("train:\n  lr: 0.1\n  learning_rate: 0.1\n", &p);
  EXPECT_EQ(e.rfind(p + ":3: unknown config key 'train.learning_rate'", 0), 0u) << e;
}

// `train --help`'s --resume entry is made from the same list (not a copy by hand): every key is named.
TEST(ConfigErrors, ResumeHelpNamesEveryResumableKey) {
  const testsupport::Cmd h = testsupport::run("train --help");
  ASSERT_EQ(h.rc, 0) << h.output;
  const size_t at = h.output.find("--resume TEXT");
  ASSERT_NE(at, std::string::npos) << h.output;
  const std::string entry = h.output.substr(at, h.output.find("\n  --", at) - at);
  for (const std::string& k : Config::resumable_keys()) EXPECT_NE(entry.find(k), std::string::npos) << k << ": " << entry;
}

// The keys that `train --resume --set` may change, as listed in docs/config.md.
TEST(ConfigErrors, ResumeAcceptsOnlyDocumentedKeys) {
  const std::vector<std::string> documented = {"train.epochs",         "train.log_every",       "train.threads",
                                               "debug.check_numerics", "debug.drift_threshold", "train.device",
                                               "crf.backend",          "train.rnn_algo",        "train.keep_checkpoints",
                                               "train.dist_timeout",   "data.workdir"};
  std::vector<std::string> got = Config::resumable_keys();
  std::vector<std::string> want = documented;
  std::sort(got.begin(), got.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);

  Config c;
  c.set_on_resume("train.epochs=7", "o");
  c.set_on_resume("train.log_every=3", "o");
  c.set_on_resume("train.threads=2", "o");
  c.set_on_resume("debug.check_numerics=false", "o");
  c.set_on_resume("debug.drift_threshold=4.5", "o");
  c.set_on_resume("train.device=auto", "o");
  c.set_on_resume("crf.backend=reference", "o");
  c.set_on_resume("train.rnn_algo=fused", "o");
  EXPECT_EQ(c.train_epochs, 7);
  EXPECT_EQ(c.train_log_every, 3);
  EXPECT_EQ(c.train_threads, 2);
  EXPECT_FALSE(c.debug_check_numerics);
  EXPECT_DOUBLE_EQ(c.debug_drift_threshold, 4.5);
  EXPECT_EQ(c.train_device, timitseg::config::DeviceSetting::automatic);
  EXPECT_EQ(c.crf_backend, timitseg::config::CrfBackendSetting::reference);
  EXPECT_EQ(c.train_rnn_algo, timitseg::config::RnnAlgo::fused);

  // Every other valid key is refused, naming it, and leaves the config as it was.
  int refused = 0;
  for (const std::string& key : Config::keys()) {
    if (std::find(documented.begin(), documented.end(), key) != documented.end()) continue;
    const nlohmann::json before = c.to_json();
    std::string msg;
    try {
      c.set_on_resume(key + "=1", "--resume with --set " + key + "=1");
    } catch (const std::invalid_argument& e) {
      msg = e.what();
    }
    EXPECT_EQ(msg.rfind("--resume with --set " + key + "=1: '" + key + "' cannot be changed on --resume", 0), 0u)
        << key << ": " << msg;
    EXPECT_EQ(c.to_json(), before) << key;
    ++refused;
  }
  EXPECT_EQ(refused, static_cast<int>(Config::keys().size() - documented.size()));
  // An unknown key still gets the unknown-key message; a bad value its type error.
  std::string msg;
  try {
    c.set_on_resume("train.epoch=3", "o");
  } catch (const std::invalid_argument& e) {
    msg = e.what();
  }
  EXPECT_EQ(msg, "o: unknown config key 'train.epoch' (did you mean 'train.epochs'?)");
  try {
    c.set_on_resume("train.epochs=x", "o");
  } catch (const std::invalid_argument& e) {
    msg = e.what();
  }
  EXPECT_EQ(msg, "o: train.epochs: expected an integer, got 'x'");
}

// The debug.* strings, each read by one parser (Config::inject_nonfinite,
// inject_exit, inject_fault) that validate() and the train loop share: the
// values against texts written out by hand, and validate() refusing exactly
// the texts the parser refuses, with the key's one-line message.
TEST(ConfigErrors, DebugStringsHaveOneParser) {
  Config c;
  ASSERT_TRUE(c.inject_nonfinite().has_value());  // empty: no injection
  EXPECT_EQ(c.inject_nonfinite()->epoch, 0);
  EXPECT_EQ(c.inject_nonfinite()->batch, 0);
  c.debug_inject_nonfinite = "3:17";
  ASSERT_TRUE(c.inject_nonfinite().has_value());
  EXPECT_EQ(c.inject_nonfinite()->epoch, 3);
  EXPECT_EQ(c.inject_nonfinite()->batch, 17);
  EXPECT_NO_THROW(c.validate());
  for (const char* bad : {"0:1", "1:0", "3-7", "3:", ":4", "3:7x", "x", "2:3:4"}) {
    c.debug_inject_nonfinite = bad;
    EXPECT_FALSE(c.inject_nonfinite().has_value()) << bad;
    try {
      c.validate();
      ADD_FAILURE() << "validate() accepted debug.inject_nonfinite " << bad;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("'debug.inject_nonfinite' = " + std::string(bad) + " is out of range"),
                std::string::npos) << e.what();
    }
  }
  c.debug_inject_nonfinite.clear();
  c.debug_inject_exit = "all:5:kill";
  EXPECT_TRUE(c.inject_exit().all);
  EXPECT_EQ(c.inject_exit().step, 5);
  EXPECT_EQ(c.inject_exit().action, timitseg::config::ExitAction::kill);
  c.debug_inject_exit = "1:0:kill";
  EXPECT_LT(c.inject_exit().rank, 0);
  EXPECT_THROW(c.validate(), std::invalid_argument);
  c.debug_inject_exit.clear();
  c.model_num_layers = 2;
  c.debug_inject_fault = "layer=lstm.1.bwd,pass=backward,step=4,value=inf";
  const timitseg::config::FaultSpec f = c.inject_fault();
  EXPECT_EQ(f.layer, "lstm.1.bwd");
  EXPECT_EQ(f.pass, timitseg::config::Pass::backward);
  EXPECT_EQ(f.step, 4);
  EXPECT_TRUE(std::isinf(f.value));
  c.model_num_layers = 1;  // no lstm.1 in a one-layer model
  EXPECT_THROW(c.inject_fault(), std::invalid_argument);
  EXPECT_THROW(c.validate(), std::invalid_argument);
}

TEST(ConfigErrors, DataCmvnModesAndTheirRefusals) {
  auto error_of = [](const std::string& text) {
    const std::string p = yaml_file(text);
    std::string msg;
    try {
      Config::load(p, {}).validate();
    } catch (const std::invalid_argument& e) {
      msg = e.what();
    }
    fs::remove(p);
    return msg;
  };
  for (const std::string m : {"global", "utterance", "speaker"}) {
    EXPECT_EQ(error_of("data:\n  cmvn: " + m + "\n"), "") << m;
    const std::string p = yaml_file("data:\n  cmvn: " + m + "\n");
    EXPECT_EQ(timitseg::config::to_string(Config::load(p, {}).data_cmvn), m);
    fs::remove(p);
  }
  EXPECT_NE(error_of("data:\n  cmvn: speakers\n").find("one of global, utterance, speaker"), std::string::npos);
  EXPECT_NE(error_of("data:\n  cmvn: speaker\nfeatures:\n  cmvn: false\n").find("global while features.cmvn is false"),
            std::string::npos);
}
