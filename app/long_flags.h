// The flag that `align` and `decode` share for long recordings (over
// model::kWindowFrames frames, encoded in windows): --centre-frames N, the
// centring of the cumsum (model::long_cumsum, ExecutorOptions::centre_frames).
#pragma once

#include <cstdint>

#include <CLI/CLI.hpp>

namespace timitseg::app {

inline CLI::Option* add_centre_frames_option(CLI::App* cmd, int64_t* out) {
  return cmd
      ->add_option("--centre-frames", *out,
                   "Long recordings (over 16384 frames, encoded in windows): centre the cumsum of each frame's "
                   "scores by the mean of the N frames either side instead of the whole recording's mean; 0 = the "
                   "whole recording. The default 200 (4 s, about one sentence) keeps boundaries within 10 ms of "
                   "aligning each sentence alone for 99.4 % of them (docs/align.md); shorter inputs are not affected")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30))
      ->capture_default_str();
}

}  // namespace timitseg::app
