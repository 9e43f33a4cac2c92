// UpdateQueue: hands the engine's updates of one HTTP request (all its choices) from the thread
// that runs the engine to the HTTP thread that writes the response.
//
// Fail marks the request's engine as gone (a rank died, the watchdog fired): Pop stops waiting and
// failure() says why, so that the HTTP thread ends the response with that error.
//
// Thread safety: Push and Fail from any thread (they never block for long: the engine's callbacks
// must not), Pop and failure from one.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <vector>

#include "ctxpar/engine.h"
#include "ctxpar/status.h"

namespace ctxpar::server {

struct ChoiceUpdate {
  int choice = 0;
  RequestUpdate update;
};

class UpdateQueue {
 public:
  // After Fail the updates are dropped: the engine's aborts that follow a failure must not end
  // the response as if the request had been cancelled.
  void Push(int choice, const RequestUpdate& update) {
    {
      std::lock_guard lock(mu_);
      if (failure_) return;
      updates_.push_back({choice, update});
    }
    cv_.notify_one();
  }

  void Fail(const Status& cause) {
    {
      std::lock_guard lock(mu_);
      failure_ = cause;
    }
    cv_.notify_one();
  }

  std::optional<Status> failure() {
    std::lock_guard lock(mu_);
    return failure_;
  }

  // Everything queued, waiting up to `timeout` for the first (or a failure); empty on a timeout.
  std::vector<ChoiceUpdate> Pop(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !updates_.empty() || failure_.has_value(); });
    std::vector<ChoiceUpdate> out(std::make_move_iterator(updates_.begin()),
                                  std::make_move_iterator(updates_.end()));
    updates_.clear();
    return out;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ChoiceUpdate> updates_;
  std::optional<Status> failure_;
};

}  // namespace ctxpar::server
