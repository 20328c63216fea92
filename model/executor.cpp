// Executor selection: the device and the thread count (the executor of a
// device: model/make_executor.cpp).
#include "model/executor.h"

#include <algorithm>
#include <mutex>
#include <thread>

#include <Eigen/Core>

#include "common/cuda.h"
#include "model/cpu/network.h"  // set_default_threads

namespace timitseg::model {

const char* device_name(Device d) { return d == Device::cuda ? "cuda" : "cpu"; }

int set_threads(int threads) {
  int n = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // The CPU encoder's own tasks (model/cpu/network.h); Eigen stays single-threaded.
  // Under a lock: `compare --jobs N` trains on several threads at once, and
  // Eigen's thread setting is a plain static.
  static std::mutex mu;
  std::lock_guard<std::mutex> lk(mu);
  set_default_threads(n);
  Eigen::setNbThreads(1);
  return n;
}

void finish_alignment(crf::Session& session, const crf::Dims& dims, const crf::Params& host_params, int64_t N,
                      const std::vector<int32_t>& phones, const std::vector<int32_t>& num_phones,
                      const std::vector<int32_t>& optional, crf::AlignBoundaries boundaries, crf::AlignResult* r,
                      crf::AlignConfidence* confidence) {
  if (boundaries != crf::AlignBoundaries::viterbi)
    crf::posterior_boundaries(dims, host_params, N, phones.data(), num_phones.data(),
                              optional.empty() ? nullptr : optional.data(), r, default_threads(), 0.0,
                              crf::PosteriorWindows(), boundaries == crf::AlignBoundaries::posterior);
  if (!confidence) return;
  crf::WindowLimits windows;
  windows.threads = default_threads();
  crf::fill_align_confidence(session, dims, host_params, N, phones, num_phones, optional, *r, confidence,
                             crf::kConfidenceBatchBytes, crf::kConfidenceUtteranceBytes, windows);
}

Device resolve_device(config::DeviceSetting device, const std::string& hint) {
  switch (device) {
    case config::DeviceSetting::cpu:
      return Device::cpu;
    case config::DeviceSetting::cuda:
      cuda::require_device(hint.empty() ? "; train on the CPU with train.device=cpu or auto (or --device cpu)" : hint);
      return Device::cuda;
    case config::DeviceSetting::automatic:
      return cuda::device_count() > 0 ? Device::cuda : Device::cpu;
  }
  throw std::logic_error("resolve_device: not a DeviceSetting");
}

}  // namespace timitseg::model
