// GrowingTaskQueue (task_queue.h): a job queue whose threads start when no idle one is left.
#include "server/task_queue.h"

#include <system_error>
#include <utility>

namespace ctxpar::server {

GrowingTaskQueue::~GrowingTaskQueue() { shutdown(); }

void GrowingTaskQueue::enqueue(std::function<void()> job) {
  {
    std::lock_guard lock(mu_);
    jobs_.push_back(std::move(job));
    // A queued job already claims an idle thread: one more job than idle threads starts one.
    if (static_cast<int>(jobs_.size()) > idle_ &&
        static_cast<int>(threads_.size()) < max_threads_) {
      try {
        threads_.emplace_back([this] { Work(); });
        return;
      } catch (const std::system_error&) {
        // The system refused a thread: the job waits for one of those already running.
      }
    }
  }
  cv_.notify_one();
}

void GrowingTaskQueue::shutdown() {
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    threads.swap(threads_);
  }
  cv_.notify_all();
  for (std::thread& t : threads) t.join();
}

void GrowingTaskQueue::Work() {
  std::unique_lock lock(mu_);
  for (;;) {
    ++idle_;
    cv_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
    --idle_;
    if (jobs_.empty()) return;  // stopped, and every job has run
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    job();
    lock.lock();
  }
}

}  // namespace ctxpar::server
