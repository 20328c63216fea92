// The environment variables the program reads: one table (each knob's name,
// type, what it takes, default and a line of documentation) and one parser.
// Every read of the environment by the product goes through the getters
// below; docs/config.md "Environment variables" lists the same table
// (tests/settings/test_env.cpp compares the two).
//
// A set but malformed value is one error line, std::invalid_argument
// "NAME must be TAKES, got 'VALUE'"; unset and empty read as unset. The
// launcher's variables (mpirun, srun, PMI, LOCAL_RANK) are the exception:
// the launcher, not the user, writes them, and a value that is not a count
// reads as unset (the run is then one process), as `dist::detect_launch`
// documents.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace timitseg::env {

enum class Type { integer, number, word, text };

struct Knob {
  const char* name;
  Type type;
  double min = 0, max = 0;                // integer, number: the range, both ends included
  std::vector<std::string> words;         // word: the values it takes
  const char* takes;                      // what it takes, in words (errors and docs/config.md)
  const char* fallback;                   // what unset means
  const char* doc;                        // one line: what it is for, who sets it
  bool lenient = false;                   // a malformed value reads as unset (the launcher's variables)
};

// The table, in the order of docs/config.md's.
const std::vector<Knob>& knobs();

// The knob called `name`; std::logic_error if the table has none (a read of
// a variable that is not in the table is a programming error).
const Knob& knob(const char* name);

// How a variable's value is looked up: std::getenv unless a test gives its own.
using Lookup = std::function<const char*(const char*)>;

// The raw value of a knob of any type, nullopt when unset or empty.
std::optional<std::string> raw(const char* name, const Lookup& lookup = {});
// The typed getters: nullopt when unset or empty; a value outside the knob's
// range or words throws (or reads as unset for a lenient knob). Asking for a
// knob with another type is a std::logic_error.
std::optional<long long> integer(const char* name, const Lookup& lookup = {});
std::optional<double> number(const char* name, const Lookup& lookup = {});
std::optional<std::string> word(const char* name, const Lookup& lookup = {});
std::optional<std::string> text(const char* name, const Lookup& lookup = {});

}  // namespace timitseg::env
