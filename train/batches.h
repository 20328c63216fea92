// The batches of one training epoch (train/train.cpp, bench train): their
// order and their preparation beside the training loop.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "model/batch.h"
#include "config/config.h"

namespace timitseg::train {

// Batches of one epoch (indices into `lengths`): a seeded shuffle; with
// train.bucketing, pools of bucket_batches * batch_size utterances are sorted
// by length and cut into batches, and the batch order is shuffled again.
// groups [N] (empty: one group): a batch holds utterances of one group only
// (the GPU and CPU CRF stages take a batch of one supervision: times or phone
// sequences); with two groups, each group is cut into batches as above and the
// batch order is shuffled. With one group, the batches are the same as without.
std::vector<std::vector<int>> make_epoch_batches(const std::vector<int32_t>& lengths, const config::Config& cfg,
                                                 std::mt19937_64& rng, const std::vector<uint8_t>& groups = {});
// The number of batches make_epoch_batches cuts `utterances` into.
size_t epoch_batch_count(size_t utterances, const config::Config& cfg, const std::vector<uint8_t>& groups = {});

// A rank's share of one global batch (several training processes,
// docs/multigpu.md): the positions in `batch` (ascending) of the utterances
// that rank `rank` of `size` trains on. The batch's utterances are sorted by
// length, longest first (ties by position), and dealt in snake order (ranks
// 0..N-1, then N-1..0, ...), so shares differ in size by at most one and each
// rank gets one of the N longest. A pure function of (lengths, rank, size); a
// share is empty only when the batch has fewer utterances than ranks.
std::vector<int> shard_of_batch(const std::vector<int>& batch, const std::vector<int32_t>& lengths, int rank, int size);

// Prepares the batches of one epoch on a background thread, `depth` ahead of
// the training loop (make_batch is deterministic and draws no random numbers,
// so prefetching changes no result).
class BatchPrefetcher {
 public:
  BatchPrefetcher(std::function<model::Batch(size_t)> make, size_t count, size_t depth = 2)
      : make_(std::move(make)), count_(count), depth_(depth), worker_([this] { run(); }) {}
  ~BatchPrefetcher();
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;
  // The next batch in order; rethrows an error of make_batch.
  model::Batch next();

 private:
  void run();
  std::function<model::Batch(size_t)> make_;
  size_t count_, depth_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<model::Batch> ready_;
  std::exception_ptr err_;
  bool stop_ = false;
  std::thread worker_;  // last: started after the members it uses
};

}  // namespace timitseg::train
