// Subcommands of the crf layer. (Being written; see app/commands.h.)
#include "app/commands.h"

namespace timitseg::app {
void add_crf_commands(CLI::App& app) { (void)app; }
}  // namespace timitseg::app
