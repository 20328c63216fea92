// timitseg: phoneme segmentation with a semi-Markov CRF. Entry point.
#include <spdlog/cfg/helpers.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <exception>
#include <string>

#include "app/cli_errors.h"
#include "app/commands.h"
#include "common/dist.h"
#include "common/progress.h"
#include "common/version.h"
#include "data/espeak_tts.h"
#include "data/flite_tts.h"
#include "common/interrupt.h"

namespace timitseg::app {

CLI::App* bench_command(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    if (sub->get_name() == "bench") return sub;
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks that print timings; `bench crf`: the semi-CRF backends");
  bench->require_subcommand(1);
  return bench;
}

}  // namespace timitseg::app

// `timitseg --version`: "..., with libflite": `synth --voice flite` works (scripts/demo.sh
// looks for these words); "with libespeak-ng 1.51": `synth --voice espeak` and `align --g2p
// espeak` work; then MPI, NCCL and CUDA with its architectures, as the configure step found them.
static std::string version_text() {
  const std::string archs = timitseg::cuda_architectures();
  return std::string("timitseg ") + timitseg::version() + " (commit " + timitseg::git_commit() + ", " +
         timitseg::build_type() + " build, " + (timitseg::data::flite_built_in() ? "with" : "without") +
         " libflite, " +
         (timitseg::data::espeak_built_in() ? "with libespeak-ng " + timitseg::data::espeak_version()
                                            : std::string("without libespeak-ng")) +
         ", " + (timitseg::dist::mpi_built_in() ? "with" : "without") + " MPI, " +
         (timitseg::nccl_built_in() ? "with" : "without") + " NCCL, " +
         (archs.empty() ? "without CUDA" : "with CUDA for architectures " + archs) + ")";
}

// The global options (--version, --log-level, --no-progress) and the logger; the level is
// set from `log_level` (which must outlive `app`) once the line is parsed.
static void add_global_options(CLI::App& app, std::string& log_level) {
  app.require_subcommand(1);
  // Global options (--log-level) are accepted after the subcommand too
  // (`timitseg evaluate --log-level debug ...`): the subcommands, made after
  // this line, inherit it and pass what they do not know up to this app.
  app.fallthrough();
  app.set_version_flag("--version", version_text());
  app.add_option("--log-level", log_level,
                 "Logging verbosity: trace, debug, info, warn, error, critical, off (critical and off: no log lines, nor "
                 "decode's and align's error line per bad input; the one error line of a failure, which names them, "
                 "is printed at every level) (before or after the subcommand)")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}))
      ->capture_default_str();

  auto logger = spdlog::stderr_color_mt("timitseg");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("[%H:%M:%S] [%^%l%$] %v");
  static bool no_progress = false;
  app.add_flag("--no-progress", no_progress,
               "No progress bars (on a terminal a bar redrawn in place, otherwise a plain line at each 10 % of the "
               "work, on stderr): for logs of batch jobs (before or after the subcommand)");
  app.parse_complete_callback([&log_level] {
    spdlog::set_level(spdlog::level::from_str(log_level));
    if (no_progress) timitseg::Progress::set_enabled(false);
  });
}

// Every subcommand, in the order of the main help.
static void add_commands(CLI::App& app) {
  timitseg::app::add_crf_commands(app);
  timitseg::app::add_data_commands(app);
  timitseg::app::add_model_commands(app);
  timitseg::app::add_bench_train_command(app);
  timitseg::app::add_replay_step_command(app);
  timitseg::app::add_report_command(app);
  timitseg::app::add_compare_command(app);
  timitseg::app::add_export_command(app);
  timitseg::app::add_align_command(app);
  timitseg::app::add_augment_command(app);
}

// Parses the line and runs the subcommand it names (the callbacks run inside
// parse()); every failure becomes the exit status and one line (see main).
// Several processes (train, bench train under mpirun / srun): a failure the
// ranks agreed on (dist::agree) is printed by the rank that had it and ends
// every rank normally; any other failure is printed with its rank and ends
// the whole job at once (MPI_Abort), so that no rank waits for it.
static int parse_and_run(CLI::App& app, int argc, char** argv) {
  using timitseg::dist::world;
  try {
    app.parse(argc, argv);
  } catch (const timitseg::dist::PeerFailure& e) {  // another rank failed and printed why
    timitseg::dist::finalize_world();
    return e.exit_code();
  } catch (const CLI::Success& e) {  // --help, --help-all, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line naming the word not understood, with "did you mean" (app/cli_errors.h).
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", timitseg::app::usage_error_message(app, e).c_str());
    return 2;
  } catch (const timitseg::Interrupted& e) {  // train: every rank stopped after the same step; others: between inputs
    std::fflush(stdout);
    if (world().rank() == 0) std::fprintf(stderr, "error: %s\n", e.what());
    timitseg::dist::finalize_world();
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    if (world().size() > 1 && !timitseg::dist::failure_agreed()) {
      std::fprintf(stderr, "error: %s: %s (stopping every rank)\n", world().who().c_str(), e.what());
      world().abort(1);
    }
    std::fprintf(stderr, "error: %s\n", e.what());
    timitseg::dist::finalize_world();
    return 1;
  }
  timitseg::dist::finalize_world();
  return 0;
}

int main(int argc, char** argv) {
  CLI::App app{
      "timitseg: train and evaluate phoneme segmentation models on TIMIT with a semi-Markov CRF.\n"
      "Run `timitseg SUBCOMMAND --help` for the options of each subcommand."};
  std::string log_level = "info";
  add_global_options(app, log_level);
  add_commands(app);

  // One error convention (docs/cli.md): every failure is one line starting
  // "error:" on stderr; exit 1 for a failed command, 2 for a usage error (bad
  // or missing option or subcommand; no arguments at all print the main help
  // and exit 0), 128 + signal for SIGINT / SIGTERM during
  // train, decode, align, evaluate, prepare and compare (common/interrupt.h); --help and --version print to stdout and exit 0.
  if (const std::string no = timitseg::app::refuse_several_ranks(argc, argv); !no.empty()) {
    if (timitseg::dist::detect_launch().rank == 0) std::fprintf(stderr, "error: %s\n", no.c_str());
    return 1;
  }
  // `timitseg` alone: the main help (the subcommands), exit 0 (docs/cli.md).
  if (argc == 1) {
    app.name(argv[0]);  // as parse() names it, for the same "Usage:" line as --help
    std::printf("%s", app.help().c_str());
    return 0;
  }
  // An unknown subcommand, also before --help (`timitseg trian --help`): one line with a suggestion.
  if (const std::string bad = timitseg::app::check_subcommand_words(app, argc, argv); !bad.empty()) {
    std::fprintf(stderr, "error: %s\n", bad.c_str());
    return 2;
  }
  return parse_and_run(app, argc, argv);
}
