// Shared bits of the crf layer's subcommands (app/cmd_crf*.cpp).
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "crf/backend.h"

namespace timitseg::app::crf_cmd {

// --threads N: 0 = all hardware threads, negative is an error naming `cmd`.
void check_threads(const char* cmd, int threads);
// crf::make_backend with the cpu backend's thread count.
std::unique_ptr<crf::Backend> backend_by_name(const std::string& name, int threads);

// `crf replay` under the `crf` command (app/cmd_crf_replay.cpp).
void add_replay_command(CLI::App& crf);
// `bench crf` under the `bench` command (app/cmd_crf_bench.cpp).
void add_bench_command(CLI::App& bench);

}  // namespace timitseg::app::crf_cmd
