// --boundaries (eval/posterior_boundaries.h).
#include "eval/posterior_boundaries.h"

#include <cstdio>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "eval/pipeline.h"

namespace timitseg::eval {

bool posterior_boundaries_on(BoundariesSetting setting) {
  return align_boundaries(setting) != crf::AlignBoundaries::viterbi;
}

crf::AlignBoundaries align_boundaries(BoundariesSetting setting) {
  switch (setting) {
    case BoundariesSetting::viterbi: return crf::AlignBoundaries::viterbi;
    case BoundariesSetting::posterior_frames: return crf::AlignBoundaries::posterior_frames;
    case BoundariesSetting::automatic:
    case BoundariesSetting::posterior: return crf::AlignBoundaries::posterior;
  }
  throw std::logic_error("align_boundaries: not a BoundariesSetting");
}

crf::AlignBoundaries resolve_boundaries(BoundariesSetting setting, const std::string& who) {
  const crf::AlignBoundaries boundaries = align_boundaries(setting);
  if (boundaries == crf::AlignBoundaries::viterbi) return boundaries;
  const bool frames = boundaries == crf::AlignBoundaries::posterior_frames;
  spdlog::info("{}: boundaries from the posteriors under the transcript{} (--boundaries {}; --boundaries viterbi: "
               "the most probable alignment's)",
               who, frames ? ", on their frames" : ", between frames", common::to_string(setting));
  return boundaries;
}

void count_offsets_in_samples(crf::AlignResult* r, const data::FeatureOptions& features) {
  if (r->start_offset.empty()) return;
  int64_t n = 0;
  for (const double o : r->start_offset) n += offset_samples(o, features) != 0 ? 1 : 0;
  r->posterior.between_frames = n;
}

nlohmann::json posterior_boundaries_json(const crf::PosteriorBoundaryCount& c) {
  nlohmann::json j = {{"utterances", c.utterances},
                      {"boundaries", c.boundaries},
                      {"moved", c.moved},
                      {"between_frames", c.between_frames},
                      {"windowed", c.windowed},
                      {"over_limit", c.over_limit},
                      {"seconds", c.seconds}};
  if (c.moved > 0) j["mean_move_frames"] = static_cast<double>(c.moved_frames) / static_cast<double>(c.moved);
  if (c.boundaries > 0) j["mean_abs_offset_frames"] = c.offset_abs_sum / static_cast<double>(c.boundaries);
  return j;
}

std::string posterior_boundaries_line(const crf::PosteriorBoundaryCount& c) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%lld of %lld boundaries moved (mean move %+.2f frames)",
                static_cast<long long>(c.moved), static_cast<long long>(c.boundaries),
                c.moved > 0 ? static_cast<double>(c.moved_frames) / static_cast<double>(c.moved) : 0.0);
  std::string out = buf;
  if (c.between_frames > 0) {
    std::snprintf(buf, sizeof buf, ", %lld between frames (mean |offset| %.2f frames)",
                  static_cast<long long>(c.between_frames), c.offset_abs_sum / static_cast<double>(c.boundaries));
    out += buf;
  }
  std::snprintf(buf, sizeof buf, " in %lld utterance(s), the step %.2f s", static_cast<long long>(c.utterances),
                c.seconds);
  out += buf;
  if (c.windowed > 0)
    out += ", " + std::to_string(c.windowed) + " of them by windows of the transcript (over the memory limit whole)";
  if (c.over_limit > 0)
    out += ", " + std::to_string(c.over_limit) + " left with the Viterbi's: even a window over the memory limit";
  return out;
}

}  // namespace timitseg::eval
