// The epoch's batches by supervision (train/batches.h): a batch holds
// utterances of one group (times or phone sequences), every utterance once,
// and one group gives the batches of no groups bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "train/batches.h"

namespace timitseg::train {
namespace {

config::Config batch_config(bool bucketing) {
  config::Config cfg;
  cfg.train_batch_size = 4;
  cfg.train_bucketing = bucketing;
  cfg.train_bucket_batches = 2;
  return cfg;
}

TEST(EpochBatches, MixedGroupsGiveBatchesOfOneGroupEach) {
  std::vector<int32_t> lengths;
  std::vector<uint8_t> groups;
  for (int i = 0; i < 23; ++i) {
    lengths.push_back(10 + (i * 7) % 13);
    groups.push_back(i % 3 == 0 ? 1 : 0);  // 8 transcripts, 15 with times
  }
  for (const bool bucketing : {false, true}) {
    const config::Config cfg = batch_config(bucketing);
    std::mt19937_64 rng(5);
    const auto batches = make_epoch_batches(lengths, cfg, rng, groups);
    EXPECT_EQ(batches.size(), epoch_batch_count(lengths.size(), cfg, groups));
    EXPECT_EQ(batches.size(), 2u + 4u);  // ceil(8/4) + ceil(15/4)
    std::multiset<int> seen;
    for (const auto& b : batches) {
      ASSERT_FALSE(b.empty());
      EXPECT_LE(b.size(), 4u);
      for (int i : b) {
        seen.insert(i);
        EXPECT_EQ(groups[i], groups[b[0]]) << "a batch mixes the two supervisions";
      }
    }
    EXPECT_EQ(seen.size(), lengths.size());
    EXPECT_EQ(std::set<int>(seen.begin(), seen.end()).size(), lengths.size()) << "an utterance twice";
  }
}

TEST(EpochBatches, OneGroupIsTheBatchesWithoutGroups) {
  std::vector<int32_t> lengths;
  for (int i = 0; i < 19; ++i) lengths.push_back(5 + (i * 11) % 17);
  for (const bool bucketing : {false, true}) {
    const config::Config cfg = batch_config(bucketing);
    for (const uint8_t g : {uint8_t{0}, uint8_t{1}}) {
      std::mt19937_64 a(9), b(9);
      EXPECT_EQ(make_epoch_batches(lengths, cfg, a), make_epoch_batches(lengths, cfg, b, std::vector<uint8_t>(19, g)));
      EXPECT_EQ(a(), b()) << "the engine moved on differently";
      EXPECT_EQ(epoch_batch_count(19, cfg, std::vector<uint8_t>(19, g)), 5u);
    }
  }
}

}  // namespace
}  // namespace timitseg::train
