// Command-line flags that take the words of an enum-like config key (train's
// --device and --crf-backend, evaluate's and decode's --device and --decode,
// bench train's --device and --rnn-algo) accept the words of that key's
// table (config/config_enums.h), in its order, so that a flag and its key
// cannot drift apart; the text is read into the enum with config::enum_value
// (or as the config key it stands for). A flag without a key (align's
// --transcript) has its table there too and is read the same way.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "crf/semicrf.h"
#include "config/config_enums.h"

namespace timitseg::app {

// CLI11's check for E's words ("{cpu,cuda,auto}" in --help, as a literal list would show).
template <class E>
CLI::IsMember enum_words() {
  std::vector<std::string> words;
  for (const auto& entry : config::EnumNames<E>::kNames) words.emplace_back(entry.second);
  return CLI::IsMember(words);
}

// An option taking E's words, read into *out with config::enum_value when given
// (the command line is where the text becomes the enum).
template <class E, class Out>
CLI::Option* add_enum_option(CLI::App* cmd, const std::string& flag, Out* out, const std::string& help) {
  return cmd
      ->add_option_function<std::string>(
          flag, [out, flag](const std::string& s) { *out = config::enum_value<E>(s, flag); }, help)
      ->check(enum_words<E>());
}

// --crf-backend / --backend: the CRF backend's words (crf::backend_kind_names), read into *out when given.
template <class Out>
CLI::Option* add_backend_option(CLI::App* cmd, const std::string& flag, Out* out, const std::string& help) {
  return cmd
      ->add_option_function<std::string>(
          flag, [out](const std::string& s) { *out = crf::backend_kind(s); }, help)
      ->check(CLI::IsMember(crf::backend_kind_names()));
}

}  // namespace timitseg::app
