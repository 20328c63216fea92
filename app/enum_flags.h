// Command-line flags that take the words of an enum-like config key (train's
// --device and --crf-backend, evaluate's and decode's --device and --decode,
// bench train's --device and --rnn-algo) accept the words of that key's
// table (model/config_enums.h), in its order, so that a flag and its key
// cannot drift apart; the text is read into the enum with model::enum_value
// (or as the config key it stands for).
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "model/config_enums.h"

namespace timitseg::app {

// CLI11's check for E's words ("{cpu,cuda,auto}" in --help, as a literal list would show).
template <class E>
CLI::IsMember enum_words() {
  std::vector<std::string> words;
  for (const auto& entry : model::EnumNames<E>::kNames) words.emplace_back(entry.second);
  return CLI::IsMember(words);
}

}  // namespace timitseg::app
