// End scores folded into cum_scores and onset, and the fold's backward (crf/end_scores.h).
#include "crf/end_scores.h"

#include <stdexcept>
#include <string>

namespace timitseg::crf {

void check_end_fold_shape(const EndFoldShape& s, const int32_t* lengths, const char* who) {
  const std::string w(who);
  if (s.B < 1 || s.T < 1 || s.C < 1)
    throw std::invalid_argument(w + ": dims must be >= 1, got B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) +
                                " C=" + std::to_string(s.C));
  if (s.onset_stride < s.C || s.end_stride < s.C)
    throw std::invalid_argument(w + ": frame strides must be >= C=" + std::to_string(s.C) + ", got onset_stride=" +
                                std::to_string(s.onset_stride) + " end_stride=" + std::to_string(s.end_stride));
  if (!lengths) throw std::invalid_argument(w + ": lengths is null");
  for (int64_t b = 0; b < s.B; ++b)
    if (lengths[b] < 1 || lengths[b] > s.T)
      throw std::invalid_argument(w + ": lengths[" + std::to_string(b) + "] = " + std::to_string(lengths[b]) +
                                  " is outside [1, T=" + std::to_string(s.T) + "]");
}

template <class S>
void fold_end_scores(const EndFoldShape& s, const int32_t* lengths, const S* cum, const S* onset, const S* end,
                     S* cum_out, S* onset_out) {
  check_end_fold_shape(s, lengths, "crf::fold_end_scores");
  if (!cum || !end || !cum_out || !onset_out)
    throw std::invalid_argument("crf::fold_end_scores: cum, end, cum_out and onset_out must not be null");
  const int64_t T = s.T, C = s.C;
  for (int64_t b = 0; b < s.B; ++b) {
    const int64_t L = lengths[b];
    const S* cb = cum + b * (T + 1) * C;
    S* co = cum_out + b * (T + 1) * C;
    const S* ob = onset ? onset + b * T * s.onset_stride : nullptr;
    const S* eb = end + b * T * s.end_stride;
    S* oo = onset_out + b * T * C;
    for (int64_t t = 0; t <= T; ++t)
      for (int64_t c = 0; c < C; ++c) {
        const S q = t >= 1 && t <= L ? eb[(t - 1) * s.end_stride + c] : S(0);
        co[t * C + c] = t >= 1 && t <= L ? cb[t * C + c] + q : cb[t * C + c];
        if (t == T) continue;
        const S o = ob && t < L ? ob[t * s.onset_stride + c] : S(0);
        oo[t * C + c] = t == 0 ? o : (t < L ? o + q : S(0));
      }
  }
}

template <class S>
void fold_end_scores_backward(const EndFoldShape& s, const int32_t* lengths, const S* g_cum_out, const S* g_onset_out,
                              S* g_end) {
  check_end_fold_shape(s, lengths, "crf::fold_end_scores_backward");
  if (!g_cum_out || !g_end)
    throw std::invalid_argument("crf::fold_end_scores_backward: g_cum_out and g_end must not be null");
  const int64_t T = s.T, C = s.C;
  for (int64_t b = 0; b < s.B; ++b) {
    const int64_t L = lengths[b];
    const S* gc = g_cum_out + b * (T + 1) * C;
    const S* go = g_onset_out ? g_onset_out + b * T * C : nullptr;
    S* ge = g_end + b * T * s.end_stride;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) {
        S g = S(0);
        if (t < L) {
          g = gc[(t + 1) * C + c];
          if (go && t + 1 < L) g = g + go[(t + 1) * C + c];
        }
        ge[t * s.end_stride + c] = g;
      }
  }
}

#define TIMITSEG_END_FOLD(S)                                                                                      \
  template void fold_end_scores<S>(const EndFoldShape&, const int32_t*, const S*, const S*, const S*, S*, S*);      \
  template void fold_end_scores_backward<S>(const EndFoldShape&, const int32_t*, const S*, const S*, S*);
TIMITSEG_END_FOLD(float)
TIMITSEG_END_FOLD(double)
#undef TIMITSEG_END_FOLD

}  // namespace timitseg::crf
