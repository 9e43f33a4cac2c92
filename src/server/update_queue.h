// UpdateQueue: hands the engine's updates of one HTTP request (all its choices) from the thread
// that runs the engine to the HTTP thread that writes the response.
//
// Thread safety: Push from any thread (it never blocks for long: the engine's callbacks must
// not), Pop from one.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <vector>

#include "ctxpar/engine.h"

namespace ctxpar::server {

struct ChoiceUpdate {
  int choice = 0;
  RequestUpdate update;
};

class UpdateQueue {
 public:
  void Push(int choice, const RequestUpdate& update) {
    {
      std::lock_guard lock(mu_);
      updates_.push_back({choice, update});
    }
    cv_.notify_one();
  }

  // Everything queued, waiting up to `timeout` for the first; empty on a timeout.
  std::vector<ChoiceUpdate> Pop(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !updates_.empty(); });
    std::vector<ChoiceUpdate> out(std::make_move_iterator(updates_.begin()),
                                  std::make_move_iterator(updates_.end()));
    updates_.clear();
    return out;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ChoiceUpdate> updates_;
};

}  // namespace ctxpar::server
