// Subcommands of the model layer. (Being written; see app/commands.h.)
#include "app/commands.h"

namespace timitseg::app {
void add_model_commands(CLI::App& app) { (void)app; }
}  // namespace timitseg::app
