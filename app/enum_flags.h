// Command-line flags that take the words of an enum (train's --device and
// --crf-backend, evaluate's and decode's --device and --decode, bench train's
// --device and --rnn-algo, prepare's --format, synth's --layout, ...) accept
// the words of that enum's table (common/enum_names.h; config/config_enums.h
// for the config keys, the owning room's header for the others), in its
// order, so that a flag and its enum cannot drift apart; the text is read
// into the enum here, once, with common::enum_value.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "crf/backend_kind.h"
#include "common/enum_names.h"
#include "config/config_enums.h"

namespace timitseg::app {

// CLI11's check for E's words ("{cpu,cuda,auto}" in --help, as a literal list would show).
template <class E>
CLI::IsMember enum_words() {
  return CLI::IsMember(common::enum_words<E>());
}

// An option taking E's words, read into *out with common::enum_value when given
// (the command line is where the text becomes the enum).
template <class E, class Out>
CLI::Option* add_enum_option(CLI::App* cmd, const std::string& flag, Out* out, const std::string& help) {
  return cmd
      ->add_option_function<std::string>(
          flag, [out, flag](const std::string& s) { *out = common::enum_value<E>(s, flag); }, help)
      ->check(enum_words<E>());
}

// An option taking the words of values (some of E's, in --help's order:
// "{dev,core-test,test,train}"), read into *out when given; --help shows *out's
// word as the default ("=dev").
template <class E>
CLI::Option* add_enum_option_of(CLI::App* cmd, const std::string& flag, E* out, const std::vector<E>& values,
                                const std::string& help) {
  std::vector<std::string> words;
  for (const E v : values) words.emplace_back(common::to_string(v));
  return cmd
      ->add_option_function<std::string>(
          flag, [out, flag](const std::string& s) { *out = common::enum_value<E>(s, flag); }, help)
      ->check(CLI::IsMember(words))
      ->default_str(common::to_string(*out));
}

// A comma-separated list of E's words (--format phn,csv), read into *out when
// given; --help shows *out's words as the default ("=[phn,textgrid]").
template <class E>
CLI::Option* add_enum_list_option(CLI::App* cmd, const std::string& flag, std::vector<E>* out, const std::string& help) {
  std::string shown;
  for (const E v : *out) shown += (shown.empty() ? "" : ",") + std::string(common::to_string(v));
  return cmd
      ->add_option_function<std::vector<std::string>>(
          flag,
          [out, flag](const std::vector<std::string>& words) {
            out->clear();
            for (const std::string& w : words) out->push_back(common::enum_value<E>(w, flag));
          },
          help)
      ->delimiter(',')
      ->check(enum_words<E>())
      ->default_str("[" + shown + "]");
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
