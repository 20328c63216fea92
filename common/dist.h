// Data-parallel processes (docs/multigpu.md): who this process is in a
// launch by mpirun or srun, and the collectives between the processes.
//
// dist::world() is the process-wide communicator. It is a single-process one
// (size 1: every collective is a copy or nothing) unless `train` or `bench
// train` called dist::init_world() under a launcher, which makes an MPI one
// (common/dist_mpi.cpp, built with -DTIMITSEG_MPI). No header of common/
// includes mpi.h: only dist_mpi.cpp does.
//
// Every MPI collective is non-blocking and polled against a deadline
// (set_timeout, train.dist_timeout), so no process ever waits in MPI without
// a way out: past the deadline it prints one line naming the rank and the
// collective and aborts the whole job (MPI_Abort).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/enum_names.h"

namespace timitseg::dist {

// Who started this process: Open MPI's mpirun, Slurm's srun, a PMI launch, or
// nobody (one process); `threads`: ranks that are threads of one process,
// with no launcher (a test harness's world). Its word goes into run.json's
// `launcher`, the log lines and the errors that name the launcher.
enum class Launcher { none, mpirun, srun, pmi, threads };
TIMITSEG_ENUM_NAMES(Launcher, 5, {Launcher::none, "none"}, {Launcher::mpirun, "mpirun"}, {Launcher::srun, "srun"},
                    {Launcher::pmi, "pmi"}, {Launcher::threads, "threads"});

// What the launcher's environment says about this process (no MPI call).
struct Launch {
  int rank = 0, size = 1;              // in the whole job
  int local_rank = 0, local_size = 1;  // on this node
  Launcher launcher = Launcher::none;
  std::string host;                    // this node's name
};

// Reads OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE} (Open MPI's
// mpirun), PMIX_RANK / PMI_RANK / PMI_SIZE (a PMI launch, srun --mpi=pmix),
// SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID within an srun step
// (SLURM_STEP_ID set), LOCAL_RANK (the user's override of the local rank).
// Without any of them: rank 0 of 1, Launcher::none.
Launch detect_launch();
// The same from a lookup function (tests fake the environment).
Launch detect_launch(const std::function<const char*(const char*)>& getenv_fn);

// The GPU of a local rank: LOCAL_RANK's device when several are visible, 0
// when one is (Slurm's --gpus-per-task=1). Throws one line when the local
// rank has no device ("rank R (local rank L on HOST): N GPUs visible; ...").
int local_device(const Launch& l, int visible_devices);

// Every process of the job learned that a peer failed; the peer printed the
// report. main() exits with the code, silently.
class PeerFailure : public std::runtime_error {
 public:
  PeerFailure(const std::string& what, int exit_code) : std::runtime_error(what), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual const Launch& launch() const = 0;
  int rank() const { return launch().rank; }
  int size() const { return launch().size; }
  // "Open MPI v4.1.4, ..." (the first line of MPI_Get_library_version) or "none".
  virtual std::string library() const = 0;

  // In place, host memory; every rank receives the same bits.
  virtual void allreduce_sum(float* data, size_t n, const char* what) = 0;
  virtual void allreduce_sum(double* data, size_t n, const char* what) = 0;
  virtual void allreduce_sum(int64_t* data, size_t n, const char* what) = 0;
  virtual void allreduce_max(int64_t* data, size_t n, const char* what) = 0;
  virtual void allreduce_min(int64_t* data, size_t n, const char* what) = 0;
  virtual void broadcast(void* data, size_t bytes, int root, const char* what) = 0;
  // Every rank's string, in rank order, on every rank.
  virtual std::vector<std::string> allgather(const std::string& mine, const char* what) = 0;
  virtual void barrier(const char* what) = 0;
  // Ends every process of the job now (MPI_Abort; one process: std::exit).
  [[noreturn]] virtual void abort(int exit_code) = 0;

  // The deadline of every collective, seconds (train.dist_timeout).
  void set_timeout(double seconds) { timeout_ = seconds; }
  double timeout() const { return timeout_; }
  // Seconds spent waiting in collectives since the last call (metrics.jsonl's seconds.collectives).
  double take_wait_seconds() {
    const double w = wait_;
    wait_ = 0;
    return w;
  }

  // "rank 1 of 2 (host)" for reports.
  std::string who() const;

 protected:
  double timeout_ = 300.0;
  double wait_ = 0.0;
};

// Size 1: sums, maxima and broadcasts leave the data as it is.
class SingleCommunicator final : public Communicator {
 public:
  SingleCommunicator();
  const Launch& launch() const override { return launch_; }
  std::string library() const override { return "none"; }
  void allreduce_sum(float*, size_t, const char*) override {}
  void allreduce_sum(double*, size_t, const char*) override {}
  void allreduce_sum(int64_t*, size_t, const char*) override {}
  void allreduce_max(int64_t*, size_t, const char*) override {}
  void allreduce_min(int64_t*, size_t, const char*) override {}
  void broadcast(void*, size_t, int, const char*) override {}
  std::vector<std::string> allgather(const std::string& mine, const char*) override { return {mine}; }
  void barrier(const char*) override {}
  [[noreturn]] void abort(int exit_code) override;

 private:
  Launch launch_;
};

// Whether this binary was built with MPI (-DTIMITSEG_MPI).
bool mpi_built_in();

// Makes dist::world() for this process: MPI when the environment shows a
// launcher (any size) and MPI is built in; single otherwise. Launched with
// more than one process but built without MPI: throws the one line on rank 0
// and PeerFailure (silent) on the others. Call once, first thing.
void init_world();
// The communicator of this process (single until init_world made another).
Communicator& world();
// Replaces world() (tests); nullptr restores the single one.
void set_world(std::unique_ptr<Communicator> c);
// Ends MPI after a normal end or an agreed failure (no-op without MPI).
void finalize_world();

// Runs f on every rank and agrees on its outcome (f itself must call no
// collective: a rank that failed before it would never join): when it throws on any
// rank, the lowest failing rank rethrows its own exception (marked as agreed:
// failure_agreed() is then true, so main() prints it and ends normally) and
// every other rank throws PeerFailure. With one process: f() as it is.
void agree(const char* what, const std::function<void()>& f);
void agree(Communicator& w, const char* what, const std::function<void()>& f);  // over w instead of world()
bool failure_agreed();
void set_failure_agreed();

// The first 8 bytes of the SHA-256 of a buffer, as an integer (the divergence check).
int64_t fingerprint(const void* data, size_t bytes);
// Stops with one line naming the ranks whose fingerprint differs from rank 0's.
void check_same_on_every_rank(int64_t fp, const std::string& what);

// The last resort when the main thread stops making progress outside a
// collective (a blocking call that never returns): a thread that, after
// `seconds` without a stamp(), prints one line naming the rank and the phase
// and ends this process (_exit: no MPI call from this thread), which the
// launcher turns into the end of the job. seconds <= 0: off.
class Watchdog {
 public:
  explicit Watchdog(double seconds);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  // The main thread is alive and entering `phase` (a string literal or one that outlives the next stamp).
  void stamp(const char* phase);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace timitseg::dist
