// End scores of the semi-CRF (docs/crf.md "End scores (a fold into cum_scores
// and onset)"): a per-label score q[b][t][c] added once at the LAST frame
// t = e-1 of every segment [s, e) with label c. No backend reads q: it folds
// exactly into the two inputs every backend already takes,
//
//   cum'[b][t][c]   = cum[b][t][c] + q[b][t-1][c]      1 <= t <= L_b   (row 0 and rows t > L_b copied)
//   onset'[b][t][c] = onset[b][t][c] + q[b][t-1][c]    1 <= t <  L_b
//   onset'[b][0][c] = onset[b][0][c],  onset'[b][t][c] = 0 for t >= L_b   (onset nullptr reads as 0)
//
// so that cum'[e] - cum'[s] + onset'[s] = cum[e] - cum[s] + onset[s] + q[e-1]
// for every segment [s, e). The backward is the fold's transpose:
//
//   g_cum = g_cum' and g_onset = g_onset' (identities, the caller keeps them), and
//   g_q[b][t][c] = g_cum'[b][t+1][c] + (t+1 < L_b ? g_onset'[b][t+1][c] : 0)   t < L_b;  0 for t >= L_b
//
// Every add is one float32 add (the device versions in crf/device_layers.h
// make the same adds, so their results are bitwise these).
#pragma once

#include <cstdint>

namespace timitseg::crf {

// The onset and end tables may be views of a wider per-frame buffer (the
// model's anchored scores [B][T][A][C]: head a at base + a*C, A*C floats
// between frames): *_stride is the number of floats between frames t and t+1
// of one utterance (C when dense), each >= C; utterance b starts at b*T*stride.
struct EndFoldShape {
  int64_t B = 0, T = 0, C = 0;
  int64_t onset_stride = 0, end_stride = 0;
};

// cum [B][T+1][C], onset [B][T][onset_stride] (its first C floats per frame;
// nullptr = zeros), end [B][T][end_stride] (its first C floats per frame),
// lengths [B] in [1, T] (host) -> cum_out [B][T+1][C], onset_out [B][T][C]
// (dense, always written). Frames t >= lengths[b] of onset and end are never
// read. cum_out may be cum (in place); onset_out may be onset when
// onset_stride == C. Throws std::invalid_argument for bad dims, strides,
// lengths or a null pointer that must be set.
// S = float (the model's float32 path) or double (its float64 gradient checks).
template <class S>
void fold_end_scores(const EndFoldShape& shape, const int32_t* lengths, const S* cum, const S* onset, const S* end,
                     S* cum_out, S* onset_out);

// g_cum_out [B][T+1][C], g_onset_out [B][T][C] (nullptr = zeros), lengths
// [B] in [1, T] (host) -> g_end [B][T][end_stride]: its first C floats per
// frame overwritten (padding frames t >= lengths[b] written 0), the other
// floats of each frame left as they are. Throws as fold_end_scores.
template <class S>
void fold_end_scores_backward(const EndFoldShape& shape, const int32_t* lengths, const S* g_cum_out,
                              const S* g_onset_out, S* g_end);

// The checks of both functions (host lengths): B, T, C >= 1, strides >= C,
// lengths[b] in [1, T]; `who` names the caller in the message.
void check_end_fold_shape(const EndFoldShape& shape, const int32_t* lengths, const char* who);

}  // namespace timitseg::crf
