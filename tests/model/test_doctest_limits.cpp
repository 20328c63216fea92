// TIMITSEG_DOCTEST_MAX_EPOCHS, the one switch by which the documentation test
// (tests/docs/run_doc_blocks.py) shortens training (config::apply_doctest_limits):
// unset or empty changes nothing, N caps train.epochs at N (never raises it),
// and a malformed value is an error naming the variable.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "config/config.h"

using timitseg::config::apply_doctest_limits;
using timitseg::config::Config;

namespace {

constexpr const char* kVar = "TIMITSEG_DOCTEST_MAX_EPOCHS";

// Sets (or unsets, with nullopt) the variable for one scope and restores the
// value the process had.
class EnvGuard {
 public:
  explicit EnvGuard(const std::optional<std::string>& value) {
    if (const char* old = std::getenv(kVar)) old_ = old;
    if (value) ::setenv(kVar, value->c_str(), 1);
    else ::unsetenv(kVar);
  }
  ~EnvGuard() {
    if (old_) ::setenv(kVar, old_->c_str(), 1);
    else ::unsetenv(kVar);
  }

 private:
  std::optional<std::string> old_;
};

Config with_epochs(int epochs) {
  Config c;
  c.train_epochs = epochs;
  return c;
}

}  // namespace

TEST(DoctestLimits, UnsetOrEmptyChangesNothing) {
  for (const std::optional<std::string>& v : {std::optional<std::string>(), std::optional<std::string>("")}) {
    EnvGuard g(v);
    Config c = with_epochs(30);
    apply_doctest_limits(c);
    EXPECT_EQ(c.train_epochs, 30);
  }
}

TEST(DoctestLimits, CapsEpochsButNeverRaisesThem) {
  {
    EnvGuard g(std::string("1"));
    Config c = with_epochs(30);
    apply_doctest_limits(c);
    EXPECT_EQ(c.train_epochs, 1);
  }
  {
    EnvGuard g(std::string("3"));
    Config c = with_epochs(2);
    apply_doctest_limits(c);
    EXPECT_EQ(c.train_epochs, 2);
    Config d = with_epochs(7);
    apply_doctest_limits(d);
    EXPECT_EQ(d.train_epochs, 3);
  }
}

TEST(DoctestLimits, MalformedValueNamesTheVariable) {
  for (const std::string bad : {"0", "-1", "x", "1x", " 1", "2.5"}) {
    EnvGuard g(bad);
    Config c = with_epochs(30);
    try {
      apply_doctest_limits(c);
      ADD_FAILURE() << "no error for " << kVar << "='" << bad << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), std::string(kVar) +
                                           " must be an integer >= 1 (the epoch cap of the documentation test; unset "
                                           "it for normal training), got '" + bad + "'");
    }
    EXPECT_EQ(c.train_epochs, 30) << "unchanged after an error";
  }
}
