// crf.phone_bonus: the transition a decoding with a phone bonus runs on
// (crf::Session::viterbi with a bonus, crf/session_decode.cpp, and the C API).
#pragma once

#include <cstdint>

namespace timitseg::crf {

// crf.phone_bonus: decoding that favours (beta > 0) or penalizes (beta < 0)
// changes of label, HTK's insertion log-probability (HVite -p) for phones.
// Viterbi with transition'[c'][c] = transition[c'][c] + beta for c' != c (the
// diagonal, a segment followed by one of its own label, is unchanged) returns
// argmax over segmentations y of score(y) + beta * (label changes in y); start
// is added once per utterance, so it needs no change, and -inf (forbidden)
// entries stay -inf. Writes transition' [C][C] into out (host memory, not
// aliasing transition). Only decoding uses it: the loss keeps the model's own
// transition.
void add_phone_bonus(const float* transition, int64_t C, float beta, float* out);

}  // namespace timitseg::crf
