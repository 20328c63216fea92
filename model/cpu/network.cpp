// Encoder (input Linear, dropout, BiLSTM) + projection + zero-centered cumsum,
// forward and backward through time: the two drivers over the stages of
// network_forward.cpp and network_backward.cpp (model/cpu/network_stages.h),
// See network.h for layouts and for the
// fixed task partition that makes results independent of the thread count.
//
// Stages (each one parallel_for; tasks never write the same element):
//   forward:  per slice: features -> x0 (slice-blocked), z0 = x0 Win^T + bin
//             per layer k: per slice: layer_in[k] = (z0 | out[k-1]) * mask
//                          per (direction, slice): gates = X Wih^T + b, then the
//                          recurrence over the slice's own frames
//             per slice: scores = out Wp^T + bp (time-major), cumsum;
//                        with crf.onset_features heads = out Wo^T + bo ([B][T][A][C]),
//                        folded into onset (model/heads_fold.h)
//   backward: per slice: cumsum backward -> dS, partial dWp/dbp
//             per layer k: per (direction, slice): recurrence backward, partial
//                          dWih/dWhh/db, dIn_dir = dG Wih; then the partials
//                          are summed in slice order per (direction, row block)
//             per slice: dIn -> partial dWin/dbin, dfeatures
// Dropout masks are drawn by one extra task that runs beside the compute tasks
// of the stage before the one that needs them.
// Taps (model/numerics.h, an enabled Probe): after the parallel section of a
// stage, on whole tensors (padding rows are 0). With a probe, the x0 fill and
// the input projection run as two stages, so that a fault planted in the
// features reaches z0; the projection and the cumsum always are two stages.
#include "model/cpu/network.h"

#include "model/cpu/network_stages.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>

#include "common/parallel.h"

namespace timitseg::model {

namespace {

std::atomic<int> g_default_threads{0};

// Eigen's cache sizes for its product blocking (network.h, pin_product_blocking), in bytes.
constexpr std::ptrdiff_t kProductBlockingL1 = 32 * 1024;
constexpr std::ptrdiff_t kProductBlockingL2 = 1024 * 1024;
constexpr std::ptrdiff_t kProductBlockingL3 = 32 * 1024 * 1024;

}  // namespace

void pin_product_blocking() {
  static const bool pinned = [] {
    Eigen::setCpuCacheSizes(kProductBlockingL1, kProductBlockingL2, kProductBlockingL3);
    return true;
  }();
  (void)pinned;
}

void set_default_threads(int threads) { g_default_threads.store(threads); }
int default_threads() { return resolve_threads(g_default_threads.load()); }

template <class S>
int Network<S>::threads() const {
  return resolve_threads(threads_ >= 0 ? threads_ : g_default_threads.load());
}

// The stages: model/cpu/network_forward.cpp (order and taps: network_stages.h).
template <class S>
void Network<S>::forward(const std::vector<S>& params, const BatchInput<S>& in, double dropout,
                         std::mt19937_64* rng, Activations<S>& act, Probe* probe) const {
  const ModelDims& d = layout_.dims();
  const int B = in.B, T = in.T, D = d.input_dim, L = d.num_layers;
  const int64_t TB = int64_t(T) * B;
  if (params.size() != layout_.total()) throw std::invalid_argument("model: parameter buffer has the wrong size");
  if (in.features.size() != static_cast<size_t>(TB) * D || in.lengths.size() != static_cast<size_t>(B))
    throw std::invalid_argument("model: batch features/lengths do not match [B][T][D]");
  for (int b = 0; b < B; ++b)
    if (in.lengths[b] < 1 || in.lengths[b] > T)
      throw std::invalid_argument("model: length " + std::to_string(in.lengths[b]) + " of batch row " +
                                  std::to_string(b) + " is outside [1, " + std::to_string(T) + "]");
  const bool train = dropout > 0.0;
  if (train && !rng) throw std::invalid_argument("model: dropout needs an rng");
  if (!in.share_rows.empty()) {  // a rank's share of a global batch (model/batch.h)
    std::vector<char> seen(static_cast<size_t>(std::max(0, in.global_B)), 0);
    bool ok = static_cast<int>(in.share_rows.size()) == in.B && in.global_T >= in.T;
    for (int32_t g : in.share_rows) {
      ok = ok && g >= 0 && g < in.global_B && !seen[static_cast<size_t>(g)];
      if (ok) seen[static_cast<size_t>(g)] = 1;
    }
    if (!ok) throw std::invalid_argument("model: share_rows do not map the batch's rows into its global batch");
  }
  Probe* const pr = probe && probe->enabled() ? probe : nullptr;  // null: taps cost nothing
  if (pr) pr->set_threads(threads());
  cpu_detail::ForwardContext<S> c{layout_, params, in, dropout, rng, act, pr, threads(),
                                  cpu_detail::make_slices(in.lengths, T, kSliceRows), train};
  cpu_detail::reset_activations(c);
  cpu_detail::forward_input(c);
  for (int k = 0; k < L; ++k) cpu_detail::forward_lstm_layer(c, k);
  cpu_detail::forward_scores(c);
}

// The stages: model/cpu/network_backward.cpp.
template <class S>
void Network<S>::backward(const std::vector<S>& params, const Activations<S>& act, const std::vector<S>& dcum,
                          std::vector<S>& grad, std::vector<S>* dfeatures, Probe* probe,
                          const std::vector<S>* dscores, const std::vector<S>* donset) const {
  const ModelDims& d = layout_.dims();
  const int B = act.B, T = act.T, L = d.num_layers, C = d.num_classes;
  const int64_t TB = int64_t(T) * B;
  if (dcum.size() != static_cast<size_t>(B) * (T + 1) * C)
    throw std::invalid_argument("model: d cum_scores does not match [B][T+1][C]");
  if (dscores && dscores->size() != static_cast<size_t>(TB) * C)
    throw std::invalid_argument("model: d scores does not match [B][T][C]");
  grad.assign(layout_.total(), S(0));
  const bool train = act.drop0.size() != 0;
  Probe* const pr = probe && probe->enabled() ? probe : nullptr;  // null: taps cost nothing
  if (pr) pr->set_threads(threads());
  const cpu_detail::BackwardContext<S> c{layout_, params, act, grad, pr, threads(),
                                         cpu_detail::make_slices(act.lengths, T, kSliceRows), train};
  const Mat dS = cpu_detail::backward_cumsum(c, dcum, dscores);  // [T*B][C] slice-blocked
  Mat dOut = cpu_detail::backward_projection(c, dS);             // d loss / d layer_out[L-1] [T*B][2H]
  cpu_detail::backward_heads(c, dcum, donset, dOut);
  // BiLSTM layers, top to bottom. dIn[dir] [T*B][In_k]: d loss / d layer_in[k]
  // through direction dir; the layer below reads the sum dIn[0] + dIn[1].
  Mat dIn[2], dInAbove[2];
  for (int k = L - 1; k >= 0; --k) {
    std::swap(dIn[0], dInAbove[0]);
    std::swap(dIn[1], dInAbove[1]);
    cpu_detail::backward_lstm_layer(c, k, dOut, dInAbove, dIn);
  }
  cpu_detail::backward_input(c, dIn, dfeatures, dS);
}

template class Network<float>;
template class Network<double>;

}  // namespace timitseg::model
