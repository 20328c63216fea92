// time_gradient_allreduce (model/allreduce_timing.h): MPI on host memory, or
// the GPU executor's reducer (model/cuda/allreduce_timing.cpp).
#include "model/allreduce_timing.h"

#include <chrono>
#include <stdexcept>
#include <vector>

namespace timitseg::model {

AllreduceTiming time_gradient_allreduce(Device device, dist::Communicator& world, size_t n, int reps) {
  if (reps < 1) throw std::invalid_argument("time_gradient_allreduce: reps must be >= 1");
  if (device == Device::cuda) {
#ifdef TIMITSEG_HAVE_CUDA
    return cuda_allreduce_timing(world, n, reps);
#endif
  }
  std::vector<float> buf(n, 0.f);
  for (int i = 0; i < 3; ++i) world.allreduce_sum(buf.data(), n, "the all-reduce timing");
  world.barrier("the all-reduce timing");
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) world.allreduce_sum(buf.data(), n, "the all-reduce timing");
  AllreduceTiming t;
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
  t.seconds_queued = t.seconds;
  t.method = "mpi";
  return t;
}

}  // namespace timitseg::model
