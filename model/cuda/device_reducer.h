// The gradient all-reduce of the GPU executor over several training processes
// (docs/multigpu.md "One step"): the sum over every rank of a float32 device
// buffer, in place. Include only in CUDA code.
//
// Two implementations:
//   nccl               ncclAllReduce(ncclFloat, ncclSum) on the executor's
//                      stream; the NCCL unique id is made by rank 0 and
//                      broadcast through the MPI communicator. One GPU per
//                      rank (NCCL refuses two ranks on one device). Only in
//                      builds with NCCL (nccl_built_in()).
//   mpi (host-staged)  the buffer copied to pinned host memory, summed by
//                      dist::Communicator::allreduce_sum(float*) (MPI), and
//                      copied back. Works with any world, several ranks on one
//                      GPU included; used when NCCL is not built in.
//
// TIMITSEG_GPU_COLLECTIVES (environment; a debugging and testing switch):
// "nccl" (the default when NCCL is built in) or "mpi" (host-staged, e.g. to run
// two GPU ranks on a machine with one GPU, or to compare the two sums). The
// executor chooses once, at construction, for a world of more than one process.
//
// Every rank receives the same bits (a ring or tree reduction distributes one
// result; MPI_Allreduce's sum is the same on every rank in Open MPI). Nothing
// waits without a deadline: both poll against the communicator's timeout
// (dist::Communicator::timeout(), train.dist_timeout); NCCL's asynchronous
// errors are polled too, and a failure or the deadline aborts the NCCL
// communicator and throws one line naming the rank.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <string>

#include "common/dist.h"
#include "model/collectives.h"

namespace timitseg::model::gpu {

class DeviceReducer {
 public:
  virtual ~DeviceReducer() = default;
  // Queues dst[0, n) <- the sum over every rank of src[0, n) (device float32;
  // src == dst: in place) on stream, after the work queued there before. May
  // return before the sum is done (NCCL); every rank must queue the same
  // sums in the same order. Throws std::runtime_error (one line) on a failure.
  virtual void enqueue_sum(const float* src, float* dst, size_t n, cudaStream_t stream) = 0;
  // Returns when stream has reached everything queued on it, the sums
  // included, polling this reducer's errors and the communicator's deadline
  // meanwhile (a peer that never joins ends in one line, not a hang).
  virtual void wait(cudaStream_t stream) = 0;
  // dev <- its sum over every rank, in place; returns when the sum is in dev.
  void allreduce_sum(float* dev, size_t n, cudaStream_t stream) {
    enqueue_sum(dev, dev, n, stream);
    wait(stream);
  }
  // "nccl" | "mpi (host-staged)" (the executor's description()).
  virtual std::string name() const = 0;
};

// Whether this build has NCCL (TIMITSEG_HAVE_NCCL: CUDA, MPI and nccl.h found).
bool nccl_built_in();
// TIMITSEG_GPU_COLLECTIVES: "nccl" or "mpi" (Collectives' words,
// config/config_enums.h); unset or empty: nccl when built in, else mpi. Throws
// std::invalid_argument (one line) for another value.
Collectives collectives_from_environment();

// Collectives::mpi: host-staged through world.allreduce_sum(float*).
// Collectives::nccl: an NCCL communicator of world.size() ranks on the
// current CUDA device (world.rank() its rank; a size of 1 is legal); throws
// without NCCL built in, naming the switch. world must outlive the reducer.
std::unique_ptr<DeviceReducer> make_device_reducer(dist::Communicator& world, Collectives collectives);

}  // namespace timitseg::model::gpu
