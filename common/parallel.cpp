#include "common/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

namespace timitseg {

int resolve_threads(int requested) {
  if (requested > 0) return requested;
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

namespace {

thread_local bool t_inside = false;  // true on a thread that is running parallel_for work

// One job at a time; workers sleep on a condition variable between jobs.
class Pool {
 public:
  static Pool& get() {
    static Pool pool;
    return pool;
  }

  void run(int64_t n, int threads, const std::function<void(int64_t, int)>& fn) {
    std::lock_guard<std::mutex> job_lock(job_mu_);  // concurrent callers take turns
    const int helpers = std::min<int64_t>(threads, n) - 1;
    grow(helpers);
    {
      std::lock_guard<std::mutex> lk(mu_);
      fn_ = &fn;
      n_ = n;
      next_.store(0);
      active_ = helpers;
      wanted_ = helpers;
      err_index_ = std::numeric_limits<int64_t>::max();
      err_ = nullptr;
      ++generation_;
    }
    cv_.notify_all();
    work(0);
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [&] { return active_ == 0; });
    fn_ = nullptr;
    if (err_) std::rethrow_exception(err_);
  }

  ~Pool() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
      ++generation_;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

 private:
  void grow(int helpers) {
    while (static_cast<int>(threads_.size()) < helpers) {
      const int id = static_cast<int>(threads_.size()) + 1;
      uint64_t gen = 0;
      {
        std::lock_guard<std::mutex> lk(mu_);
        gen = generation_;  // the job about to be posted has generation gen + 1
      }
      threads_.emplace_back([this, id, gen] { loop(id, gen); });
    }
  }

  void loop(int id, uint64_t seen) {
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return generation_ != seen; });
        seen = generation_;
        if (stop_) return;
        if (id > wanted_) continue;  // this job uses fewer workers
      }
      work(id);
      std::lock_guard<std::mutex> lk(mu_);
      if (--active_ == 0) done_cv_.notify_all();
    }
  }

  void work(int worker) {
    t_inside = true;
    for (;;) {
      const int64_t i = next_.fetch_add(1);
      if (i >= n_) break;
      try {
        (*fn_)(i, worker);
      } catch (...) {
        std::lock_guard<std::mutex> lk(err_mu_);
        if (i < err_index_) {
          err_index_ = i;
          err_ = std::current_exception();
        }
      }
    }
    t_inside = false;
  }

  std::mutex job_mu_, mu_, err_mu_;
  std::condition_variable cv_, done_cv_;
  std::vector<std::thread> threads_;
  const std::function<void(int64_t, int)>* fn_ = nullptr;
  int64_t n_ = 0;
  std::atomic<int64_t> next_{0};
  int active_ = 0, wanted_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  int64_t err_index_ = 0;
  std::exception_ptr err_;
};

}  // namespace

void parallel_for(int64_t n, int threads, const std::function<void(int64_t, int)>& fn) {
  if (n <= 0) return;
  threads = resolve_threads(threads);
  if (threads <= 1 || n == 1 || t_inside) {
    // Serial (also for nested calls): same exception rule, smallest i first.
    for (int64_t i = 0; i < n; ++i) fn(i, 0);
    return;
  }
  Pool::get().run(n, threads, fn);
}

}  // namespace timitseg
