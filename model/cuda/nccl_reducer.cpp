// The NCCL gradient all-reduce (model/cuda/device_reducer.h), compiled only
// with TIMITSEG_HAVE_NCCL. The communicator is nonblocking (ncclConfig_t
// blocking = 0): every call returns at once and its completion, like the
// all-reduce's on the stream, is polled together with
// ncclCommGetAsyncError against the deadline dist::Communicator::timeout().
// A failure or the deadline aborts the communicator (ncclCommAbort) and throws
// one line naming the call, this rank and NCCL's error string; the reducer is
// unusable afterwards (the training run stops anyway).
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>

#include "model/cuda/device_reducer.h"

namespace timitseg::model::gpu {

namespace {

using Clock = std::chrono::steady_clock;

class NcclReducer final : public DeviceReducer {
 public:
  explicit NcclReducer(dist::Communicator& world) : world_(world) {
    ncclUniqueId id{};
    if (world.rank() == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    world.broadcast(&id, sizeof id, 0, "the NCCL unique id");
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t r = ncclCommInitRankConfig(&comm_, world.size(), id, world.rank(), &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      comm_ = nullptr;  // nothing to abort
      fail(r, "ncclCommInitRankConfig", init_hint(r));
    }
    wait_ready("ncclCommInitRankConfig", init_hint(ncclInvalidUsage));
  }
  ~NcclReducer() override {
    if (!comm_) return;
    // A normal end: flush and free (bounded by the deadline); on the way out
    // of a failure, or past the deadline: abort (never waits for a peer).
    if (std::uncaught_exceptions() == 0) {
      try {
        ncclResult_t r = ncclCommFinalize(comm_);
        if (r == ncclInProgress) r = poll_ready(Clock::now() + deadline());
        if (r == ncclSuccess) {
          ncclCommDestroy(comm_);
          return;
        }
      } catch (...) {
      }
    }
    ncclCommAbort(comm_);
  }
  NcclReducer(const NcclReducer&) = delete;
  NcclReducer& operator=(const NcclReducer&) = delete;

  void enqueue_sum(const float* src, float* dst, size_t n, cudaStream_t stream) override {
    if (!comm_) throw std::runtime_error("NCCL: the communicator of " + world_.who() + " was aborted by an earlier failure");
    if (n == 0) return;
    const ncclResult_t r = ncclAllReduce(src, dst, n, ncclFloat, ncclSum, comm_, stream);
    check(r, "ncclAllReduce");
    if (r == ncclInProgress) wait_ready("ncclAllReduce", "");
  }

  // The stream: done, a CUDA error, an NCCL error, or the deadline. Spins on
  // cudaStreamQuery for the first kSpin (a step's reduction takes tens of
  // microseconds; a yield there costs as much), then yields; NCCL's
  // asynchronous error and the deadline are looked at every 64 polls.
  void wait(cudaStream_t stream) override {
    if (!comm_) throw std::runtime_error("NCCL: the communicator of " + world_.who() + " was aborted by an earlier failure");
    constexpr auto kSpin = std::chrono::milliseconds(2);
    const auto start = Clock::now(), until = start + deadline();
    for (unsigned poll = 0;; ++poll) {
      const cudaError_t q = cudaStreamQuery(stream);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) {
        abort_comm();
        throw std::runtime_error("cuda: the stream of the NCCL all-reduce on " + world_.who() +
                                 " failed: " + cudaGetErrorString(q));
      }
      if (poll % 64 != 63) continue;
      ncclResult_t st = ncclSuccess;
      check(ncclCommGetAsyncError(comm_, &st), "ncclCommGetAsyncError");
      if (st != ncclSuccess && st != ncclInProgress) fail(st, "ncclAllReduce (asynchronous error)", "");
      const auto now = Clock::now();
      if (now > until) timed_out("ncclAllReduce of the gradient");
      if (now - start > kSpin) std::this_thread::yield();
    }
  }
  std::string name() const override { return "nccl"; }

 private:
  Clock::duration deadline() const {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(world_.timeout()));
  }
  static std::string init_hint(ncclResult_t r) {
    return r == ncclInvalidUsage ? " (NCCL needs one GPU per rank; to run several ranks on one GPU set "
                                   "TIMITSEG_GPU_COLLECTIVES=mpi)"
                                 : "";
  }
  void abort_comm() noexcept {
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  [[noreturn]] void fail(ncclResult_t r, const char* call, const std::string& hint) {
    const char* last = ncclGetLastError(comm_);
    std::string line = std::string("NCCL: ") + call + " failed on " + world_.who() + ": " + ncclGetErrorString(r);
    if (last && *last) line += std::string(" (") + last + ")";
    abort_comm();
    throw std::runtime_error(line + hint);
  }
  // The same words as the MPI communicator's deadline (common/dist_mpi.cpp).
  [[noreturn]] void timed_out(const char* what) {
    abort_comm();
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.0f", world_.timeout());
    throw std::runtime_error(std::string("NCCL: no progress in ") + what + " for " + secs +
                             " s (train.dist_timeout; a rank that stopped answering, or one still busy elsewhere)");
  }
  // A call's immediate result: in progress and success go on, anything else fails.
  void check(ncclResult_t r, const char* call) {
    if (r != ncclSuccess && r != ncclInProgress) fail(r, call, "");
  }
  // The communicator's state until it leaves ncclInProgress, or the deadline (then ncclInProgress).
  ncclResult_t poll_ready(Clock::time_point until) {
    ncclResult_t st = ncclInProgress;
    while (st == ncclInProgress && Clock::now() <= until) {
      if (ncclCommGetAsyncError(comm_, &st) != ncclSuccess) return ncclInternalError;
      if (st == ncclInProgress) std::this_thread::yield();
    }
    return st;
  }
  void wait_ready(const char* call, const std::string& hint) {
    const ncclResult_t st = poll_ready(Clock::now() + deadline());
    if (st == ncclInProgress) timed_out(call);
    if (st != ncclSuccess) fail(st, call, hint);
  }

  dist::Communicator& world_;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

std::unique_ptr<DeviceReducer> make_nccl_reducer(dist::Communicator& world) {
  return std::make_unique<NcclReducer>(world);
}

}  // namespace timitseg::model::gpu
