// The scheduler's log lines of `ctxpar serve`, as SGLang's scheduler prints them: one line per
// step that prefills, and one per `decode_log_interval` steps that only decode, each with the
// requests running and queued and, for decode, the generation rate since the last such line.
//
//   [2026-12-03 15:20:01.123] Prefill batch. #new-seq: 3, #new-token: 1824, #running-req: 1, ...
//   [2026-12-03 15:20:02.456] Decode batch. #running-req: 4, #token: 2560, token usage: 0.78, ...
//
// With speculative decoding, a decode line adds SGLang's `accept len` (tokens per verify step)
// and `accept rate` (accepted over drafted tokens) since the last one, after the token usage.
// The time has milliseconds (SGLang's has seconds), so consecutive lines give step times.
// Thread safety: one thread (the engine's step observer) calls Step.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "ctxpar/engine.h"

namespace ctxpar {

class StepLog {
 public:
  using Clock = std::chrono::system_clock;
  // `interval` >= 1 (SGLang's --decode-log-interval).
  StepLog(int interval, std::function<void(const std::string&)> sink)
      : interval_(interval), sink_(std::move(sink)) {}

  // A planned step, with the engine's view published before it.
  void Step(const StepRecord& step, const EngineSnapshot& before, Clock::time_point now);

 private:
  int interval_;
  std::function<void(const std::string&)> sink_;
  int decode_steps_ = 0;
  uint64_t generated_at_last_ = 0;
  // Speculative decoding's totals at the last decode line.
  uint64_t verify_steps_at_last_ = 0, verify_tokens_at_last_ = 0, drafts_at_last_ = 0;
  Clock::time_point last_;
  bool have_last_ = false;
};

}  // namespace ctxpar
