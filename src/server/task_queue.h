// GrowingTaskQueue: cpp-httplib's task queue with threads started as connections need them, up to
// a cap (internal to the server).
//
// Each open stream holds an HTTP thread until its request ends. httplib's ThreadPool starts a
// fixed number of threads, and a connection beyond them waits for one in its queue, /health and
// /metrics included: a liveness probe could time out while the server is busy, not dead. Here
// a connection that finds no idle thread starts one, up to max_threads; threads stay for the
// server's life (a later burst finds them ready).
//
// Thread safety: enqueue from httplib's listener thread; shutdown once, from the thread that
// stops the server. Jobs queued before shutdown still run.
#pragma once

#include <httplib.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ctxpar::server {

class GrowingTaskQueue : public httplib::TaskQueue {
 public:
  explicit GrowingTaskQueue(int max_threads) : max_threads_(max_threads) {}
  ~GrowingTaskQueue() override;
  void enqueue(std::function<void()> job) override;
  void shutdown() override;

 private:
  void Work();

  const int max_threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  int idle_ = 0;
  bool stop_ = false;
};

}  // namespace ctxpar::server
