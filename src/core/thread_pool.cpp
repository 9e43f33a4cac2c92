#include "ctxpar/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <exception>
#include <string>

#include "ctxpar/error_catalog.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace ctxpar {

int UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

Expected<std::unique_ptr<ThreadPool>> ThreadPool::Create(int num_threads) {
  if (num_threads < 1) {
    return InvalidArgument("ThreadPool: num_threads must be >= 1, but got " +
                           std::to_string(num_threads));
  }
  std::unique_ptr<ThreadPool> pool(new ThreadPool());
  for (int i = 1; i < num_threads; ++i) {
    try {
      pool->workers_.emplace_back([p = pool.get()] { p->Work(); });
    } catch (const std::exception& e) {  // std::system_error from the thread, or bad_alloc
      const int started = static_cast<int>(pool->workers_.size()) + 1;
      pool->Stop();  // joins the workers that started; none is left waiting on this pool
      return CatalogError("CTXPAR-SYS-001", {{"count", std::to_string(num_threads)},
                                             {"started", std::to_string(started)},
                                             {"reason", e.what()}});
    }
  }
  return pool;
}

ThreadPool::~ThreadPool() { Stop(); }

void ThreadPool::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  start_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
}

namespace {

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// About 50 microseconds of polling: longer than the gap between two matmuls of a decode step.
constexpr int kSpins = 4000;

template <typename Pred>
bool SpinUntil(Pred done) {
  for (int i = 0; i < kSpins; ++i) {
    if (done()) return true;
    CpuRelax();
  }
  return done();
}
}  // namespace

void ThreadPool::ParallelFor(std::int64_t n,
                             const std::function<void(std::int64_t, std::int64_t)>& fn) {
  if (workers_.empty() || n <= 1) {
    if (n > 0) fn(0, n);
    return;
  }
  fn_ = &fn;
  n_ = n;
  next_.store(0, std::memory_order_relaxed);
  pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  {
    // Published under the lock so that a worker about to sleep cannot miss it.
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  start_cv_.notify_all();
  RunChunks();
  if (!SpinUntil([this] { return pending_.load(std::memory_order_acquire) == 0; })) {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [this] { return pending_.load(std::memory_order_acquire) == 0; });
  }
  fn_ = nullptr;
}

// Chunks are taken from a shared counter rather than split statically, so that a thread the
// (shared) machine has descheduled does not hold up the others. Each is 1 / threads of what is
// left (guided scheduling): large first, single items last, so that the threads finish together.
// A fixed n / (4 x threads) left 9 chunks of a 36-tile matmul, 5 for one of 2 threads and 4 for
// the other. Fewer, larger chunks matter for decode: each starts a new stream of weights whose
// first lines miss: 1 / (2 x threads) made SmolLM2's decode 7 % slower (docs/perf-model.md).
void ThreadPool::RunChunks() {
  const std::int64_t share = std::int64_t{size()};
  std::int64_t begin = next_.load(std::memory_order_relaxed);
  for (;;) {
    if (begin >= n_) return;
    const std::int64_t chunk = std::max<std::int64_t>(1, (n_ - begin) / share);
    if (!next_.compare_exchange_weak(begin, begin + chunk, std::memory_order_relaxed)) continue;
    (*fn_)(begin, std::min(n_, begin + chunk));
    begin = next_.load(std::memory_order_relaxed);
  }
}

void ThreadPool::Work() {
  std::uint64_t seen = 0;
  for (;;) {
    auto started = [&] {
      return stop_.load(std::memory_order_acquire) ||
             generation_.load(std::memory_order_acquire) != seen;
    };
    if (!SpinUntil(started)) {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, started);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    RunChunks();
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);
      done_cv_.notify_one();
    }
  }
}

}  // namespace ctxpar
