// The fold of the anchored heads into the CRF's inputs (model/heads_fold.h).
#include "model/heads_fold.h"

#include <stdexcept>
#include <string>

#include "crf/end_scores.h"

namespace timitseg::model {

namespace {

void check_sizes(const char* what, size_t got, size_t want) {
  if (got != want)
    throw std::invalid_argument(std::string("fold_heads: ") + what + " has " + std::to_string(got) +
                                " entries, expected " + std::to_string(want));
}

}  // namespace

template <class S>
void fold_heads(const AnchoredHeads& h, int B, int T, int C, const std::vector<int32_t>& lengths,
                const std::vector<S>& heads, std::vector<S>& cum, std::vector<S>& onset) {
  const int A = h.count();
  onset.clear();
  if (A == 0) return;
  const size_t BT = static_cast<size_t>(B) * T;
  check_sizes("heads [B][T][A][C]", heads.size(), BT * A * C);
  check_sizes("cum [B][T+1][C]", cum.size(), static_cast<size_t>(B) * (T + 1) * C);
  check_sizes("lengths [B]", lengths.size(), static_cast<size_t>(B));
  if (h.fold_is_identity()) {  // the onset head alone: the CRF reads it as it is
    onset = heads;
    return;
  }
  onset.assign(BT * C, S(0));
  for (int a = 0; a < A; ++a) {
    if (h.anchors[a] != Anchor::first_frame) continue;
    for (size_t bt = 0; bt < BT; ++bt)
      for (int q = 0; q < C; ++q) onset[bt * C + q] += heads[(bt * A + a) * C + q];
  }
  const crf::EndFoldShape shape{B, T, C, C, static_cast<int64_t>(A) * C};
  for (int a = 0; a < A; ++a)  // the end heads, folded into cum and onset in place (crf/end_scores.h)
    if (h.anchors[a] == Anchor::last_frame)
      crf::fold_end_scores(shape, lengths.data(), cum.data(), onset.data(), heads.data() + size_t(a) * C, cum.data(),
                           onset.data());
}

template <class S>
void fold_heads_backward(const AnchoredHeads& h, int B, int T, int C, const std::vector<int32_t>& lengths,
                         const std::vector<S>& dcum, const std::vector<S>& donset, std::vector<S>& dheads) {
  const int A = h.count();
  dheads.clear();
  if (A == 0) return;
  const size_t BT = static_cast<size_t>(B) * T;
  check_sizes("d onset [B][T][C]", donset.size(), BT * C);
  check_sizes("d cum [B][T+1][C]", dcum.size(), static_cast<size_t>(B) * (T + 1) * C);
  check_sizes("lengths [B]", lengths.size(), static_cast<size_t>(B));
  if (h.fold_is_identity()) {
    dheads = donset;
    return;
  }
  dheads.assign(BT * A * C, S(0));
  const crf::EndFoldShape shape{B, T, C, C, static_cast<int64_t>(A) * C};
  for (int a = 0; a < A; ++a) {
    if (h.anchors[a] == Anchor::last_frame) {
      crf::fold_end_scores_backward(shape, lengths.data(), dcum.data(), donset.data(), dheads.data() + size_t(a) * C);
      continue;
    }
    for (size_t bt = 0; bt < BT; ++bt)
      for (int q = 0; q < C; ++q) dheads[(bt * A + a) * C + q] = donset[bt * C + q];
  }
}

#define TIMITSEG_FOLD_HEADS(S)                                                                                    \
  template void fold_heads<S>(const AnchoredHeads&, int, int, int, const std::vector<int32_t>&,                   \
                              const std::vector<S>&, std::vector<S>&, std::vector<S>&);                          \
  template void fold_heads_backward<S>(const AnchoredHeads&, int, int, int, const std::vector<int32_t>&,          \
                                       const std::vector<S>&, const std::vector<S>&, std::vector<S>&);
TIMITSEG_FOLD_HEADS(float)
TIMITSEG_FOLD_HEADS(double)
#undef TIMITSEG_FOLD_HEADS

}  // namespace timitseg::model
