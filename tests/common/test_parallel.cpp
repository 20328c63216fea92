// common/parallel.h: every index runs exactly once, the smallest failing
// index's exception is rethrown, nested calls run, results by index do not
// depend on the thread count.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/parallel.h"

using namespace timitseg;

TEST(Parallel, ResolveThreads) {
  EXPECT_EQ(resolve_threads(3), 3);
  EXPECT_GE(resolve_threads(0), 1);
  EXPECT_GE(resolve_threads(-1), 1);
}

TEST(Parallel, EveryIndexOnceForAnyThreadCount) {
  for (int threads : {1, 2, 3, 8}) {
    for (int64_t n : {0, 1, 7, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      for (auto& h : hits) h = 0;
      parallel_for(n, threads, [&](int64_t i, int worker) {
        EXPECT_GE(worker, 0);
        EXPECT_LT(worker, threads);
        hits[static_cast<size_t>(i)]++;
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "n=" << n << " i=" << i;
    }
  }
}

TEST(Parallel, SmallestFailingIndexIsRethrown) {
  for (int threads : {1, 4}) {
    try {
      parallel_for(100, threads, [&](int64_t i, int) {
        if (i == 17 || i == 60) throw std::runtime_error("fail " + std::to_string(i));
      });
      FAIL() << "no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "fail 17");
    }
  }
}

TEST(Parallel, NestedAndRepeated) {
  std::vector<int64_t> out(64, 0);
  for (int rep = 0; rep < 200; ++rep)
    parallel_for(8, 4, [&](int64_t i, int) {
      parallel_for(8, 4, [&](int64_t j, int) { out[static_cast<size_t>(i * 8 + j)] += i * 8 + j; });
    });
  for (int64_t k = 0; k < 64; ++k) EXPECT_EQ(out[static_cast<size_t>(k)], 200 * k);
}
