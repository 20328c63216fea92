// Subcommands of the data layer. (Being written; see app/commands.h.)
#include "app/commands.h"

namespace timitseg::app {
void add_data_commands(CLI::App& app) { (void)app; }
}  // namespace timitseg::app
