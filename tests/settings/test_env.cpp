// settings/env.h: the one table of environment variables and its parser, against
// values written here by hand, and docs/config.md's "Environment variables"
// table against the code's.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "settings/env.h"

namespace env = timitseg::env;

namespace {

// A fake environment: NAME -> value; absent names are unset.
env::Lookup fake(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* n) -> const char* {
    auto it = vars.find(n);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

// The rows of docs/config.md's "## Environment variables" table: name, takes, unset.
std::vector<std::vector<std::string>> docs_rows() {
  std::ifstream in(std::string(TIMITSEG_SOURCE_DIR) + "/docs/config.md");
  EXPECT_TRUE(in.good()) << "docs/config.md not found";
  std::vector<std::vector<std::string>> rows;
  std::string line;
  bool in_section = false;
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) in_section = line == "## Environment variables";
    if (!in_section || line.rfind("| `", 0) != 0) continue;
    std::vector<std::string> cells;
    std::string cell;
    for (size_t i = 1; i < line.size(); ++i) {
      if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '|') {
        cell += '|';
        ++i;
      } else if (line[i] == '|') {
        cells.push_back(cell.substr(1, cell.size() - 2));  // the cell without its padding spaces
        cell.clear();
      } else {
        cell += line[i];
      }
    }
    cells.resize(3);
    cells[0] = cells[0].substr(1, cells[0].size() - 2);  // `NAME`
    rows.push_back(cells);
  }
  return rows;
}

}  // namespace

TEST(Env, IntegerInRangeStrictlyParsed) {
  EXPECT_FALSE(env::integer("TIMITSEG_LONG_WINDOW_BATCH", fake({})));
  EXPECT_FALSE(env::integer("TIMITSEG_LONG_WINDOW_BATCH", fake({{"TIMITSEG_LONG_WINDOW_BATCH", ""}})));
  EXPECT_EQ(*env::integer("TIMITSEG_LONG_WINDOW_BATCH", fake({{"TIMITSEG_LONG_WINDOW_BATCH", "1"}})), 1);
  EXPECT_EQ(*env::integer("TIMITSEG_LONG_WINDOW_BATCH", fake({{"TIMITSEG_LONG_WINDOW_BATCH", "64"}})), 64);
  for (const std::string bad : {"0", "65", "-1", "x", "4x", " 4", "2.5", "99999999999999999999"})
    EXPECT_EQ(error_of([&] { env::integer("TIMITSEG_LONG_WINDOW_BATCH", fake({{"TIMITSEG_LONG_WINDOW_BATCH", bad}})); }),
              "TIMITSEG_LONG_WINDOW_BATCH must be a number of windows in [1, 64], got '" + bad + "'");
}

TEST(Env, NumberAndWordAndText) {
  const char* mib = "TIMITSEG_CONFIDENCE_UTTERANCE_MIB";
  EXPECT_DOUBLE_EQ(*env::number(mib, fake({{mib, "0.5"}})), 0.5);
  for (const std::string bad : {"0", "-3", "inf", "nan", "1e", "MiB"})
    EXPECT_EQ(error_of([&] { env::number(mib, fake({{mib, bad}})); }),
              std::string(mib) + " must be a positive number of MiB, got '" + bad + "'");
  EXPECT_EQ(*env::word("TIMITSEG_CUDA_RING", fake({{"TIMITSEG_CUDA_RING", "global"}})), "global");
  EXPECT_EQ(error_of([&] { env::word("TIMITSEG_CUDA_RING", fake({{"TIMITSEG_CUDA_RING", "Global"}})); }),
            "TIMITSEG_CUDA_RING must be 'shared' or 'global', got 'Global'");
  EXPECT_EQ(*env::text("TIMITSEG_TEST_ENOSPC_PATH", fake({{"TIMITSEG_TEST_ENOSPC_PATH", "/x y"}})), "/x y");
}

TEST(Env, LauncherVariablesReadAMalformedValueAsUnset) {
  EXPECT_EQ(*env::integer("LOCAL_RANK", fake({{"LOCAL_RANK", "3"}})), 3);
  EXPECT_FALSE(env::integer("LOCAL_RANK", fake({{"LOCAL_RANK", "three"}})));
  EXPECT_FALSE(env::integer("LOCAL_RANK", fake({{"LOCAL_RANK", "-1"}})));
}

TEST(Env, OnlyTheTablesVariablesWithTheirTypes) {
  EXPECT_THROW(env::raw("HOME", fake({{"HOME", "/"}})), std::logic_error);
  EXPECT_THROW(env::integer("TIMITSEG_CUDA_RING", fake({})), std::logic_error);
  EXPECT_THROW(env::word("TIMITSEG_LONG_WINDOW_BATCH", fake({})), std::logic_error);
}

TEST(Env, DocsTableListsTheCodeTable) {
  const auto rows = docs_rows();
  ASSERT_EQ(rows.size(), env::knobs().size()) << "docs/config.md's table and settings/env.cpp's differ in length";
  for (size_t i = 0; i < rows.size(); ++i) {
    const env::Knob& k = env::knobs()[i];
    EXPECT_EQ(rows[i][0], k.name) << "row " << i;
    EXPECT_EQ(rows[i][1], k.takes) << k.name;
    EXPECT_EQ(rows[i][2], k.fallback) << k.name;
  }
}
