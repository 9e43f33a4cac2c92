// The scheduler's log lines in SGLang's words (its scheduler's "Prefill batch." and "Decode
// batch." lines, with the time to the millisecond).
#include "server/step_log.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ctxpar {
namespace {

StepRecord Batch(std::vector<StepRecord::Entry> entries) {
  StepRecord r;
  r.batch = std::move(entries);
  return r;
}

TEST(StepLog, PrefillsEveryStepAndDecodesEveryInterval) {
  std::vector<std::string> lines;
  StepLog log(2, [&](const std::string& l) { lines.push_back(l); });
  // 2026-12-03 15:20:01.123 UTC.
  const StepLog::Clock::time_point t0{std::chrono::milliseconds(1796311201123)};
  EngineSnapshot s;
  s.running = 1;
  s.queued = 2;
  s.used_tokens = 640;
  s.token_usage = 0.195;
  // A new request's first chunk beside a decoding one: a prefill step.
  log.Step(Batch({{1, 600, 1}, {2, 0, 512}}), s, t0);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0],
            "[2026-12-03 15:20:01.123] Prefill batch. #new-seq: 1, #new-token: 512, token usage: "
            "0.20, #running-req: 1, #queue-req: 2");
  // Decode steps: a line every second one, the rate since the last line (none before the first).
  s.generation_tokens_total = 100;
  log.Step(Batch({{1, 601, 1}, {2, 512, 1}}), s, t0 + std::chrono::milliseconds(50));
  log.Step(Batch({{1, 602, 1}, {2, 513, 1}}), s, t0 + std::chrono::milliseconds(100));
  s.generation_tokens_total = 104;
  log.Step(Batch({{1, 603, 1}, {2, 514, 1}}), s, t0 + std::chrono::milliseconds(150));
  log.Step(Batch({{1, 604, 1}, {2, 515, 1}}), s, t0 + std::chrono::milliseconds(200));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[1],
            "[2026-12-03 15:20:01.223] Decode batch. #running-req: 2, #token: 640, token usage: "
            "0.20, gen throughput (token/s): 0.00, #queue-req: 2");
  EXPECT_EQ(lines[2],
            "[2026-12-03 15:20:01.323] Decode batch. #running-req: 2, #token: 640, token usage: "
            "0.20, gen throughput (token/s): 40.00, #queue-req: 2");
}

// Speculative decoding: a verify entry (its last token and its drafts) is a decode, and a decode
// line adds SGLang's accept len (tokens per verify step) and accept rate (accepted over drafted
// tokens) since the last line.
TEST(StepLog, VerifyStepsAreDecodesWithTheirAcceptance) {
  std::vector<std::string> lines;
  StepLog log(1, [&](const std::string& l) { lines.push_back(l); });
  const StepLog::Clock::time_point t0{std::chrono::milliseconds(1796311201123)};
  EngineSnapshot s;
  s.used_tokens = 640;
  s.token_usage = 0.195;
  log.Step(Batch({{1, 600, 4, 3}}), s, t0);  // no verify step yet: no acceptance
  // Since: 4 verify steps gave 10 tokens, 6 of their 12 drafts accepted.
  s.spec_verify_steps_total = 4;
  s.spec_verify_tokens_total = 10;
  s.spec_draft_tokens_total = 12;
  s.generation_tokens_total = 10;
  log.Step(Batch({{1, 604, 6, 5}, {2, 80, 1, 0}}), s, t0 + std::chrono::milliseconds(100));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0],
            "[2026-12-03 15:20:01.123] Decode batch. #running-req: 1, #token: 640, token usage: "
            "0.20, gen throughput (token/s): 0.00, #queue-req: 0");
  EXPECT_EQ(lines[1],
            "[2026-12-03 15:20:01.223] Decode batch. #running-req: 2, #token: 640, token usage: "
            "0.20, accept len: 2.50, accept rate: 0.50, gen throughput (token/s): 100.00, "
            "#queue-req: 0");
}

}  // namespace
}  // namespace ctxpar
