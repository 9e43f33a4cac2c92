#include "engine/plan_codec.h"

#include <fmt/format.h>

#include <cstdint>

namespace ctxpar::engine {

std::vector<int64_t> EncodePlan(const WirePlan& plan) {
  std::vector<int64_t> w;
  w.reserve(4 + plan.ops.size() * 4 + plan.batch.seqs.size() * 6 + plan.batch.tokens.size());
  w.push_back(plan.stop ? 1 : 0);
  w.push_back(static_cast<int64_t>(plan.ops.size()));
  for (const PoolOp& op : plan.ops) {
    w.push_back(op.kind);
    w.push_back(op.slot);
    w.push_back(op.length);
    w.push_back(op.group);
  }
  w.push_back(static_cast<int64_t>(plan.batch.seqs.size()));
  for (const BatchSeq& s : plan.batch.seqs) {
    w.insert(w.end(), {s.slot, s.pos0, s.num_tokens, s.token_offset, s.want_logits ? 1 : 0,
                       s.all_logits ? 1 : 0});
  }
  w.push_back(static_cast<int64_t>(plan.batch.tokens.size()));
  w.insert(w.end(), plan.batch.tokens.begin(), plan.batch.tokens.end());
  return w;
}

Expected<WirePlan> DecodePlan(const std::vector<int64_t>& w) {
  std::size_t at = 0;
  auto next = [&](int64_t* v) {
    if (at >= w.size()) return false;
    *v = w[at++];
    return true;
  };
  auto bad = [&] {
    return Internal(fmt::format("a step plan of {} words is malformed", w.size()));
  };
  WirePlan plan;
  int64_t kind = 0, n = 0;
  if (!next(&kind) || !next(&n) || n < 0) return bad();
  plan.stop = kind == 1;
  for (int64_t i = 0; i < n; ++i) {
    int64_t k = 0, slot = 0, length = 0, group = 0;
    if (!next(&k) || !next(&slot) || !next(&length) || !next(&group) || k < 0 ||
        k > PoolOp::kLastKind || group < 0 || group > INT32_MAX) {
      return bad();
    }
    plan.ops.push_back({static_cast<PoolOp::Kind>(k), static_cast<int32_t>(slot), length,
                        static_cast<int32_t>(group)});
  }
  if (!next(&n) || n < 0) return bad();
  for (int64_t i = 0; i < n; ++i) {
    int64_t f[6];
    for (int64_t& x : f) {
      if (!next(&x)) return bad();
    }
    plan.batch.seqs.push_back({static_cast<int32_t>(f[0]), f[1], static_cast<int32_t>(f[2]),
                               static_cast<int32_t>(f[3]), f[4] != 0, f[5] != 0});
  }
  if (!next(&n) || n < 0 || at + n != w.size()) return bad();
  for (int64_t i = 0; i < n; ++i) plan.batch.tokens.push_back(static_cast<int32_t>(w[at + i]));
  return plan;
}

Status BroadcastPlan(Communicator& comm, WirePlan* plan) {
  if (comm.size() == 1) return Status::Ok();
  std::vector<int64_t> words;
  if (comm.rank() == 0) words = EncodePlan(*plan);
  int64_t size = static_cast<int64_t>(words.size());
  // A follower waits here as long as the leader has nothing to run (an idle server): no
  // collective deadline, and the wait sleeps rather than spins.
  if (comm.rank() != 0) comm.AllowUnboundedWait();
  CTXPAR_RETURN_IF_ERROR(comm.Broadcast(&size, sizeof(size), DataType::kU8, 0));
  words.resize(size);
  CTXPAR_RETURN_IF_ERROR(
      comm.Broadcast(words.data(), words.size() * sizeof(int64_t), DataType::kU8, 0));
  if (comm.rank() == 0) return Status::Ok();
  CTXPAR_ASSIGN_OR_RETURN(*plan, DecodePlan(words));
  return Status::Ok();
}

}  // namespace ctxpar::engine
