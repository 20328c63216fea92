// --silence-edges, --silence-margin-db, --silence-max-move-ms: the same three
// flags on `align` and `evaluate --align` (eval/silence_edges.h).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "app/enum_flags.h"
#include "eval/silence_edges.h"

namespace timitseg::app {

// which: "" for align, "With --align: " for evaluate (the flags' help starts with it).
inline void add_silence_edge_flags(CLI::App* cmd, eval::SilenceEdgesSetting* setting, eval::SilenceEdgeOptions* opts,
                                   const std::string& which) {
  add_enum_option<eval::SilenceEdgesSetting>(
      cmd, "--silence-edges", setting,
      (which.empty() ? std::string("Move") : which + "move") + " each boundary between a silence of the phone set and a phone to where the audio's energy "
              "crosses the utterance's floor (10th percentile of a 5 ms envelope) + --silence-margin-db, within "
              "--silence-max-move-ms, inside the two phones; a silence that is not quiet is left alone. auto "
              "(default): on for a checkpoint trained on transcripts (a silence learned from them takes the quiet "
              "start or end of its neighbour), off for one trained on times; on; off (docs/align.md \"Silence "
              "edges\")")
      ->default_str("auto");
  cmd->add_option("--silence-margin-db", opts->margin_db,
                  (which.empty() ? std::string("With") : which + "with") + " silence edges: the threshold, in dB above the utterance's floor")
      ->capture_default_str();
  cmd->add_option("--silence-min-quiet", opts->min_quiet_pct,
                  (which.empty() ? std::string("With") : which + "with") +
                      " silence edges: a silence is moved only when at least this % of it (every 1 ms) is below the "
                      "threshold (noise, babble, a silence label on speech are left alone)")
      ->capture_default_str();
  cmd->add_option("--silence-max-move-ms", opts->max_move_ms,
                  (which.empty() ? std::string("With") : which + "with") + " silence edges: the furthest a boundary moves, in ms")
      ->capture_default_str();
}

}  // namespace timitseg::app
