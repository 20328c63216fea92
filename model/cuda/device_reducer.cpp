// The host-staged gradient all-reduce and the choice between it and NCCL
// (model/cuda/device_reducer.h); NCCL itself: nccl_reducer.cpp.
#include "model/cuda/device_reducer.h"

#include <cstdlib>
#include <optional>
#include <stdexcept>

#include "common/cuda.h"
#include "common/cuda_check.h"
#include "settings/env.h"

namespace timitseg::model::gpu {

#ifdef TIMITSEG_HAVE_NCCL
std::unique_ptr<DeviceReducer> make_nccl_reducer(dist::Communicator& world);  // nccl_reducer.cpp
#endif

namespace {

// device -> pinned host [n] -> world.allreduce_sum -> device. The pinned buffer
// grows to the largest n once and is reused.
class HostStagedReducer final : public DeviceReducer {
 public:
  explicit HostStagedReducer(dist::Communicator& world) : world_(world) {}
  ~HostStagedReducer() override { cuda::pinned_free(host_); }
  HostStagedReducer(const HostStagedReducer&) = delete;
  HostStagedReducer& operator=(const HostStagedReducer&) = delete;

  // Synchronous: the sum is in dst on return (wait() has nothing left to do but the stream's own work).
  void enqueue_sum(const float* src, float* dst, size_t n, cudaStream_t stream) override {
    if (n == 0) return;
    if (n > cap_) {
      cuda::pinned_free(host_);
      host_ = nullptr;
      cap_ = 0;
      host_ = static_cast<float*>(cuda::pinned_alloc(n * sizeof(float)));
      cap_ = n;
    }
    TS_CUDA(cudaMemcpyAsync(host_, src, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
    TS_CUDA(cudaStreamSynchronize(stream));
    world_.allreduce_sum(host_, n, "the gradient all-reduce (host-staged)");
    TS_CUDA(cudaMemcpyAsync(dst, host_, n * sizeof(float), cudaMemcpyHostToDevice, stream));
    TS_CUDA(cudaStreamSynchronize(stream));
  }
  void wait(cudaStream_t stream) override { TS_CUDA(cudaStreamSynchronize(stream)); }
  std::string name() const override { return "mpi (host-staged)"; }

 private:
  dist::Communicator& world_;
  float* host_ = nullptr;  // pinned [cap_]
  size_t cap_ = 0;
};

}  // namespace

bool nccl_built_in() {
#ifdef TIMITSEG_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

Collectives collectives_from_environment() {
  // Its words ('nccl', 'mpi') are checked by settings/env.h's table, and are Collectives' words.
  const std::optional<std::string> s = env::word("TIMITSEG_GPU_COLLECTIVES");
  if (!s) return nccl_built_in() ? Collectives::nccl : Collectives::mpi;
  Collectives c{};
  if (!common::parse_enum(*s, &c)) throw std::logic_error("TIMITSEG_GPU_COLLECTIVES: '" + *s + "' is no Collectives word");
  return c;
}

std::unique_ptr<DeviceReducer> make_device_reducer(dist::Communicator& world, Collectives collectives) {
  if (collectives == Collectives::mpi) return std::make_unique<HostStagedReducer>(world);
#ifdef TIMITSEG_HAVE_NCCL
  return make_nccl_reducer(world);
#else
  throw std::runtime_error(
      "this timitseg was built without NCCL (nccl.h next to the CUDA toolkit, and MPI), so the GPU gradient "
      "all-reduce cannot use it; unset TIMITSEG_GPU_COLLECTIVES or set it to 'mpi' (host-staged through MPI)");
#endif
}

}  // namespace timitseg::model::gpu
