// The batches of one training epoch (train/batches.h).
#include "train/batches.h"

#include <algorithm>
#include <stdexcept>

namespace timitseg::train {
namespace {

// Fisher-Yates with the run's engine (portable: no std distributions).
void shuffle(std::vector<int>& v, std::mt19937_64& rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng() % i]);
}

}  // namespace

namespace {

// The batches of `order` (already shuffled): with bucketing, pools sorted by
// length, then cut into batches of cfg.train_batch_size.
std::vector<std::vector<int>> cut_batches(std::vector<int> order, const std::vector<int32_t>& lengths,
                                          const config::Config& cfg) {
  const size_t bs = static_cast<size_t>(cfg.train_batch_size);
  if (cfg.train_bucketing) {
    const size_t pool = bs * static_cast<size_t>(cfg.train_bucket_batches);
    for (size_t p = 0; p < order.size(); p += pool) {
      auto b = order.begin() + p, e = order.begin() + std::min(order.size(), p + pool);
      std::stable_sort(b, e, [&](int x, int y) { return lengths[x] < lengths[y]; });
    }
  }
  std::vector<std::vector<int>> batches;
  for (size_t p = 0; p < order.size(); p += bs)
    batches.emplace_back(order.begin() + p, order.begin() + std::min(order.size(), p + bs));
  return batches;
}

}  // namespace

std::vector<std::vector<int>> make_epoch_batches(const std::vector<int32_t>& lengths, const config::Config& cfg,
                                                 std::mt19937_64& rng, const std::vector<uint8_t>& groups) {
  std::vector<int> order(lengths.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  shuffle(order, rng);
  const bool mixed = !groups.empty() && std::any_of(groups.begin(), groups.end(), [&](uint8_t g) { return g != groups[0]; });
  std::vector<std::vector<int>> batches;
  if (!mixed) {
    batches = cut_batches(std::move(order), lengths, cfg);
  } else {  // each group's batches of its own utterances, in the shuffled order
    for (const uint8_t g : {uint8_t{0}, uint8_t{1}}) {
      std::vector<int> mine;
      for (int i : order)
        if ((groups[static_cast<size_t>(i)] != 0) == (g != 0)) mine.push_back(i);
      for (auto& b : cut_batches(std::move(mine), lengths, cfg)) batches.push_back(std::move(b));
    }
  }
  if (cfg.train_bucketing || mixed) {
    std::vector<int> bo(batches.size());
    for (size_t i = 0; i < bo.size(); ++i) bo[i] = static_cast<int>(i);
    shuffle(bo, rng);
    std::vector<std::vector<int>> shuffled;
    for (int i : bo) shuffled.push_back(std::move(batches[i]));
    batches = std::move(shuffled);
  }
  return batches;
}

size_t epoch_batch_count(size_t utterances, const config::Config& cfg, const std::vector<uint8_t>& groups) {
  const size_t bs = static_cast<size_t>(cfg.train_batch_size);
  const size_t ones = static_cast<size_t>(std::count_if(groups.begin(), groups.end(), [](uint8_t g) { return g != 0; }));
  if (groups.empty() || ones == 0 || ones == utterances) return (utterances + bs - 1) / bs;
  return (ones + bs - 1) / bs + (utterances - ones + bs - 1) / bs;
}

BatchPrefetcher::~BatchPrefetcher() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

model::Batch BatchPrefetcher::next() {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return !ready_.empty() || err_; });
  if (ready_.empty()) std::rethrow_exception(err_);
  model::Batch b = std::move(ready_.front());
  ready_.pop_front();
  cv_.notify_all();
  return b;
}

void BatchPrefetcher::run() {
  for (size_t i = 0; i < count_; ++i) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || ready_.size() < depth_; });
      if (stop_) return;
    }
    try {
      model::Batch b = make_(i);
      std::lock_guard<std::mutex> lk(mu_);
      ready_.push_back(std::move(b));
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu_);
      err_ = std::current_exception();
      cv_.notify_all();
      return;
    }
    cv_.notify_all();
  }
}

std::vector<int> shard_of_batch(const std::vector<int>& batch, const std::vector<int32_t>& lengths, int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size) throw std::invalid_argument("shard_of_batch: rank out of range");
  std::vector<int> order(batch.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return lengths.at(static_cast<size_t>(batch[a])) > lengths.at(static_cast<size_t>(batch[b]));
  });
  std::vector<int> mine;
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t round = k / static_cast<size_t>(size), within = k % static_cast<size_t>(size);
    const int owner = static_cast<int>(round % 2 == 0 ? within : static_cast<size_t>(size) - 1 - within);
    if (owner == rank) mine.push_back(order[k]);
  }
  std::sort(mine.begin(), mine.end());
  return mine;
}

}  // namespace timitseg::train
