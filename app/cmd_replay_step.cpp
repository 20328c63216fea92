// `timitseg replay-step DUMP`: re-runs one training step from the dump folder
// that a --check-numerics stop wrote (train/replay_step.h, docs/debugging.md).
#include <spdlog/spdlog.h>

#include <cstdio>
#include <memory>
#include <string>

#include "app/commands.h"
#include "app/enum_flags.h"
#include "settings/limits.h"
#include "train/replay_step.h"

namespace timitseg::app {

void add_replay_step_command(CLI::App& app) {
  auto o = std::make_shared<train::ReplayStepOptions>();
  CLI::App* rs = app.add_subcommand(
      "replay-step",
      "Re-run the training step of a dump folder (RUN_DIR/nonfinite-step-N, written by a --check-numerics stop) "
      "exactly: same batch, model and optimizer state, rng, step and fault (docs/debugging.md)");
  rs->add_option("dump", o->dump, "Dump folder: batch.safetensors, state.safetensors, config.yaml, report.json")
      ->required();
  add_enum_option<config::DeviceSetting>(rs, "--device", &o->device, "cpu, cuda or auto (default: the run's train.device)");
  add_backend_option(rs, "--crf-backend", &o->crf_backend, "reference, cpu or cuda (default: the run's crf.backend)");
  rs->add_option("--fixed-length", o->fixed_length,
                 "Truncate or pad every row of the batch to N frames (as debug.fixed_length; 0 = off)")
      ->check(CLI::Range(0, 1000000));
  rs->add_flag("--check-numerics", o->check_numerics,
               "Per-layer NaN/Inf checks on (they are on anyway when the run had debug.check_numerics)");
  rs->add_flag("--without-fault", o->without_fault, "Do not plant the run's --inject-fault (is the step clean without it?)");
  rs->add_option("--threads", o->threads, "CPU threads (default: the run's train.threads; results do not depend on it)")
      ->check(CLI::Range(limits::kThreads.lo, limits::kThreads.hi));
  rs->callback([o] {
    try {
      const train::ReplayStepResult r = train::replay_step(*o);
      std::printf("step %lld: loss %.9g, gradient norm %.9g, no non-finite value\n", static_cast<long long>(r.step),
                  r.result.loss, r.result.grad_norm);
    } catch (const model::NumericsError& e) {
      throw std::runtime_error("replay of " + o->dump + ": non-finite value: " + e.what());
    } catch (const model::NonFiniteError& e) {
      throw std::runtime_error("replay of " + o->dump + ": first non-finite tensor: " + e.tensor() + " (" + e.what() +
                               ")");
    }
  });
}

}  // namespace timitseg::app
