// common/progress.h, off a terminal (stderr captured to a file, so not a TTY):
// one plain line at each 10% of progress, the last one at 100%; no output at
// all when disabled; counts stay exact when worker threads advance it.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/progress.h"

using namespace timitseg;

namespace {
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}
}  // namespace

TEST(Progress, PlainLinesAtEachTenthOffATerminal) {
  Progress::set_enabled(true);
  testing::internal::CaptureStderr();
  {
    Progress p("prepare", 20, "utt");
    for (int i = 0; i < 20; ++i) p.advance();
  }  // the destructor finishes; 100% was already printed, so no repeat
  const auto lines = lines_of(testing::internal::GetCapturedStderr());
  // one line per decile 0..10 reached: done = 1 (5%), 2 (10%), ..., 20 (100%)
  ASSERT_EQ(lines.size(), 11u);
  for (const auto& l : lines) EXPECT_EQ(l.rfind("prepare: ", 0), 0u) << l;
  EXPECT_NE(lines.front().find("5% 1/20 utt"), std::string::npos) << lines.front();
  EXPECT_NE(lines[5].find("50% 10/20 utt"), std::string::npos) << lines[5];
  EXPECT_NE(lines.back().find("100% 20/20 utt"), std::string::npos) << lines.back();
}

TEST(Progress, FinishPrintsTheFinalCountAndPostfix) {
  Progress::set_enabled(true);
  testing::internal::CaptureStderr();
  {
    Progress p("eval", 10, "batch");
    p.advance(3);
    p.set_postfix("loss 1.5");
    p.finish();  // stopped early: the final line shows where it stopped
  }
  const auto lines = lines_of(testing::internal::GetCapturedStderr());
  ASSERT_GE(lines.size(), 2u);
  EXPECT_NE(lines[0].find("30% 3/10 batch"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("30% 3/10 batch"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("loss 1.5"), std::string::npos) << lines[1];
}

TEST(Progress, DisabledPrintsNothing) {
  Progress::set_enabled(false);
  testing::internal::CaptureStderr();
  {
    Progress p("quiet", 5);
    for (int i = 0; i < 5; ++i) p.advance();
  }
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  Progress::set_enabled(true);
}

TEST(Progress, ConcurrentAdvancesCountExactly) {
  Progress::set_enabled(true);
  testing::internal::CaptureStderr();
  {
    Progress p("work", 4000, "it");
    std::vector<std::thread> ts;
    for (int k = 0; k < 4; ++k)
      ts.emplace_back([&] {
        for (int i = 0; i < 1000; ++i) p.advance();
      });
    for (auto& t : ts) t.join();
  }
  const auto lines = lines_of(testing::internal::GetCapturedStderr());
  ASSERT_FALSE(lines.empty());
  EXPECT_LE(lines.size(), 11u);
  EXPECT_NE(lines.back().find("100% 4000/4000 it"), std::string::npos) << lines.back();
}
