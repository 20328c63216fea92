// The names of a prepared corpus's splits (train, dev, core-test, test): the
// words of prepare's files (train.safetensors, manifest.json's split rules),
// of a corpus's own split column or folder, and of evaluate's --split.
#pragma once

#include <string_view>

#include "common/enum_names.h"

namespace timitseg::data {

// In the order prepare writes the splits.
enum class SplitName { train, dev, core_test, test };
TIMITSEG_ENUM_NAMES(SplitName, 4, {SplitName::train, "train"}, {SplitName::dev, "dev"},
                    {SplitName::core_test, "core-test"}, {SplitName::test, "test"});

// Whether text is the word of split (a corpus's column, folder or split file read as written).
inline bool is_split(std::string_view text, SplitName split) {
  SplitName v{};
  return common::parse_enum(text, &v) && v == split;
}

// Whether text names a split that a corpus may assign itself: train, dev or test.
inline bool is_corpus_split(std::string_view text) {
  return is_split(text, SplitName::train) || is_split(text, SplitName::dev) || is_split(text, SplitName::test);
}

}  // namespace timitseg::data
