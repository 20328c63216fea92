// The process-wide communicator without MPI (common/dist.h); the MPI one is
// in dist_mpi.cpp, compiled only with TIMITSEG_HAVE_MPI.
#include "common/dist.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "common/sha256.h"
#include "settings/env.h"

namespace timitseg::dist {

#ifdef TIMITSEG_HAVE_MPI
// dist_mpi.cpp
std::unique_ptr<Communicator> make_mpi_communicator(const Launch& from_env);
void finalize_mpi();
#endif

namespace {

// A launcher's count, through settings/env.h (LOCAL_RANK etc. are in its table;
// a value that is not a count reads as unset).
int env_int(const env::Lookup& env, const char* name, int fallback) {
  const std::optional<long long> v = env::integer(name, env);
  return v ? static_cast<int>(*v) : fallback;
}

std::string hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

std::unique_ptr<Communicator>& world_slot() {
  static std::unique_ptr<Communicator> w;
  return w;
}

bool g_failure_agreed = false;

}  // namespace

Launch detect_launch(const env::Lookup& env) {
  Launch l;
  l.host = hostname();
  if (env::raw("OMPI_COMM_WORLD_SIZE", env)) {
    l.launcher = Launcher::mpirun;
    l.size = env_int(env, "OMPI_COMM_WORLD_SIZE", 1);
    l.rank = env_int(env, "OMPI_COMM_WORLD_RANK", 0);
    l.local_rank = env_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0);
    l.local_size = env_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1);
  } else if (env::raw("SLURM_STEP_ID", env) && env::raw("SLURM_NTASKS", env)) {
    l.launcher = Launcher::srun;
    l.size = env_int(env, "SLURM_NTASKS", 1);
    l.rank = env_int(env, "SLURM_PROCID", 0);
    l.local_rank = env_int(env, "SLURM_LOCALID", 0);
    l.local_size = env_int(env, "SLURM_NTASKS_PER_NODE", 1);
  } else if (env::raw("PMI_SIZE", env) || env::raw("PMIX_RANK", env)) {
    l.launcher = Launcher::pmi;
    l.size = env_int(env, "PMI_SIZE", 1);
    l.rank = env_int(env, "PMI_RANK", env_int(env, "PMIX_RANK", 0));
  }
  l.local_rank = env_int(env, "LOCAL_RANK", l.local_rank);
  if (l.size < 1) l.size = 1;
  if (l.rank >= l.size) l.rank = 0;
  return l;
}

Launch detect_launch() { return detect_launch(env::Lookup{}); }

int local_device(const Launch& l, int visible) {
  if (visible <= 0)
    throw std::runtime_error("rank " + std::to_string(l.rank) + " (" + l.host + "): no CUDA device is visible");
  if (visible == 1) return 0;
  if (l.local_rank >= visible)
    throw std::runtime_error("rank " + std::to_string(l.rank) + " (local rank " + std::to_string(l.local_rank) +
                             " on " + l.host + "): " + std::to_string(visible) + " GPUs visible; launch at most " +
                             std::to_string(visible) + " ranks per node (one GPU each)");
  return l.local_rank;
}

std::string Communicator::who() const {
  return "rank " + std::to_string(rank()) + " of " + std::to_string(size()) + " (" + launch().host + ")";
}

SingleCommunicator::SingleCommunicator() { launch_.host = hostname(); }

void SingleCommunicator::abort(int exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(exit_code);
}

bool mpi_built_in() {
#ifdef TIMITSEG_HAVE_MPI
  return true;
#else
  return false;
#endif
}

void init_world() {
  const Launch l = detect_launch();
  if (l.launcher == Launcher::none) return;
  // TIMITSEG_ACT_WITHOUT_MPI=1: behave as a build without MPI (the test of that
  // build's refusal, tests/dist/dist_cpu.py, runs on the CI's MPI build).
  const bool mpi = mpi_built_in() && env::integer("TIMITSEG_ACT_WITHOUT_MPI").value_or(0) != 1;
  if (!mpi) {
    if (l.size == 1) return;
    const std::string line = "this timitseg was built without MPI (-DTIMITSEG_MPI=OFF or no MPI found), so it cannot be "
                             "rank " + std::to_string(l.rank) + " of " + std::to_string(l.size) + " started by " +
                             common::to_string(l.launcher) + "; rebuild with libopenmpi-dev installed, or run one process";
    if (l.rank == 0) throw std::runtime_error(line);
    throw PeerFailure(line, 1);
  }
#ifdef TIMITSEG_HAVE_MPI
  world_slot() = make_mpi_communicator(l);
#endif
}

Communicator& world() {
  static SingleCommunicator single;
  return world_slot() ? *world_slot() : single;
}

void set_world(std::unique_ptr<Communicator> c) { world_slot() = std::move(c); }

void finalize_world() {
#ifdef TIMITSEG_HAVE_MPI
  if (world_slot()) finalize_mpi();
#endif
}

bool failure_agreed() { return g_failure_agreed; }
void set_failure_agreed() { g_failure_agreed = true; }

void agree(const char* what, const std::function<void()>& f) { agree(world(), what, f); }

void agree(Communicator& w, const char* what, const std::function<void()>& f) {
  if (w.size() == 1) {
    f();
    return;
  }
  std::exception_ptr err;
  std::string message;
  try {
    f();
  } catch (const PeerFailure&) {
    throw;  // already agreed inside f
  } catch (const std::exception& e) {
    err = std::current_exception();
    message = e.what();
  }
  int64_t first = err ? w.rank() : INT64_MAX;
  w.allreduce_min(&first, 1, what);
  if (first == INT64_MAX) return;
  const std::vector<std::string> all = w.allgather(err ? message : std::string(), what);
  if (first == w.rank()) {
    set_failure_agreed();
    std::rethrow_exception(err);
  }
  throw PeerFailure("rank " + std::to_string(first) + " of " + std::to_string(w.size()) + " failed (" + what +
                        "): " + all.at(static_cast<size_t>(first)),
                    1);
}

int64_t fingerprint(const void* data, size_t bytes) {
  Sha256 h;
  h.update(data, bytes);
  const auto d = h.digest();
  int64_t v = 0;
  std::memcpy(&v, d.data(), sizeof v);
  return v;
}

void check_same_on_every_rank(int64_t fp, const std::string& what) {
  Communicator& w = world();
  if (w.size() == 1) return;
  int64_t lo = fp, hi = fp;
  w.allreduce_min(&lo, 1, "the divergence check");
  w.allreduce_max(&hi, 1, "the divergence check");
  if (lo == hi) return;
  int64_t root = fp;
  w.broadcast(&root, sizeof root, 0, "the divergence check");
  const std::vector<std::string> flags = w.allgather(fp == root ? "same" : "differs", "the divergence check");
  std::string ranks;
  for (size_t i = 0; i < flags.size(); ++i)
    if (flags[i] != "same") ranks += (ranks.empty() ? "" : ", ") + std::to_string(i);
  const std::string line = what + " differs between the ranks: rank(s) " + ranks + " differ from rank 0 (a reduction " +
                           "that is not the same on every rank, or different input data); stopping";
  if (w.rank() == 0) {
    set_failure_agreed();
    throw std::runtime_error(line);
  }
  throw PeerFailure(line, 1);
}

struct Watchdog::State {
  double seconds = 0;
  std::atomic<int64_t> last_ns{0};
  std::atomic<const char*> phase{"the set-up"};
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::thread thread;
};

namespace {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

Watchdog::Watchdog(double seconds) : s_(std::make_unique<State>()) {
  s_->seconds = seconds;
  s_->last_ns = now_ns();
  if (seconds <= 0) return;
  State* st = s_.get();
  const std::string who = world().who();
  st->thread = std::thread([st, who] {
    std::unique_lock<std::mutex> lock(st->mu);
    while (!st->stop) {
      st->cv.wait_for(lock, std::chrono::milliseconds(200));
      const double idle = double(now_ns() - st->last_ns.load()) * 1e-9;
      if (!st->stop && idle > st->seconds) {
        std::fprintf(stderr, "error: %s: no progress for %.0f s in %s (the watchdog: 2 x train.dist_timeout); ending "
                     "this process so that the launcher ends the job\n", who.c_str(), idle, st->phase.load());
        std::fflush(stderr);
        std::_Exit(1);
      }
    }
  });
}

Watchdog::~Watchdog() {
  if (!s_->thread.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->stop = true;
  }
  s_->cv.notify_all();
  s_->thread.join();
}

void Watchdog::stamp(const char* phase) {
  s_->phase = phase;
  s_->last_ns = now_ns();
}

}  // namespace timitseg::dist
