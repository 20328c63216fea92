// The inference flags that evaluate, decode and align share
// (app/inference_flags.h), run as a user would: each command has exactly its
// own flags, with the ranges of settings/limits.h, at both ends of each range
// (one past an end is a usage error, exit 2, naming the flag; the end itself
// passes the parser and the command then fails on its missing checkpoint,
// exit 1).
#include <gtest/gtest.h>

#include <string>

#include "settings/limits.h"
#include "tests/support/cli.h"

namespace limits = timitseg::limits;
using testsupport::Cmd;

namespace {

// `CMD --checkpoint MISSING [--out DIR] FLAG VALUE`.
Cmd run_with(const std::string& cmd, const std::string& flag, long long value) {
  const std::string out = (testsupport::fresh_temp_dir("timitseg_inferflags") / "out").string();
  std::string args = cmd + " --checkpoint /nonexistent/ckpt.safetensors";
  if (cmd != "evaluate") args += " --out " + out;
  if (cmd == "decode") args += " /nonexistent/a.wav";
  return testsupport::run(args + " " + flag + " " + std::to_string(value));
}

void expect_range(const std::string& cmd, const std::string& flag, int lo, int hi) {
  for (const long long bad : {static_cast<long long>(lo) - 1, static_cast<long long>(hi) + 1}) {
    const Cmd r = run_with(cmd, flag, bad);
    EXPECT_EQ(r.rc, 2) << cmd << " " << flag << " " << bad << ": " << r.output;
    EXPECT_NE(r.output.find(flag), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("not in range"), std::string::npos) << r.output;
  }
  for (const long long good : {static_cast<long long>(lo), static_cast<long long>(hi)}) {
    const Cmd r = run_with(cmd, flag, good);
    EXPECT_EQ(r.rc, 1) << cmd << " " << flag << " " << good << ": " << r.output;
    EXPECT_EQ(r.output.find("not in range"), std::string::npos) << r.output;
  }
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST(InferenceFlags, RangesAreTheLimits) {
  expect_range("evaluate", "--batch-size", limits::kBatchSize.lo, limits::kBatchSize.hi);
  expect_range("align", "--batch-size", limits::kBatchSize.lo, limits::kBatchSize.hi);
  for (const char* cmd : {"evaluate", "decode", "align"})
    expect_range(cmd, "--threads", limits::kThreads.lo, limits::kThreads.hi);
}

TEST(InferenceFlags, EachCommandHasItsOwnFlagsWithTheLimitsInItsHelp) {
  const std::string batch = "INT:INT in [1 - 65535]=32", threads = "INT:INT in [0 - 1024]=0";
  const std::string bonus = "fewer; in [-100, 100] (default: the checkpoint's crf.phone_bonus)";
  const Cmd ev = testsupport::run("evaluate --help"), de = testsupport::run("decode --help"),
            al = testsupport::run("align --help");
  ASSERT_EQ(ev.rc, 0);
  ASSERT_EQ(de.rc, 0);
  ASSERT_EQ(al.rc, 0);
  EXPECT_TRUE(has(ev.output, "--batch-size " + batch) && has(ev.output, "Utterances per decoding batch"));
  EXPECT_TRUE(has(al.output, "--batch-size " + batch) && has(al.output, "Utterances per alignment batch"));
  EXPECT_FALSE(has(de.output, "--batch-size"));
  for (const Cmd* c : {&ev, &de, &al}) {
    EXPECT_TRUE(has(c->output, "--threads " + threads)) << c->output;
    EXPECT_TRUE(has(c->output, "--crf-backend") && has(c->output, "--device TEXT:{cpu,cuda,auto}")) << c->output;
  }
  for (const Cmd* c : {&ev, &de}) {
    EXPECT_TRUE(has(c->output, bonus)) << c->output;
    EXPECT_TRUE(has(c->output, "--decode TEXT:{viterbi,posterior}")) << c->output;
    EXPECT_TRUE(has(c->output, "CRF backend for Viterbi (default: cuda on the GPU")) << c->output;
  }
  EXPECT_FALSE(has(al.output, "--phone-bonus") || has(al.output, "--decode "));
  EXPECT_TRUE(has(al.output, "CRF backend (default: cuda on the GPU"));
}
