// Regression tests of what the fuzz_config target (tests/fuzz/, docs/fuzzing.md)
// found: a quoted YAML key, section or value may hold a newline ("ep\nochs"),
// and errors that quoted it spanned two lines. Every error of Config::load is
// one line naming the file; the name is shown with the control character
// escaped. Inputs in tests/model/fixtures/fuzz/; expected texts written by hand.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "model/config.h"

using timitseg::model::Config;

namespace {
std::string load_error(const std::string& name) {
  const std::string path = std::string(TIMITSEG_SOURCE_DIR) + "/tests/model/fixtures/fuzz/" + name;
  try {
    Config::load(path, {});
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST(ConfigFuzzRegression, NamesWithControlCharactersStayOnOneLine) {
  struct Case { std::string file, needle; };
  const Case cases[] = {
      {"key-with-newline.yaml", ":2: unknown config key 'train.ep\\nochs'"},
      {"section-with-newline.yaml", ":1: unknown config section 'tr\\nain'"},
      {"int-value-with-newline.yaml", ":2: train.epochs: expected an integer, got '3\\nx'"},
      {"enum-value-with-newline.yaml", ": 'crf.backend' = cp\\nu is out of range: one of reference, cpu, cuda"},
  };
  for (const auto& c : cases) {
    const std::string msg = load_error(c.file);
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.file), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.needle), std::string::npos) << msg;
  }
}
