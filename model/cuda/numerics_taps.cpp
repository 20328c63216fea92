// DeviceNumerics (model/cuda/numerics_taps.h).
#include "model/cuda/numerics_taps.h"

#include <cuda_runtime.h>

#include <stdexcept>

#include "common/cuda.h"
#include "common/cuda_check.h"
#include "model/cuda/ops.h"

namespace timitseg::model::gpu {

DeviceNumerics::DeviceNumerics(int max_slots) : max_slots_(max_slots) {
  if (max_slots < 1) throw std::invalid_argument("DeviceNumerics: max_slots must be >= 1");
  partials_.reserve(static_cast<size_t>(max_slots) * kStatsChunks * sizeof(StatsSlot));
  slots_.reserve(static_cast<size_t>(max_slots) * sizeof(StatsSlot));
  host_ = static_cast<StatsSlot*>(cuda::pinned_alloc(static_cast<size_t>(max_slots) * sizeof(StatsSlot)));
  try {
    void* v = cuda::pinned_alloc(2 * sizeof(double));
    value_d_ = static_cast<double*>(v);
    value_f_ = reinterpret_cast<float*>(value_d_ + 1);
  } catch (...) {
    cuda::pinned_free(host_);
    throw;
  }
}

DeviceNumerics::~DeviceNumerics() {
  cuda::pinned_free(host_);
  cuda::pinned_free(value_d_);
}

void DeviceNumerics::begin_step(bool check, const config::FaultSpec& fault, int64_t step, void* stream) {
  stream_ = stream;
  check_ = check;
  fault_ = fault;
  fault_now_ = !fault.empty() && fault.step == step;
  planted_ = false;
  names_.clear();
  read_ = 0;
  if (fault_now_) {
    // The previous step's copies from these two values are done: every step
    // synchronizes the stream before it stages its batch.
    *value_f_ = fault.value;
    *value_d_ = static_cast<double>(fault.value);
  }
}

void DeviceNumerics::tap(const std::string& layer, config::Pass pass, const std::vector<TapTensor>& tensors) {
  if (!active() || tensors.size() == 0) return;
  cudaStream_t s = static_cast<cudaStream_t>(stream_);
  if (fault_now_ && !planted_ && fault_.layer == layer && fault_.pass == pass) {
    const TapTensor& t = *tensors.begin();
    if (t.is_double)
      TS_CUDA(cudaMemcpyAsync(t.data, value_d_, sizeof(double), cudaMemcpyHostToDevice, s));
    else
      TS_CUDA(cudaMemcpyAsync(t.data, value_f_, sizeof(float), cudaMemcpyHostToDevice, s));
    planted_ = true;
  }
  if (!check_) return;
  if (tensors.size() > static_cast<size_t>(kStatsMaxEntries))
    throw std::logic_error("DeviceNumerics: layer " + layer + " taps " + std::to_string(tensors.size()) +
                           " tensors (at most " + std::to_string(kStatsMaxEntries) + ")");
  if (names_.size() + tensors.size() > static_cast<size_t>(max_slots_))
    throw std::logic_error("DeviceNumerics: more than " + std::to_string(max_slots_) + " tapped tensors in one step");
  StatsEntry e[kStatsMaxEntries];
  int count = 0;
  for (const TapTensor& t : tensors) {
    e[count] = StatsEntry{t.data, t.rows, t.cols, t.stride, t.is_double ? 1 : 0, static_cast<int>(names_.size())};
    ++count;
    NumericsHit h;
    h.layer = layer;
    h.pass = pass;
    h.tensor = t.name;
    names_.push_back(std::move(h));
  }
  stats_partials(e, count, partials_.as<StatsSlot>(), stream_);
}

void DeviceNumerics::queue_readback() {
  const int n = slots();
  if (n == read_) return;
  stats_final(partials_.as<StatsSlot>(), read_, n, slots_.as<StatsSlot>(), stream_);
  TS_CUDA(cudaMemcpyAsync(host_ + read_, slots_.as<StatsSlot>() + read_, (n - read_) * sizeof(StatsSlot),
                          cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream_)));
  read_ = n;
}

TensorStats DeviceNumerics::stats(int i) const {
  if (i < 0 || i >= read_) throw std::out_of_range("DeviceNumerics: slot " + std::to_string(i) + " is not read back");
  const StatsSlot& s = host_[i];
  TensorStats t;
  t.nan = static_cast<int64_t>(s.nan);
  t.inf = static_cast<int64_t>(s.inf);
  t.finite = static_cast<int64_t>(s.finite);
  t.min = s.min;
  t.max = s.max;
  return t;
}

std::optional<NumericsHit> DeviceNumerics::first_hit() const {
  for (int i = 0; i < read_; ++i) {
    const TensorStats st = stats(i);
    if (st.bad()) {
      NumericsHit h = names_[i];
      h.stats = st;
      return h;
    }
  }
  return std::nullopt;
}

}  // namespace timitseg::model::gpu
