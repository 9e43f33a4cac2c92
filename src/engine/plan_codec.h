// The step plan on the wire: what the leader broadcasts so that every rank replays the same pool
// operations and runs the same batch (not public API).
//
// Layout (int64 words): kind, then the operations (count, then kind, slot, length, group each), the
// batch's sequences (count, then slot, pos0, num_tokens, token_offset, want_logits, all_logits
// each) and its tokens (count, then the ids).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "ctxpar/communicator.h"
#include "ctxpar/status.h"
#include "engine/scheduler.h"

namespace ctxpar::engine {

struct WirePlan {
  bool stop = false;
  std::vector<PoolOp> ops;
  Batch batch;
};

std::vector<int64_t> EncodePlan(const WirePlan& plan);
Expected<WirePlan> DecodePlan(const std::vector<int64_t>& words);

// Leader: broadcasts `plan` over `comm` from rank 0. Followers: receives it. A follower waiting
// for the next plan may wait as long as the leader has no work (an idle server).
Status BroadcastPlan(Communicator& comm, WirePlan* plan);

}  // namespace ctxpar::engine
