// The GPU executor's gradient all-reduce timed alone (bench train on several
// processes; model/allreduce_timing.h time_gradient_allreduce).
#include <cuda_runtime.h>

#include <chrono>
#include <string>

#include "common/cuda.h"
#include "common/cuda_check.h"
#include "model/allreduce_timing.h"
#include "model/cuda/device_reducer.h"

namespace timitseg::model {

AllreduceTiming cuda_allreduce_timing(dist::Communicator& world, size_t n, int reps) {
  const std::unique_ptr<gpu::DeviceReducer> reducer =
      gpu::make_device_reducer(world, gpu::collectives_from_environment());
  float* dev = static_cast<float*>(cuda::device_alloc(n * sizeof(float)));
  cudaStream_t stream = nullptr;
  AllreduceTiming t;
  t.method = reducer->name();
  try {
    TS_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    TS_CUDA(cudaMemsetAsync(dev, 0, n * sizeof(float), stream));
    for (int i = 0; i < 3; ++i) reducer->allreduce_sum(dev, n, stream);  // warm-up (NCCL's first call sets up)
    using Clock = std::chrono::steady_clock;
    world.barrier("the all-reduce timing");
    auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) reducer->allreduce_sum(dev, n, stream);
    t.seconds = std::chrono::duration<double>(Clock::now() - t0).count() / reps;
    world.barrier("the all-reduce timing");
    t0 = Clock::now();
    for (int i = 0; i < reps; ++i) reducer->enqueue_sum(dev, dev, n, stream);
    reducer->wait(stream);
    t.seconds_queued = std::chrono::duration<double>(Clock::now() - t0).count() / reps;
  } catch (...) {
    if (stream) cudaStreamDestroy(stream);
    cuda::device_free(dev);
    throw;
  }
  TS_CUDA(cudaStreamDestroy(stream));
  cuda::device_free(dev);
  return t;
}

}  // namespace timitseg::model
