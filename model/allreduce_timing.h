// The gradient all-reduce of a training step of several processes, timed
// alone (`bench train` under mpirun; docs/multigpu.md "Scaling model").
#pragma once

#include <cstddef>
#include <string>

#include "common/dist.h"
#include "model/encoder.h"

namespace timitseg::model {

// The gradient all-reduce alone, as a training step of several processes runs
// it (bench train under mpirun; docs/multigpu.md "Scaling model"): `reps` sums
// of an n-float buffer over world's ranks, after a warm-up; seconds per
// all-reduce on this rank. device cpu: MPI_Allreduce on host memory; cuda: the
// GPU executor's reducer (NCCL, or host-staged with TIMITSEG_GPU_COLLECTIVES=mpi).
struct AllreduceTiming {
  double seconds = 0;         // per all-reduce, each waited for (queued, then waited; a step's pattern)
  double seconds_queued = 0;  // per all-reduce, `reps` queued back to back and waited for once (nccl-tests'
                              // loop: the GPU time); the same as seconds on the CPU
  std::string method;         // "mpi" | "nccl" | "mpi (host-staged)"
};
AllreduceTiming time_gradient_allreduce(Device device, dist::Communicator& world, size_t n, int reps);

// time_gradient_allreduce on the current CUDA device: defined in
// model/cuda/allreduce_timing.cpp when this build has CUDA (TIMITSEG_HAVE_CUDA);
// never called otherwise.
AllreduceTiming cuda_allreduce_timing(dist::Communicator& world, size_t n, int reps);

}  // namespace timitseg::model
