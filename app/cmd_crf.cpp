// Subcommands of the crf layer:
//   timitseg crf replay IN.safetensors --backend NAME --out OUT.safetensors   (app/cmd_crf_replay.cpp)
//   timitseg bench crf --batch B --frames T ... --backend NAME [--json]        (app/cmd_crf_bench.cpp)
// See docs/crf.md.
#include <stdexcept>
#include <string>

#include "app/cmd_crf.h"
#include "app/commands.h"
#include "settings/limits.h"

namespace timitseg::app {

namespace crf_cmd {

void check_threads(const char* cmd, int threads) {
  if (threads < limits::kThreads.lo)
    throw std::invalid_argument(std::string(cmd) + ": --threads must be >= " + std::to_string(limits::kThreads.lo) +
                                " (0 = all hardware threads), got " + std::to_string(threads));
  if (threads > limits::kThreads.hi)
    throw std::invalid_argument(std::string(cmd) + ": --threads must be in " + limits::to_string(limits::kThreads) +
                                " (0 = all hardware threads), got " + std::to_string(threads));
}

std::unique_ptr<crf::Backend> backend_by_name(const std::string& name, int threads) {
  crf::BackendOptions options;
  options.threads = threads;
  return crf::make_backend(crf::backend_kind(name), options);  // the user's word read here
}

}  // namespace crf_cmd

void add_crf_commands(CLI::App& app) {
  CLI::App* crf = app.add_subcommand("crf", "Semi-Markov CRF tools (see docs/crf.md)");
  crf->require_subcommand(1);

  crf_cmd::add_replay_command(*crf);
  crf_cmd::add_bench_command(*bench_command(app));
}

}  // namespace timitseg::app
