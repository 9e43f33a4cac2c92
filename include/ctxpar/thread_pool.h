// ThreadPool: a fixed set of worker threads for the engine's parallel loops (the model's matmuls
// and the attention kernels' tasks), so that a decode step starts no thread: starting and
// joining one costs about 30 us here, more than a decode layer's attention at short contexts.
//
// ParallelFor(n, fn) runs fn(begin, end) over disjoint chunks covering [0, n) (the calling
// thread works too) and returns when all are done. Workers and caller spin briefly before
// sleeping: decode issues about 200 small matmuls per token, and a condition-variable wake-up
// for each costs more than the work it splits.
//
// Thread safety: ParallelFor is called by one thread at a time (the pool's owner); fn runs
// concurrently on the pool's threads and must be safe for disjoint chunks.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "ctxpar/status.h"

namespace ctxpar {

class ThreadPool {
 public:
  // A pool of num_threads threads in all: the caller and num_threads - 1 workers. Fails with
  // kInvalidArgument when num_threads < 1, and with CTXPAR-SYS-001 (kUnavailable) when the system
  // refuses a thread (the per-user process limit, ulimit -u, or memory for its stack); the
  // workers that did start are stopped and joined first, so a failed Create leaves no thread.
  // Callers bound the count first (the CLI refuses more threads than the machine has).
  static Expected<std::unique_ptr<ThreadPool>> Create(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  void ParallelFor(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& fn);

 private:
  ThreadPool() = default;
  void Stop();
  void Work();
  void RunChunks();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  const std::function<void(std::int64_t, std::int64_t)>* fn_ = nullptr;
  std::int64_t n_ = 0;
  std::atomic<std::int64_t> next_{0};
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

// The CPUs this process may run on: its affinity mask, which taskset, a container's cpuset or an
// MPI launcher's binding narrow below the machine's count; at least 1.
int UsableCores();

}  // namespace ctxpar
