// ThreadPool: every index of a ParallelFor is run exactly once, on pools of one and several
// threads, for empty, tiny and large ranges, and a pool serves many calls in a row. When the
// system refuses a thread, Create fails with CTXPAR-SYS-001 and leaves no thread behind.
#include "ctxpar/thread_pool.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace ctxpar {
namespace {

TEST(ThreadPool, CoversEveryIndexOnce) {
  for (int threads : {1, 3}) {
    Expected<std::unique_ptr<ThreadPool>> pool = ThreadPool::Create(threads);
    ASSERT_TRUE(pool.ok()) << pool.status().message();
    EXPECT_EQ((*pool)->size(), threads);
    for (int n : {0, 1, 2, 5, 1000}) {
      std::vector<int> hits(n, 0);
      (*pool)->ParallelFor(n, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) ++hits[i];
      });
      for (int h : hits) EXPECT_EQ(h, 1);
    }
  }
}

TEST(ThreadPool, ServesManyCallsInARow) {
  Expected<std::unique_ptr<ThreadPool>> pool = ThreadPool::Create(2);
  ASSERT_TRUE(pool.ok());
  std::atomic<std::int64_t> sum{0};
  for (int call = 0; call < 2000; ++call) {
    (*pool)->ParallelFor(8, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) sum.fetch_add(i, std::memory_order_relaxed);
    });
  }
  EXPECT_EQ(sum.load(), 2000 * 28);
}

TEST(ThreadPool, RefusesCountsBelowOne) {
  for (int threads : {0, -4}) {
    Expected<std::unique_ptr<ThreadPool>> pool = ThreadPool::Create(threads);
    ASSERT_FALSE(pool.ok());
    EXPECT_EQ(pool.status().code(), StatusCode::kInvalidArgument);
  }
}

int ThreadsOfThisProcess() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.starts_with("Threads:")) return std::stoi(line.substr(8));
  }
  return -1;
}

// In a child process whose address space leaves room for a few dozen thread stacks (a limit
// that binds root too, unlike RLIMIT_NPROC), a pool of 4096 threads cannot start. Create must
// fail with CTXPAR-SYS-001, join what it started (the constructor it replaces aborted here, with
// the started threads still running), and a pool that fits must start afterwards.
TEST(ThreadPool, FailsCleanlyWhenTheSystemRefusesAThread) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    long pages = 0;
    std::ifstream("/proc/self/statm") >> pages;
    rlimit limit{};
    getrlimit(RLIMIT_AS, &limit);
    const rlim_t original = limit.rlim_cur;
    limit.rlim_cur = static_cast<rlim_t>(pages) * sysconf(_SC_PAGESIZE) + (256u << 20);
    if (setrlimit(RLIMIT_AS, &limit) != 0) _exit(10);
    Expected<std::unique_ptr<ThreadPool>> big = ThreadPool::Create(4096);
    if (big.ok()) _exit(11);
    if (big.status().error_id() != "CTXPAR-SYS-001") _exit(12);
    if (big.status().code() != StatusCode::kUnavailable) _exit(13);
    if (big.status().message().find("of the 4096 threads asked for") == std::string::npos) {
      _exit(14);
    }
    if (ThreadsOfThisProcess() != 1) _exit(15);
    limit.rlim_cur = original;
    if (setrlimit(RLIMIT_AS, &limit) != 0) _exit(16);
    Expected<std::unique_ptr<ThreadPool>> small = ThreadPool::Create(3);
    if (!small.ok() || (*small)->size() != 3) _exit(17);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "see the _exit codes in the child";
}

}  // namespace
}  // namespace ctxpar
