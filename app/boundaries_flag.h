// --boundaries: the same flag on `align` and `evaluate --align`
// (eval/posterior_boundaries.h).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "app/enum_flags.h"
#include "eval/posterior_boundaries.h"

namespace timitseg::app {

// which: "" for align, "With --align: " for evaluate (the flag's help starts with it).
inline void add_boundaries_flag(CLI::App* cmd, eval::BoundariesSetting* setting, const std::string& which) {
  add_enum_option<eval::BoundariesSetting>(
      cmd, "--boundaries", setting,
      (which.empty() ? std::string("Where") : which + "where") +
          " the boundaries go: posterior (each boundary at its most probable frame under the transcript, jointly "
          "increasing: the constrained forward-backward's start posteriors; then moved up to half a frame toward "
          "the likelier neighbour frame, the vertex of a parabola through the log posteriors; the phones the most "
          "probable alignment skips stay skipped), posterior-frames (the same on the frames, without that move), "
          "viterbi (the most probable alignment's), or auto (default): posterior, for every checkpoint (chosen on "
          "dev: docs/training.md rules 15, 16 and 18; docs/align.md \"Boundaries from the posteriors\"). Before "
          "the silence edges and shifts")
      ->default_str("auto");
}

}  // namespace timitseg::app
