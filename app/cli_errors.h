// Usage errors of the command line (docs/cli.md, "Errors"): an unknown
// subcommand or option is one line naming the word and, when a valid name is
// near it, "did you mean ..." (edit distance, as config keys get theirs in
// config/config.cpp); main() prints it and exits 2.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace timitseg::app {

// The name of `names` nearest to `word` by edit distance (common/levenshtein.h),
// or "" when none is within max(2, |word| / 3) edits.
std::string closest_name(const std::string& word, const std::vector<std::string>& names);

// Checks the subcommand words of argv before parsing: the first word that is
// not an option must name a subcommand of `app` (and, for `bench` and `crf`,
// the next one a subcommand of theirs). Returns "" when they do, else the
// error ("unknown subcommand 'trian' (did you mean 'train'?); usage: ...").
// Done before CLI11 parses so that `timitseg NAME --help` with an unknown NAME
// is an error, not the main help.
std::string check_subcommand_words(const CLI::App& app, int argc, const char* const* argv);

// The one-line message for a CLI11 parse error after app.parse(): unknown
// options get "did you mean" among the options of the subcommand they were
// given to; other errors keep CLI11's text. Ends with the usage hint
// "(usage: timitseg SUB --help)".
std::string usage_error_message(const CLI::App& app, const CLI::ParseError& e);

}  // namespace timitseg::app
