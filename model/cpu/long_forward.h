// The encoder over a long recording in windows, so that its activations stay
// bounded (docs/align.md, "Long recordings"): the BiLSTM runs over windows of
// kWindowFrames frames with kContextFrames frames of context on each side, the
// scores of each window's middle are kept, and the zero-centered cumsum is
// taken over the whole recording (the centering needs every frame).
#pragma once

#include <vector>

#include "model/batch.h"
#include "model/cpu/network.h"
#include "model/long_input.h"

namespace timitseg::model {

// Whether forward_in_windows applies: one utterance longer than `window` frames.
bool long_input(const BatchInput<float>& in, int window = kWindowFrames);

// For one utterance (in.B == 1): act.scores [T][C], act.onset [1][T][C] (when
// the model has onset scores) and act.cum [1][T+1][C] as Network::forward
// would write them, but each window's forward sees only its frames and
// `context` frames either side (the window's own middle kept), so the
// activations held are those of window + 2 context frames. The other tensors
// of act are left empty. Draws a progress bar over the windows. Throws what
// Network::forward throws (NumericsError through probe).
void forward_in_windows(const Network<float>& net, const std::vector<float>& params, const BatchInput<float>& in,
                        Activations<float>& act, Probe* probe, int window = kWindowFrames,
                        int context = kContextFrames, int64_t centre_frames = 0);

}  // namespace timitseg::model
