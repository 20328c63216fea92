// Choice words as enums: one table of names per enum, written beside the enum
// in the room that owns it with TIMITSEG_ENUM_NAMES, so the command line, the
// config and the files keep their words while nothing below the CLI compares
// strings (scripts/check_choice_words.py, ctest build.check_choice_words).
//
//   enum class Voice { tones, flite, espeak };
//   TIMITSEG_ENUM_NAMES(Voice, 3, {Voice::tones, "tones"}, {Voice::flite, "flite"}, {Voice::espeak, "espeak"});
//
// The macro defines enum_names(E) in E's namespace (found by argument-dependent
// lookup); EnumNames<E>::kNames is that table. to_string gives an enum's word,
// parse_enum reads one back (false for any other text), enum_choices lists the
// words ("reference, cpu, cuda, auto") in the order of the error messages, and
// enum_value throws the error naming WHAT and the words. A new value is one
// line of its table.
#pragma once

#include <array>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#define TIMITSEG_ENUM_NAMES(E, N, ...)                                                  \
  constexpr std::array<std::pair<E, const char*>, N> enum_names(E) { return {{__VA_ARGS__}}; } \
  static_assert(N > 0, #E " has words")

namespace timitseg::common {

// kNames: every value of E with its word, in message order.
template <class E>
struct EnumNames {
  static constexpr auto kNames = enum_names(E{});
};

// The word of v ("auto" for automatic).
template <class E, class = decltype(enum_names(E{}))>
const char* to_string(E v) {
  for (const auto& [e, name] : EnumNames<E>::kNames)
    if (e == v) return name;
  return "?";  // unreachable: every value has a name
}

// text's value, when it is one of E's words exactly (case-sensitive).
template <class E>
bool parse_enum(std::string_view text, E* out) {
  for (const auto& [e, name] : EnumNames<E>::kNames)
    if (text == name) {
      *out = e;
      return true;
    }
  return false;
}

// "reference, cpu, cuda, auto": E's words in table order.
template <class E>
std::string enum_choices() {
  std::string s;
  for (const auto& [e, name] : EnumNames<E>::kNames) s += (s.empty() ? "" : ", ") + std::string(name);
  return s;
}

// E's words in table order (a CLI11 IsMember list, a --help line).
template <class E>
std::vector<std::string> enum_words() {
  std::vector<std::string> words;
  for (const auto& [e, name] : EnumNames<E>::kNames) words.emplace_back(name);
  return words;
}

// text's value for text that a caller has already checked (a CLI11 IsMember
// list, a resolved choice), or that comes from a file; any other text throws
// std::invalid_argument "WHAT: 'TEXT' is not one of WORD, WORD".
template <class E>
E enum_value(std::string_view text, const std::string& what) {
  E v{};
  if (!parse_enum(text, &v))
    throw std::invalid_argument(what + ": '" + std::string(text) + "' is not one of " + enum_choices<E>());
  return v;
}

}  // namespace timitseg::common
