// The encoder + projection + zero-centered cumsum + CRF parameters, templated on
// the scalar type: float for training, double for the finite-difference tests.
//
// Parameters live in one flat buffer (ParamLayout) under PyTorch's names and
// row-major layouts, so a checkpoint loads into torch.nn.Linear / nn.LSTM
// (bidirectional, batch_first, gate order i, f, g, o):
//   encoder.input_proj.weight [W][D], .bias [W]                 (W = hidden_dim)
//   encoder.lstm.weight_ih_l{k}[_reverse] [4H][In_k]  (In_0 = W, else 2H; H = W/2)
//   encoder.lstm.weight_hh_l{k}[_reverse] [4H][H], bias_ih/bias_hh [4H]
//   crf.projection.weight [C][W], .bias [C]
//   crf.onset_projection.weight [C][W], .bias [C]      (ModelDims::onset only)
//   crf.transition [C][C], crf.duration_bias [K][C], crf.start [C], crf.end [C]
//
// Activations are kept in SLICE-BLOCKED time-major order: the batch is cut
// into fixed slices of kSliceRows consecutive utterances (the last one may be
// smaller), and slice s (first utterance b0, nb utterances) owns rows
// [b0*T, (b0+nb)*T); inside it, row b0*T + t*nb + j is frame t of utterance
// b0 + j. Every slice runs its own recurrence (per step and row one
// [1][H] x [H][4H] product), only up to the longest utterance of the slice
// (rows past it are 0).
// Exception: Activations::scores is plain time-major, row t*B + b.
//
// Threads: the work is cut into a FIXED set of tasks that does not depend on
// the thread count (per (direction, slice) for the LSTM, per slice for the
// layout/cumsum/projection work; weight gradients are per-slice partial
// products summed in slice order), so results are bitwise identical for any
// number of threads. Dropout masks are drawn serially from the caller's rng in
// the order (drop0, drop[0], ..., drop[L-2]), each in time-major (t, b, unit)
// order, exactly as a single-threaded executor would.
#pragma once

#include <Eigen/Dense>

#include "model/batch.h"
#include "model/cpu/activations.h"
#include "model/cpu/probe.h"
#include "model/numerics.h"
#include "model/params.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace timitseg::model {

// Eigen cuts a matrix product's inner dimension (and its rows) into blocks
// sized from the L1/L2/L3 data cache sizes it reads from the CPU (cpuid); the
// blocks decide the order of the float additions, so the same binary would
// round differently on CPUs with other caches (an Intel Xeon's 48 KiB L1
// against an AMD EPYC's 32 KiB). Every Network sets them, once per process
// and before its first product, to fixed sizes (L1 32 KiB, L2 1 MiB, L3
// 32 MiB: those of the AMD EPYC that recorded tests/reproduce/expected.json),
// so the CPU path's bits do not depend on the CPU's caches (docs/training.md,
// "What results depend on"). The sizes only change the speed and the
// rounding, never the math. Thread-safe.
void pin_product_blocking();

template <class S>
class Network {
 public:
  using Mat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Vec = Eigen::Matrix<S, Eigen::Dynamic, 1>;

  // Utterances per slice: the unit of the fixed task partition (see above).
  static constexpr int kSliceRows = 4;

  // threads: > 0 that many, 0 all cores, < 0 the process default
  // (set_default_threads, initially all cores).
  explicit Network(const ModelDims& d, int threads = -1) : layout_(d), threads_(threads) { pin_product_blocking(); }
  const ParamLayout& layout() const { return layout_; }
  void set_threads(int threads) { threads_ = threads; }
  int threads() const;  // resolved: the number of workers forward/backward use

  // Forward. dropout > 0 only when training (rng consumed in a fixed order).
  // probe (optional): the forward taps input, input_proj, lstm.{k}.{fwd,bwd},
  // projection, onset_projection (with ModelDims::onset: act.onset, the raw
  // onset scores [B][T][C] for crf::Params::onset), center, cumsum (a
  // NumericsError stops the forward there).
  // An empty share of a global batch (several processes, model/batch.h): the
  // engine advances by the draws of the global batch's masks, as forward's
  // would, so that every rank's engine stays where one process's is.
  void skip_dropout_draws(int global_B, int global_T, double dropout, std::mt19937_64* rng) const {
    if (dropout <= 0.0 || !rng) return;
    const ModelDims& d = layout_.dims();
    const unsigned long long cols = static_cast<unsigned long long>(d.hidden_dim) +
                                    static_cast<unsigned long long>(d.num_layers - 1) * 2 * d.per_direction();
    rng->discard(static_cast<unsigned long long>(global_B) * static_cast<unsigned long long>(global_T) * cols);
  }
  void forward(const std::vector<S>& params, const BatchInput<S>& in, double dropout, std::mt19937_64* rng,
               Activations<S>& act, Probe* probe = nullptr) const;

  // Backward from d loss / d cum [B][T+1][C] to d loss / d params (overwrites
  // grad, same layout as params) and, when dfeatures != nullptr, d loss / d
  // features [B][T][D]. CRF parameter gradients are not touched here: the
  // caller adds them (they come straight from the CRF backend).
  // probe (optional): the backward taps cumsum, center, projection,
  // onset_projection, lstm.{k}.{bwd,fwd} (k from the top), input_proj and,
  // when dfeatures != nullptr, input. dcum is not changed (a fault is planted
  // by the caller).
  // dscores (optional): d loss / d scores [B][T][C] (batch-major, 0 on padding)
  // of a loss term on the projection's scores themselves (crf.frame_ce_weight,
  // model/frame_ce.h), added to the cumsum's gradient before the projection.
  // donset: d loss / d onset [B][T][C], required with ModelDims::onset
  // (crf::Grads::onset), ignored without.
  void backward(const std::vector<S>& params, const Activations<S>& act, const std::vector<S>& dcum,
                std::vector<S>& grad, std::vector<S>* dfeatures, Probe* probe = nullptr,
                const std::vector<S>* dscores = nullptr, const std::vector<S>* donset = nullptr) const;

 private:
  ParamLayout layout_;
  int threads_ = -1;
};

// Threads of every Network whose own count is < 0 (0 = all cores, the initial
// value). `timitseg train/evaluate/decode` set it from --threads / train.threads.
void set_default_threads(int threads);
// That count resolved (0 -> all cores): what --threads asked for.
int default_threads();

extern template class Network<float>;
extern template class Network<double>;

}  // namespace timitseg::model
