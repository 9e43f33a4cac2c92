// ThreadPool: every index of a ParallelFor is run exactly once, on pools of one and several
// threads, for empty, tiny and large ranges, and a pool serves many calls in a row.
#include "ctxpar/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <vector>

namespace ctxpar {
namespace {

TEST(ThreadPool, CoversEveryIndexOnce) {
  for (int threads : {1, 3}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int n : {0, 1, 2, 5, 1000}) {
      std::vector<int> hits(n, 0);
      pool.ParallelFor(n, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) ++hits[i];
      });
      for (int h : hits) EXPECT_EQ(h, 1);
    }
  }
}

TEST(ThreadPool, ServesManyCallsInARow) {
  ThreadPool pool(2);
  std::atomic<std::int64_t> sum{0};
  for (int call = 0; call < 2000; ++call) {
    pool.ParallelFor(8, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) sum.fetch_add(i, std::memory_order_relaxed);
    });
  }
  EXPECT_EQ(sum.load(), 2000 * 28);
}

}  // namespace
}  // namespace ctxpar
