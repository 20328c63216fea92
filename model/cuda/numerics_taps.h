// Per-layer numeric checks and fault planting on the GPU (model/numerics.h
// has the layer names, the tap order and what each tap sees).
//
// One DeviceNumerics belongs to the GPU executor and is shared with its
// encoder. Per step:
//   begin_step(check, fault, step)   the step's options; resets the slots
//   tap(layer, pass, {tensors})      after each layer's forward / backward:
//                                      1. plants the fault (one cudaMemcpyAsync of
//                                         the value into element 0 of the FIRST
//                                         tensor) when (layer, pass, step) match;
//                                      2. when checking, ONE stage-1 launch
//                                         reduces every tensor of the call into
//                                         its own slot (gpu::stats_partials)
//   queue_readback()                 one stage-2 launch over the new slots and
//                                      one async copy into pinned host memory
//   (the caller synchronizes the stream: the executor's existing sync point)
//   first_hit()                      the first slot (tap order) with a NaN/Inf
// The (layer, pass, tensor) names of the slots stay on the host in tap order.
// With check off and no fault planned at this step, tap() returns at once:
// no launch, no copy, no slot (slots() == 0).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "common/buffer.h"
#include "model/crf_params.h"
#include "model/numerics.h"

namespace timitseg::model::gpu {

struct StatsSlot;

// A tapped device tensor: rows x cols elements, row r at data + r * stride
// (stride == cols: contiguous), float32 or float64.
struct TapTensor {
  std::string name;
  void* data = nullptr;
  int64_t rows = 0, cols = 0, stride = 0;
  bool is_double = false;
  static TapTensor f32(std::string name, float* p, size_t n) {
    return {std::move(name), p, 1, static_cast<int64_t>(n), static_cast<int64_t>(n), false};
  }
  // The gradient of a CRF tensor inside the flat gradient `grad`: "d_" and its checkpoint name.
  static TapTensor grad_of(const CrfTensor& t, float* grad) { return f32(std::string("d_") + t.name, t.in(grad), t.size); }
  static TapTensor f64(std::string name, double* p, size_t n) {
    return {std::move(name), p, 1, static_cast<int64_t>(n), static_cast<int64_t>(n), true};
  }
  // columns [0, cols) of each of `rows` rows spaced `stride` floats apart
  static TapTensor f32_strided(std::string name, float* p, int64_t rows, int64_t cols, int64_t stride) {
    return {std::move(name), p, rows, cols, stride, false};
  }
};

class DeviceNumerics {
 public:
  // max_slots: slots of one step at most (tap() throws std::logic_error past it).
  explicit DeviceNumerics(int max_slots);
  ~DeviceNumerics();
  DeviceNumerics(const DeviceNumerics&) = delete;
  DeviceNumerics& operator=(const DeviceNumerics&) = delete;

  // The slots of the last step are forgotten. stream: a cudaStream_t.
  void begin_step(bool check, const config::FaultSpec& fault, int64_t step, void* stream);
  bool checking() const { return check_; }
  // Anything to do this step (checking, or a fault planned at this step).
  bool active() const { return check_ || fault_now_; }
  // This (layer, pass) is checked or gets the fault now: work that exists only
  // for a tap (the input-gradient GEMM) runs when this is true.
  bool wants(const std::string& layer, config::Pass pass) const {
    return check_ || (fault_now_ && fault_.layer == layer && fault_.pass == pass);
  }
  // The fault of this step goes into this (layer, pass).
  bool plants(const std::string& layer, config::Pass pass) const {
    return fault_now_ && fault_.layer == layer && fault_.pass == pass;
  }
  void tap(const std::string& layer, config::Pass pass, const std::vector<TapTensor>& tensors);

  // Stage 2 over the slots tapped since the last read-back and their async
  // copy to the host; valid after the caller synchronizes the stream.
  void queue_readback();
  // The first slot in tap order with a NaN or Inf among those read back.
  std::optional<NumericsHit> first_hit() const;
  // Slots tapped this step (0 with check off).
  int slots() const { return static_cast<int>(names_.size()); }
  // Stats of slot i (read back) and its names, for tests.
  TensorStats stats(int i) const;
  const NumericsHit& slot_name(int i) const { return names_.at(i); }

 private:
  int max_slots_;
  void* stream_ = nullptr;
  bool check_ = false, fault_now_ = false, planted_ = false;
  config::FaultSpec fault_;
  std::vector<NumericsHit> names_;  // [slots] layer, pass, tensor (stats unused)
  int read_ = 0;                    // slots [0, read_) are queued for the host
  Buffer partials_{Memory::device, 0}, slots_{Memory::device, 0};
  StatsSlot* host_ = nullptr;       // pinned [max_slots]
  float* value_f_ = nullptr;        // pinned: the fault value (float, double)
  double* value_d_ = nullptr;
};

}  // namespace timitseg::model::gpu
