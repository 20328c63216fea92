// The middle of the spectral transition at each boundary of a tiling of an audio
// (docs/synth.md, "Between two sonorants"): what synth moves a boundary between two
// sonorants to (data::move_sonorant_boundaries) and what bench/boundary_lags measures
// at every boundary of a corpus.
#pragma once

#include <cstdint>
#include <vector>

#include "data/features.h"

namespace timitseg::data {

// starts: [n] the phones' first samples, increasing, starts[0] = 0, the last phone
// ending at audio.samples.size(). Returns [n]: element i (1 <= i < n) is the middle of
// the transition between phone i-1 and phone i, element 0 is -1, and so is every
// boundary where either phone is under 30 ms or no frame qualifies. The middle is the
// first 5 ms frame (20 ms Hann window, 40 log-mel bands to 8 kHz, each floored 60 dB
// below the audio's loudest) after phone i-1's middle, up to phone i's, whose spectrum
// is nearer (Euclidean) phone i's middle spectrum (the mean of the frames centred in its
// middle 20 %, the nearest frame if none) than phone i-1's; the sample half a frame
// shift before that frame's centre, kept inside (starts[i-1], end of phone i). Every
// middle comes from `starts` as given (none depends on another).
std::vector<int64_t> transition_middles(const Audio& audio, const std::vector<int64_t>& starts);

}  // namespace timitseg::data
