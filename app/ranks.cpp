// Training on several processes, the app's side (docs/multigpu.md): the
// communicator of a launch by mpirun or srun, made before anything else of
// `train`, and the refusal of every other subcommand on several ranks.
#include <spdlog/spdlog.h>

#include <cstdio>
#include <string>

#include "app/commands.h"
#include "common/dist.h"
#include "common/progress.h"

namespace timitseg::app {

void start_ranks() {
  dist::init_world();
  const dist::Communicator& w = dist::world();
  if (w.size() > 1 && w.rank() != 0) {
    // Rank 0 speaks for the run; the others print their errors only, tagged.
    if (spdlog::get_level() < spdlog::level::err) spdlog::set_level(spdlog::level::err);
    spdlog::set_pattern("[%H:%M:%S] [rank " + std::to_string(w.rank()) + "] [%^%l%$] %v");
    Progress::set_enabled(false);
  }
}

std::string refuse_several_ranks(int argc, char** argv) {
  const dist::Launch l = dist::detect_launch();
  if (l.size == 1) return "";
  std::vector<std::string> words;  // the words that are not options (nor --log-level's value)
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--log-level") {
      ++i;
      continue;
    }
    if (!a.empty() && a[0] != '-') words.push_back(a);
  }
  const std::string sub = words.empty() ? "" : words[0];
  if (sub == "train" || (sub == "bench" && words.size() > 1 && words[1] == "train")) return "";
  return "`timitseg " + (sub.empty() ? std::string("...") : sub) + "` runs in one process; only `train` and " +
         "`bench train` run on several ranks (this is rank " + std::to_string(l.rank) + " of " +
         std::to_string(l.size) + ", started by " + common::to_string(l.launcher) + "): run it without the launcher";
}

}  // namespace timitseg::app
