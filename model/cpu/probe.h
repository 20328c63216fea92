// The host's per-layer numeric checks and fault injection (model/numerics.h),
// tapped by the CPU network (model/cpu/network.h) and the CPU executor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "config/fault_spec.h"
#include "model/numerics.h"

namespace timitseg::model {

// The per-layer numeric checks and fault injection of one step
// (model/numerics.h) on the host. Network and the CPU executor call tap()
// after each layer's forward and backward with the tensors that layer wrote,
// in the tap order of model/numerics.h. A tap plants the fault (element 0 of
// the FIRST tensor of the fault's layer and pass, when the fault's step is
// this step) and, with `check`, throws NumericsError for the first tensor
// holding a NaN or Inf (a vectorized all-finite test per tensor, in parallel
// chunks for large ones; the full TensorStats are computed only for the bad
// one). With neither a check nor a
// planned fault, enabled() is false and nothing is tapped.
class Probe {
 public:
  Probe(bool check, const config::FaultSpec& fault, int64_t step)
      : check_(check), fault_(fault), fault_now_(!fault.empty() && fault.step == step) {}
  bool enabled() const { return check_ || fault_now_; }
  // Whether tapping (layer, pass) can do anything (check on or the fault planted there).
  bool wants(const std::string& layer, config::Pass pass) const {
    return check_ || (fault_now_ && !planted_ && fault_.layer == layer && fault_.pass == pass);
  }
  // A block of a row-major matrix: rows x cols, `stride` elements between rows.
  template <class S>
  void tap(const std::string& layer, config::Pass pass, const std::string& tensor, S* data, int64_t rows, int64_t cols,
           int64_t stride);
  template <class S>
  void tap(const std::string& layer, config::Pass pass, const std::string& tensor, S* data, size_t n) {
    tap(layer, pass, tensor, data, 1, static_cast<int64_t>(n), static_cast<int64_t>(n));
  }
  template <class M>
  void tap_mat(const std::string& layer, config::Pass pass, const std::string& tensor, M&& m) {
    tap(layer, pass, tensor, m.data(), m.rows(), m.cols(), m.outerStride());
  }
  bool planted() const { return planted_; }
  bool check() const { return check_; }
  // Workers of the all-finite test of large tensors (fixed chunks; the result
  // does not depend on it). Network and the CPU executor set their own.
  void set_threads(int threads) { threads_ = threads; }
  // A tensor checked piecewise by the caller (stats of its non-finite pieces
  // merged): throws NumericsError when check() and stats.bad().
  void report(const std::string& layer, config::Pass pass, const std::string& tensor, const TensorStats& stats) const;

 private:
  bool check_;
  config::FaultSpec fault_;
  bool fault_now_;
  bool planted_ = false;
  int threads_ = 1;
};

}  // namespace timitseg::model
