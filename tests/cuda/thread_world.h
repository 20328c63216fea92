// Test support: N "ranks" as threads of one process, each with a
// dist::Communicator whose collectives really combine the threads' buffers
// (the GPU executor's several-process path runs without MPI or a second GPU;
// the gradient all-reduce is then the host-staged one, "mpi").
//
// Sums run in rank order (((r0 + r1) + r2) ...), computed by every rank from
// the same inputs, so every rank receives the same bits, as MPI promises.
// A rank that does not arrive within 120 s fails the test instead of hanging.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/dist.h"

namespace timitseg::testsupport {

// The rendezvous of the ranks: each posts a pointer, then every rank reads
// every rank's pointer (between two barriers, while nobody writes).
class ThreadGroup {
 public:
  explicit ThreadGroup(int n) : n_(n), slots_(static_cast<size_t>(n), nullptr) {}
  int size() const { return n_; }
  void exchange(int rank, const void* mine, const std::function<void(const std::vector<const void*>&)>& read_all) {
    slots_[static_cast<size_t>(rank)] = mine;
    barrier();
    read_all(slots_);
    barrier();
  }

 private:
  void barrier() {
    std::unique_lock<std::mutex> lk(m_);
    const uint64_t gen = gen_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++gen_;
      cv_.notify_all();
      return;
    }
    if (!cv_.wait_for(lk, std::chrono::seconds(120), [&] { return gen_ != gen; }))
      throw std::runtime_error("ThreadGroup: a rank did not reach the collective within 120 s");
  }
  int n_;
  std::vector<const void*> slots_;
  std::mutex m_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t gen_ = 0;
};

class ThreadCommunicator final : public dist::Communicator {
 public:
  ThreadCommunicator(ThreadGroup& group, int rank) : group_(group) {
    launch_.rank = rank;
    launch_.size = group.size();
    launch_.local_rank = rank;
    launch_.local_size = group.size();
    launch_.launcher = dist::Launcher::threads;
    launch_.host = "test";
  }
  const dist::Launch& launch() const override { return launch_; }
  std::string library() const override { return "threads (test)"; }
  void allreduce_sum(float* d, size_t n, const char*) override { combine(d, n, [](float a, float b) { return a + b; }); }
  void allreduce_sum(double* d, size_t n, const char*) override {
    combine(d, n, [](double a, double b) { return a + b; });
  }
  void allreduce_sum(int64_t* d, size_t n, const char*) override {
    combine(d, n, [](int64_t a, int64_t b) { return a + b; });
  }
  void allreduce_max(int64_t* d, size_t n, const char*) override {
    combine(d, n, [](int64_t a, int64_t b) { return a > b ? a : b; });
  }
  void allreduce_min(int64_t* d, size_t n, const char*) override {
    combine(d, n, [](int64_t a, int64_t b) { return a < b ? a : b; });
  }
  void broadcast(void* data, size_t bytes, int root, const char*) override {
    std::vector<char> tmp(bytes);
    group_.exchange(rank(), data, [&](const std::vector<const void*>& all) {
      std::memcpy(tmp.data(), all[static_cast<size_t>(root)], bytes);
    });
    std::memcpy(data, tmp.data(), bytes);
  }
  std::vector<std::string> allgather(const std::string& mine, const char*) override {
    std::vector<std::string> out;
    group_.exchange(rank(), &mine, [&](const std::vector<const void*>& all) {
      for (const void* p : all) out.push_back(*static_cast<const std::string*>(p));
    });
    return out;
  }
  void barrier(const char*) override {
    group_.exchange(rank(), nullptr, [](const std::vector<const void*>&) {});
  }
  [[noreturn]] void abort(int) override { std::abort(); }

 private:
  template <class T, class Op>
  void combine(T* data, size_t n, Op op) {
    std::vector<T> tmp(n);
    group_.exchange(rank(), data, [&](const std::vector<const void*>& all) {
      for (size_t i = 0; i < n; ++i) {
        T acc = static_cast<const T*>(all[0])[i];
        for (size_t r = 1; r < all.size(); ++r) acc = op(acc, static_cast<const T*>(all[r])[i]);
        tmp[i] = acc;
      }
    });
    std::memcpy(data, tmp.data(), n * sizeof(T));
  }
  ThreadGroup& group_;
  dist::Launch launch_;
};

}  // namespace timitseg::testsupport
