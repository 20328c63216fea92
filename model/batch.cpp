#include "model/batch.h"

#include <algorithm>
#include <stdexcept>

namespace timitseg::model {

Batch make_batch(const std::vector<const data::Utterance*>& utts, const data::Cmvn* cmvn, const LabelSet& ls,
                 int fixed_length) {
  if (utts.empty()) throw std::invalid_argument("make_batch: empty batch");
  Batch batch;
  const int B = static_cast<int>(utts.size());
  const int D = utts[0]->dim;
  int T = 0;
  for (const data::Utterance* u : utts) {
    if (u->dim != D)
      throw std::invalid_argument("utterance " + u->id + " has feature dim " + std::to_string(u->dim) + ", expected " +
                                  std::to_string(D));
    if (u->num_frames < 1) throw std::invalid_argument("utterance " + u->id + " has no frames");
    T = std::max(T, fixed_length > 0 ? fixed_length : u->num_frames);
  }
  batch.input.B = B;
  batch.input.T = T;
  batch.input.features.assign(static_cast<size_t>(B) * T * D, 0.f);
  batch.input.lengths.assign(B, 0);
  batch.labels.assign(static_cast<size_t>(B) * T, 0);
  for (int b = 0; b < B; ++b) {
    const data::Utterance& u = *utts[b];
    batch.ids.push_back(u.id);
    batch.source_frames.push_back(u.num_frames);
    const int L = fixed_length > 0 ? fixed_length : u.num_frames;
    const int copy = std::min(L, u.num_frames);
    float* f = batch.input.features.data() + static_cast<size_t>(b) * T * D;
    std::copy(u.features.begin(), u.features.begin() + static_cast<size_t>(copy) * D, f);
    if (cmvn) cmvn->apply(f, copy);
    int32_t* lab = batch.labels.data() + static_cast<size_t>(b) * T;
    for (int t = 0; t < copy; ++t) {
      const int l = ls.from61(u.labels[t]);
      if (l < 0)
        throw std::invalid_argument("utterance " + u.id + " frame " + std::to_string(t) + ": label index " +
                                    std::to_string(u.labels[t]) + " has no class in the " + std::to_string(ls.set) +
                                    "-phone set");
      lab[t] = l;
    }
    for (int t = copy; t < T; ++t) lab[t] = lab[copy - 1];  // padding (and --fixed-length) repeats the last label
    batch.input.lengths[b] = L;
    batch.frames += L;
  }
  return batch;
}

}  // namespace timitseg::model
