// --boundaries auto|viterbi|posterior on `align` and `evaluate --align`
// (docs/align.md "Boundaries from the posteriors"; the programme:
// crf/posterior_boundaries.h, docs/crf.md): which boundaries an alignment
// keeps, and the report of what the posteriors moved.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/enum_names.h"
#include "crf/host_run.h"
#include "crf/posterior_boundaries.h"
#include "data/features.h"

namespace timitseg::eval {

// auto: posterior, for every checkpoint (docs/training.md "Boundaries from
// the posteriors, decided on dev": rule 15 for checkpoints trained on
// transcripts, rule 16 for those trained on times; between frames: rule 18);
// the word stays so that a script that names the default keeps meaning it.
// posterior-frames: the posteriors' frames without the offsets between them
// (the decision of rules 15-16, as evaluated before rule 18).
enum class BoundariesSetting { automatic, viterbi, posterior, posterior_frames };
TIMITSEG_ENUM_NAMES(BoundariesSetting, 4, {BoundariesSetting::automatic, "auto"},
                    {BoundariesSetting::viterbi, "viterbi"}, {BoundariesSetting::posterior, "posterior"},
                    {BoundariesSetting::posterior_frames, "posterior-frames"});

// Whether alignments take the posteriors' boundaries: all but viterbi.
bool posterior_boundaries_on(BoundariesSetting setting);
// The boundaries a setting gives (auto: posterior), without a log line.
crf::AlignBoundaries align_boundaries(BoundariesSetting setting);
// The boundaries alignments get; one log line "WHO: boundaries from the
// posteriors (...)" when that is posterior.
crf::AlignBoundaries resolve_boundaries(BoundariesSetting setting, const std::string& who);

// Sets r->posterior.between_frames to the number of r's offsets that move a boundary off its
// frame's sample, i.e. whose offset_samples (eval/pipeline.h, at the model's rate) is not 0.
// The crf step counts every nonzero offset; one under half a sample is written at the
// frame's own sample, so it is not counted here.
void count_offsets_in_samples(crf::AlignResult* r, const data::FeatureOptions& features);

// {"utterances", "boundaries", "moved", "mean_move_frames", "between_frames", "mean_abs_offset_frames",
// "windowed", "over_limit", "seconds"}.
nlohmann::json posterior_boundaries_json(const crf::PosteriorBoundaryCount& c);
// "N of M boundaries moved (mean move +x frames)[, P between frames (mean |offset| o frames)] in U utterances, the
// step S s[, W of them by windows ...][, K left with the Viterbi's: even a window over the memory limit]".
std::string posterior_boundaries_line(const crf::PosteriorBoundaryCount& c);

}  // namespace timitseg::eval
