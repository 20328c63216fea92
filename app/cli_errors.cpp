// Usage errors with suggestions (app/cli_errors.h).
#include "app/cli_errors.h"

#include <algorithm>
#include <cctype>
#include <limits>

#include "common/levenshtein.h"

namespace timitseg::app {

namespace {

std::vector<const CLI::App*> subcommands_of(const CLI::App& app) {
  // every subcommand, also those not parsed (get_subcommands() alone lists the parsed ones)
  const std::vector<CLI::App*> all = const_cast<CLI::App&>(app).get_subcommands([](CLI::App*) { return true; });
  return {all.begin(), all.end()};
}

std::vector<std::string> subcommand_names(const CLI::App& app) {
  std::vector<std::string> out;
  for (const CLI::App* s : subcommands_of(app)) out.push_back(s->get_name());
  return out;
}

// The option names a subcommand accepts: its own and those it passes up to
// its parents (fallthrough: --log-level, --help, --version), as "--name" / "-n".
std::vector<std::string> option_names(const CLI::App& app) {
  std::vector<std::string> out;
  for (const CLI::App* a = &app; a; a = a->get_parent()) {
    for (const CLI::Option* o : a->get_options()) {
      for (const std::string& l : o->get_lnames()) out.push_back("--" + l);
      for (const std::string& s : o->get_snames()) out.push_back("-" + s);
    }
  }
  return out;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& names) {
  const std::string best = closest_name(word, names);
  return best.empty() ? "" : " (did you mean '" + best + "'?)";
}

// "timitseg train": the app and the subcommands that were parsed.
const CLI::App* deepest_parsed(const CLI::App& app, std::string* path) {
  const CLI::App* cur = &app;
  *path = "timitseg";
  for (;;) {
    const std::vector<CLI::App*> subs = cur->get_subcommands();
    if (subs.empty()) return cur;
    cur = subs.front();
    *path += " " + cur->get_name();
  }
}

}  // namespace

std::string closest_name(const std::string& word, const std::vector<std::string>& names) {
  std::string best;
  int best_d = std::numeric_limits<int>::max();
  for (const std::string& n : names) {
    const int d = levenshtein(word, n);
    if (d < best_d) best_d = d, best = n;
  }
  const int limit = std::max(2, static_cast<int>(word.size()) / 3);
  return best_d <= limit ? best : "";
}

std::string check_subcommand_words(const CLI::App& app, int argc, const char* const* argv) {
  const CLI::App* cur = &app;
  std::string path = "timitseg";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") break;
    if (a.size() > 1 && a[0] == '-') {
      // an option before the subcommand word: known here (or a parent's), else an error now,
      // so that its value is not taken for a subcommand ("--log-levl debug train")
      const std::string name = a.substr(0, a.find('='));
      const CLI::Option* opt = nullptr;
      for (const CLI::App* level = cur; level && !opt; level = level->get_parent())
        for (const CLI::Option* o : level->get_options())
          if (o->check_name(name)) opt = o;
      if (!opt)
        return "unknown option '" + name + "'" + (cur == &app ? "" : " of " + path.substr(9)) +
               did_you_mean(name, option_names(*cur)) + " (usage: " + path + " --help)";
      // its value is the next word (a flag such as --no-progress has a type size too, but expects none)
      if (opt->get_expected_min() > 0 && opt->get_type_size() > 0 && name == a) ++i;
      continue;
    }
    const std::vector<const CLI::App*> subs = subcommands_of(*cur);
    if (subs.empty()) break;  // a positional argument of a subcommand
    const auto it = std::find_if(subs.begin(), subs.end(), [&](const CLI::App* s) { return s->check_name(a); });
    if (it == subs.end())
      return "unknown subcommand '" + a + "'" + (cur == &app ? "" : " of " + path.substr(9)) +
             did_you_mean(a, subcommand_names(*cur)) + " (usage: " + path + " --help)";
    cur = *it;
    path += " " + cur->get_name();
  }
  return "";
}

std::string usage_error_message(const CLI::App& app, const CLI::ParseError& e) {
  std::string path;
  const CLI::App* where = deepest_parsed(app, &path);
  std::string what = e.what();
  std::vector<std::string> extra = app.remaining(true);
  if (extra.empty() && where != &app) extra = where->remaining(true);
  // The first word not understood: an unknown option (with its value, if any,
  // after it), else a stray positional argument.
  const auto opt = std::find_if(extra.begin(), extra.end(), [](const std::string& w) { return w.size() > 1 && w[0] == '-'; });
  if (opt != extra.end()) {
    const std::string name = opt->substr(0, opt->find('='));
    what = "unknown option '" + name + "'" + (where == &app ? "" : " of " + path.substr(9)) +
           did_you_mean(name, option_names(*where));
  } else if (!extra.empty()) {
    what = where == &app ? "unknown subcommand '" + extra.front() + "'" + did_you_mean(extra.front(), subcommand_names(app))
                         : "unexpected argument '" + extra.front() + "' for " + path.substr(9);
  }
  // A bad value of a global option (`--no-progress=maybe`, `--log-level loud`, before or after the
  // subcommand) points at the main help, which explains it, unless the subcommand has its own
  // option of that name (evaluate's --no-progress).
  auto names = [&what](const std::string& flag) {  // "--no-progress" in the message, not "--no-progress-x"
    const size_t at = what.find(flag), after = at + flag.size();
    if (at == std::string::npos) return false;
    return after == what.size() || !(std::isalnum(static_cast<unsigned char>(what[after])) || what[after] == '-');
  };
  if (where != &app && what == e.what())
    for (const CLI::Option* o : app.get_options())
      for (const std::string& l : o->get_lnames())
        if (names("--" + l) && where->get_option_no_throw("--" + l) == nullptr)
          return what + " (usage: timitseg --help)";
  return what + " (usage: " + path + " --help)";
}

}  // namespace timitseg::app
