#include "server/step_log.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

namespace ctxpar {

namespace {

std::string Stamp(StepLog::Clock::time_point t) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count() % 1000;
  return fmt::format("[{:%Y-%m-%d %H:%M:%S}.{:03d}]", fmt::gmtime(StepLog::Clock::to_time_t(t)),
                     ms);
}

}  // namespace

void StepLog::Step(const StepRecord& step, const EngineSnapshot& before, Clock::time_point now) {
  int new_seqs = 0;
  int64_t new_tokens = 0;
  for (const StepRecord::Entry& e : step.batch) {
    if (e.num_tokens - e.drafts > 1 || e.pos0 == 0) {
      ++new_seqs;
      new_tokens += e.num_tokens;
    }
  }
  if (new_seqs > 0) {
    sink_(fmt::format(
        "{} Prefill batch. #new-seq: {}, #new-token: {}, token usage: {:.2f}, #running-req: {}, "
        "#queue-req: {}",
        Stamp(now), new_seqs, new_tokens, before.token_usage, before.running, before.queued));
    return;
  }
  if (++decode_steps_ % interval_ != 0) return;
  // As SGLang's: the rate since the last decode line (0 on the first).
  const double seconds = have_last_ ? std::chrono::duration<double>(now - last_).count() : 0.0;
  const uint64_t generated = before.generation_tokens_total - generated_at_last_;
  const double rate = seconds > 0 ? double(generated) / seconds : 0.0;
  std::string spec;
  if (const uint64_t steps = before.spec_verify_steps_total - verify_steps_at_last_; steps > 0) {
    const uint64_t drafts = before.spec_draft_tokens_total - drafts_at_last_;
    const uint64_t tokens = before.spec_verify_tokens_total - verify_tokens_at_last_;
    spec = fmt::format("accept len: {:.2f}, accept rate: {:.2f}, ", double(tokens) / double(steps),
                       drafts > 0 ? double(tokens - steps) / double(drafts) : 0.0);
  }
  sink_(fmt::format(
      "{} Decode batch. #running-req: {}, #token: {}, token usage: {:.2f}, {}gen throughput "
      "(token/s): {:.2f}, #queue-req: {}",
      Stamp(now), step.batch.size(), before.used_tokens, before.token_usage, spec, rate,
      before.queued));
  generated_at_last_ = before.generation_tokens_total;
  verify_steps_at_last_ = before.spec_verify_steps_total;
  verify_tokens_at_last_ = before.spec_verify_tokens_total;
  drafts_at_last_ = before.spec_draft_tokens_total;
  last_ = now;
  have_last_ = true;
}

}  // namespace ctxpar
