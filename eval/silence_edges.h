// Silence edges at the energy change (docs/align.md "Silence edges"): after
// forced alignment, each boundary between a silence and a phone moves to
// where the audio's short-time energy crosses the utterance's floor plus a
// margin, within a bound.
//
// A model trained on transcripts alone is free to let a silence take the quiet
// start or end of its neighbour (a frication's first 40 ms, a final fade):
// nothing in the transcript NLL says where the sound begins (docs/training.md
// "What the transcript route gets wrong, per phone"). The energy does, where
// the silence is quiet; this step reads it from the audio, with no time label.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/enum_names.h"

namespace timitseg::eval {

// --silence-edges: auto (on for a checkpoint trained on transcripts, off for
// one trained on times: docs/training.md "Silence edges, decided on dev
// (rule 11)"), on, off.
enum class SilenceEdgesSetting { automatic, on, off };
TIMITSEG_ENUM_NAMES(SilenceEdgesSetting, 3, {SilenceEdgesSetting::automatic, "auto"}, {SilenceEdgesSetting::on, "on"},
                    {SilenceEdgesSetting::off, "off"});

struct SilenceEdgeOptions {
  // The defaults: docs/training.md rules 11 (the margin) and 12 (the bound and the quiet share), decided on dev.
  double margin_db = 6.0;       // --silence-margin-db: the threshold is the floor + this
  double max_move_ms = 80.0;    // --silence-max-move-ms: a boundary moves at most this far
  double min_quiet_pct = 10.0;  // --silence-min-quiet: a silence moves only when this % of it is quiet
  // Fixed by rule 11 (not options): the envelope's window and the floor's percentile.
  double window_ms = 5.0;
  double floor_percentile = 10.0;
};
// Throws std::invalid_argument naming the flag when margin_db is not a finite
// number > 0, max_move_ms not a finite number >= 0, or min_quiet_pct not in (0, 100].
void check_silence_edge_options(const SilenceEdgeOptions& o);

// Whether a checkpoint's alignments get silence edges: on/off as set; auto:
// on iff the checkpoint trained on transcripts.
bool silence_edges_on(SilenceEdgesSetting setting, bool transcript_trained);

// The options to use (unset: off, as silence_edges_on decides), with one log line
// "WHO: silence edges at the energy change (...)" when on.
std::optional<SilenceEdgeOptions> resolve_silence_edges(SilenceEdgesSetting setting, const SilenceEdgeOptions& o,
                                                        bool transcript_trained, const std::string& who);

// What refine_silence_edges did, summed over calls.
struct SilenceEdgeCount {
  int64_t edges = 0;      // boundaries between a silence and a non-silence phone
  int64_t moved = 0;      // of them, moved to the energy crossing
  int64_t loud = 0;       // of them, left: their silence is not quiet (less than min_quiet_pct of it below the threshold)
  int64_t no_crossing = 0;  // of them, left: no crossing within the bound
  int64_t utterances_without_audio = 0;  // evaluate: audio that does not match the utterance (left as aligned)
  double moved_ms_sum = 0.0;  // the moves' signed sum (new - old, ms): its mean is the mean move
  nlohmann::json to_json() const;
};

// The envelope [n]: for each sample, the mean power of the samples in a
// window of window_ms centred on it (cut at the ends), in dB (10 log10 of the
// power + 1e-10, the samples as given: float in the int16 range, data::Audio).
std::vector<float> energy_envelope_db(const float* x, int64_t n, int rate, double window_ms);

// The floor: the `percentile` (0-100, nearest rank) of the envelope taken every
// 1 ms (every sample below 1000 Hz).
double envelope_floor_db(const std::vector<float>& env, int rate, double percentile);

// Moves the silence edges of one utterance. x [n_samples] its audio at `rate`;
// starts [m]: each phone's start in samples at `rate` (strictly increasing,
// starts[0] the utterance's start), end: the last phone's end (<= n_samples);
// silence [m]: whether phone i is a silence. For each boundary i (the start of
// phone i, i >= 1) between a silence and a non-silence phone, in order, with
// threshold = floor + margin_db:
//  - left when fewer than ceil(min_quiet_pct / 100 * n) of the silence's n
//    envelope values taken every 1 ms are below the threshold (loud; at 50:
//    its median is not below it);
//  - an onset (silence, then phone): the phone starts at the first sample of
//    the run of samples at or above the threshold that holds the boundary
//    (moved earlier), or, when the boundary's sample is below it, at the next
//    sample at or above it (moved later);
//  - an offset (phone, then silence): the silence starts at the first sample
//    below the threshold after the boundary (later) or, when the boundary's
//    sample is below it, at the first sample of the quiet run that holds it
//    (earlier);
//  - the crossing is looked for within max_move_ms of the boundary and inside
//    the two phones (each keeps at least one sample); none there: left.
// Throws std::invalid_argument when the arrays disagree or the starts are not
// increasing inside [0, end], end > n_samples.
void refine_silence_edges(const float* x, int64_t n_samples, int rate, const std::vector<char>& silence, int64_t end,
                          const SilenceEdgeOptions& o, std::vector<int64_t>* starts,
                          SilenceEdgeCount* count = nullptr);

}  // namespace timitseg::eval
