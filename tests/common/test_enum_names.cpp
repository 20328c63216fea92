// common/enum_names.h on an enum of its own: the table's words both ways, the
// list of words of the error messages, and the error naming what was read.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "common/enum_names.h"

namespace enum_names_test {

enum class Fruit { apple, pear, automatic };
TIMITSEG_ENUM_NAMES(Fruit, 3, {Fruit::pear, "pear"}, {Fruit::apple, "apple"}, {Fruit::automatic, "auto"});

}  // namespace enum_names_test

namespace {

using enum_names_test::Fruit;
namespace common = timitseg::common;

TEST(EnumNames, WordsBothWaysInTableOrder) {
  EXPECT_STREQ(common::to_string(Fruit::apple), "apple");
  EXPECT_STREQ(common::to_string(Fruit::automatic), "auto");
  Fruit f = Fruit::apple;
  ASSERT_TRUE(common::parse_enum("pear", &f));
  EXPECT_EQ(f, Fruit::pear);
  ASSERT_TRUE(common::parse_enum("auto", &f));
  EXPECT_EQ(f, Fruit::automatic);
  // the table's order, not the enum's
  EXPECT_EQ(common::enum_choices<Fruit>(), "pear, apple, auto");
  EXPECT_EQ(common::enum_words<Fruit>(), (std::vector<std::string>{"pear", "apple", "auto"}));
  static_assert(common::EnumNames<Fruit>::kNames.size() == 3);
}

TEST(EnumNames, OtherTextIsNoWordAndLeavesTheValue) {
  Fruit f = Fruit::pear;
  for (const char* text : {"Apple", "apple ", "", "automatic", "pea"}) {
    EXPECT_FALSE(common::parse_enum(text, &f)) << text;
    EXPECT_EQ(f, Fruit::pear) << text;
  }
}

TEST(EnumNames, EnumValueNamesWhatWasReadAndTheWords) {
  EXPECT_EQ(common::enum_value<Fruit>("apple", "--fruit"), Fruit::apple);
  try {
    common::enum_value<Fruit>("plum", "--fruit");
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "--fruit: 'plum' is not one of pear, apple, auto");
  }
}

}  // namespace
