// Subcommand registration. Each app/cmd_*.cpp adds its subcommands to the
// top-level CLI11 app; callbacks throw std::exception on error, main() prints
// one "error: ..." line and exits 1.
#pragma once

#include <CLI/CLI.hpp>

#include "train/train.h"

namespace timitseg::app {

void add_crf_commands(CLI::App& app);    // crf replay, bench crf      (app/cmd_crf.cpp)
void add_data_commands(CLI::App& app);   // prepare, features, synth   (app/cmd_data.cpp)
void add_model_commands(CLI::App& app);  // train, evaluate, decode    (app/cmd_model.cpp)
void add_bench_train_command(CLI::App& app);  // bench train          (app/cmd_bench_train.cpp)
void add_replay_step_command(CLI::App& app);  // replay-step          (app/cmd_replay_step.cpp)
void add_report_command(CLI::App& app);       // report               (app/cmd_report.cpp)
void add_compare_command(CLI::App& app);      // compare              (app/cmd_compare.cpp)
void add_export_command(CLI::App& app);       // export               (app/cmd_export.cpp)
void add_align_command(CLI::App& app);        // align, bench align    (app/cmd_align.cpp)
void add_augment_command(CLI::App& app);      // augment              (app/cmd_augment.cpp)

// The `bench` parent command, shared by every benchmark subcommand.
CLI::App* bench_command(CLI::App& app);

// Several processes (app/ranks.cpp, common/dist.h): makes dist::world() for
// `train` and `bench train` (first thing they do); rank 0 keeps the logs and
// progress bars, the other ranks print errors only.
void start_ranks();
// "" when this process may run argv's subcommand; else the one line that
// refuses a subcommand other than train / bench train launched on several ranks.
std::string refuse_several_ranks(int argc, char** argv);

// The after-epoch hook of `train` that refreshes RUN_DIR/report.html
// (app/cmd_model.cpp); `compare` gives it to each of its runs. One per run:
// it keeps that run's predictions between epochs.
train::AfterEpoch train_report_refresher(const train::TrainData& data, int threads);

}  // namespace timitseg::app
