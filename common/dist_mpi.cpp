// The MPI communicator (common/dist.h), compiled only with TIMITSEG_HAVE_MPI.
// Only the main thread calls MPI (MPI_THREAD_FUNNELED). Every collective is
// the non-blocking call followed by an MPI_Test loop against the deadline, so
// a rank never waits without a way out: past train.dist_timeout it prints one
// line and ends the job with MPI_Abort.
#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/dist.h"
#include "settings/env.h"

namespace timitseg::dist {
namespace {

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(const Launch& env) : launch_(env) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &launch_.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &launch_.size);
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, launch_.rank, MPI_INFO_NULL, &local);
    int lr = 0, ls = 1;
    MPI_Comm_rank(local, &lr);
    MPI_Comm_size(local, &ls);
    MPI_Comm_free(&local);
    if (!env::integer("LOCAL_RANK")) launch_.local_rank = lr;  // LOCAL_RANK: the user's override
    launch_.local_size = ls;
    char name[MPI_MAX_PROCESSOR_NAME] = {0};
    int len = 0;
    MPI_Get_processor_name(name, &len);
    launch_.host.assign(name, static_cast<size_t>(len));
    char lib[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
    MPI_Get_library_version(lib, &len);
    library_.assign(lib, static_cast<size_t>(len));
    const size_t nl = library_.find_first_of(",\n");
    if (nl != std::string::npos) library_.resize(nl);
  }

  const Launch& launch() const override { return launch_; }
  std::string library() const override { return library_; }

  void allreduce_sum(float* d, size_t n, const char* what) override { reduce(d, n, MPI_FLOAT, MPI_SUM, what); }
  void allreduce_sum(double* d, size_t n, const char* what) override { reduce(d, n, MPI_DOUBLE, MPI_SUM, what); }
  void allreduce_sum(int64_t* d, size_t n, const char* what) override { reduce(d, n, MPI_INT64_T, MPI_SUM, what); }
  void allreduce_max(int64_t* d, size_t n, const char* what) override { reduce(d, n, MPI_INT64_T, MPI_MAX, what); }
  void allreduce_min(int64_t* d, size_t n, const char* what) override { reduce(d, n, MPI_INT64_T, MPI_MIN, what); }

  void broadcast(void* data, size_t bytes, int root, const char* what) override {
    MPI_Request req;
    MPI_Ibcast(data, count(bytes, what), MPI_BYTE, root, MPI_COMM_WORLD, &req);
    wait(req, what);
  }

  std::vector<std::string> allgather(const std::string& mine, const char* what) override {
    const int n = launch_.size;
    int my_len = count(mine.size(), what);
    std::vector<int> lens(static_cast<size_t>(n));
    MPI_Request req;
    MPI_Iallgather(&my_len, 1, MPI_INT, lens.data(), 1, MPI_INT, MPI_COMM_WORLD, &req);
    wait(req, what);
    std::vector<int> displs(static_cast<size_t>(n));
    int64_t total = 0;
    for (int i = 0; i < n; ++i) {
      displs[i] = count(static_cast<size_t>(total), what);
      total += lens[i];
    }
    std::vector<char> all(static_cast<size_t>(std::max<int64_t>(1, total)));
    MPI_Iallgatherv(mine.data(), my_len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, MPI_COMM_WORLD,
                    &req);
    wait(req, what);
    std::vector<std::string> out(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) out[i].assign(all.data() + displs[i], static_cast<size_t>(lens[i]));
    return out;
  }

  void barrier(const char* what) override {
    MPI_Request req;
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    wait(req, what);
  }

  [[noreturn]] void abort(int exit_code) override {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);  // MPI_Abort does not return; in case it does
  }

 private:
  int count(size_t n, const char* what) const {
    if (n > static_cast<size_t>(INT_MAX))
      throw std::length_error(std::string("dist: ") + what + ": " + std::to_string(n) + " elements exceed MPI's int count");
    return static_cast<int>(n);
  }

  void reduce(void* d, size_t n, MPI_Datatype type, MPI_Op op, const char* what) {
    MPI_Request req;
    MPI_Iallreduce(MPI_IN_PLACE, d, count(n, what), type, op, MPI_COMM_WORLD, &req);
    wait(req, what);
  }

  // MPI_Test until done: spins for the first 2 ms (Open MPI progresses a large
  // message only inside MPI calls, fragment by fragment: a sleep between tests
  // would stretch a 4.9 MB all-reduce many times), then yields the core
  // between tests up to 50 ms, then sleeps 50 us between tests (a rank waiting
  // for a slower one leaves the CPU to it); past the deadline one line and MPI_Abort.
  void wait(MPI_Request& req, const char* what) {
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    int done = 0;
    for (long i = 0;; ++i) {
      MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      if (done) break;
      const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
      if (waited > timeout_) {
        std::fflush(stdout);
        std::fprintf(stderr,
                     "error: %s: no progress in %s for %.0f s; aborting the job (train.dist_timeout; a rank that "
                     "stopped answering, or one still busy elsewhere)\n",
                     who().c_str(), what, timeout_);
        abort(1);
      }
      if (waited > 50e-3)
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      else if (waited > 2e-3)
        std::this_thread::yield();
    }
    wait_ += std::chrono::duration<double>(Clock::now() - t0).count();
  }

  Launch launch_;
  std::string library_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(const Launch& from_env) {
  return std::make_unique<MpiCommunicator>(from_env);
}

void finalize_mpi() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Finalize();
}

}  // namespace timitseg::dist
