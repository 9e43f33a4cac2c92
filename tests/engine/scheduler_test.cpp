// The scheduler without a model: random requests run to completion through a pool small enough
// to retract them, with the pool's accounting and the step limits checked after every step, and
// SGLang's choice of the request to retract.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <vector>

#include "engine/plan_codec.h"

namespace ctxpar::engine {
namespace {

KvPool MakePool(int64_t pages, int slots, int page_size = 16) {
  auto pool = KvPool::Create({.num_layers = 1,
                              .num_kv_heads = 1,
                              .head_dim_k = 16,
                              .head_dim_v = 16,
                              .page_size = page_size,
                              .num_pages = pages,
                              .max_slots = slots,
                              .max_pages_per_slot = 64});
  EXPECT_TRUE(pool.ok()) << pool.status().ToString();
  return std::move(*pool);
}

struct Sim {
  std::vector<std::unique_ptr<SeqState>> seqs;
  int finished = 0;
};

// Replays plan operations on another rank's pool, through the wire format, as a follower does.
void Replay(const std::vector<PoolOp>& ops, KvPool* follower) {
  if (follower == nullptr) return;
  const Expected<WirePlan> wire = DecodePlan(EncodePlan({.ops = ops}));
  ASSERT_TRUE(wire.ok()) << wire.status().ToString();
  ASSERT_EQ(wire->ops.size(), ops.size());
  for (const PoolOp& op : wire->ops) ASSERT_TRUE(ApplyPoolOp(*follower, op).ok());
}

// One step as the engine runs it: plan, "forward", then each sequence whose chunk reached its
// end takes a token, and those that have all their tokens finish. In every group of the pool,
// every page is free or held by one sequence; a window group of W holds, for each sequence of the
// batch, exactly the pages spanning its positions [pos0 - W + 1, pos0 + n). A follower's pool,
// replaying the plans, holds the same pages.
void Step(Scheduler& s, KvPool& pool, const SchedulerOptions& o, Sim& sim, int* prefill_max,
          KvPool* follower = nullptr) {
  Expected<StepPlan> plan = s.Plan();
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_FALSE(plan->batch.seqs.empty()) << "a step with requests left must run something";
  Replay(plan->ops, follower);
  int64_t prefill = 0;
  for (std::size_t i = 0; i < plan->seqs.size(); ++i) {
    const SeqState* q = plan->seqs[i];
    const BatchSeq& b = plan->batch.seqs[i];
    ASSERT_EQ(b.pos0, q->kv_len);
    ASSERT_EQ(b.slot, q->slot);
    ASSERT_GE(pool.slot_pages(q->slot), pool.PagesFor(b.pos0 + b.num_tokens));
    for (int g = 1; g < pool.num_groups(); ++g) {
      const int64_t per_page = pool.capacity_tokens(g) / pool.num_pages(g);
      const int64_t first = std::max<int64_t>(0, b.pos0 - pool.group(g).window + 1) / per_page;
      ASSERT_EQ(pool.slot_pages(q->slot, g), pool.PagesFor(b.pos0 + b.num_tokens, g) - first)
          << "group " << g << " pos0 " << b.pos0 << " n " << b.num_tokens;
    }
    if (!(b.num_tokens == 1 && q->kv_len > 0)) prefill += b.num_tokens;
  }
  if (o.chunked_prefill_size > 0) ASSERT_LE(prefill, o.chunked_prefill_size);
  *prefill_max = std::max<int>(*prefill_max, static_cast<int>(prefill));
  ASSERT_LE(s.running(), o.max_running_requests);
  s.Commit(*plan);
  for (SeqState* q : plan->seqs) {
    if (q->kv_len != static_cast<int64_t>(q->tokens.size())) continue;
    q->tokens.push_back(7);
    if (q->output_len() == q->max_new_tokens) {
      ASSERT_TRUE(s.Remove(q).ok());
      ++sim.finished;
    }
  }
  for (int g = 0; g < pool.num_groups(); ++g) {
    int64_t held = 0;
    for (const auto& q : sim.seqs) held += q->slot >= 0 ? pool.slot_pages(q->slot, g) : 0;
    ASSERT_EQ(held + pool.free_pages(g), pool.num_pages(g))
        << "group " << g << ": a page leaked or was held twice";
  }
  Replay(s.TakePendingOps(), follower);
  for (int g = 0; follower != nullptr && g < pool.num_groups(); ++g) {
    ASSERT_EQ(follower->free_pages(g), pool.free_pages(g)) << "group " << g;
  }
}

TEST(Scheduler, RandomRequestsFinishWithinTheLimitsAndLeakNoPage) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 20; ++trial) {
    const SchedulerOptions o{.max_running_requests = 1 + static_cast<int>(rng() % 12),
                             .chunked_prefill_size = rng() % 4 == 0 ? -1 : 8 + int(rng() % 64),
                             .schedule_conservativeness = 0.05 + 0.2 * (rng() % 6)};
    KvPool pool = MakePool(8 + rng() % 24, o.max_running_requests);
    Scheduler s(o, &pool);
    Sim sim;
    const int n = 10 + static_cast<int>(rng() % 30);
    for (int i = 0; i < n; ++i) {
      auto q = std::make_unique<SeqState>();
      q->id = i + 1;
      q->prompt_len = 1 + static_cast<int>(rng() % 60);
      q->tokens.assign(q->prompt_len, 3);
      q->max_new_tokens = 1 + static_cast<int>(rng() % 70);
      // Every request fits the pool alone, as the engine guarantees.
      if (pool.PagesFor(q->prompt_len + q->max_new_tokens) > pool.num_pages()) continue;
      s.Enqueue(q.get());
      sim.seqs.push_back(std::move(q));
    }
    int prefill_max = 0, steps = 0;
    while (sim.finished < static_cast<int>(sim.seqs.size())) {
      ASSERT_LT(++steps, 100000) << "no progress";
      Step(s, pool, o, sim, &prefill_max);
      if (::testing::Test::HasFatalFailure()) return;
    }
    EXPECT_EQ(pool.free_pages(), pool.num_pages());
    EXPECT_EQ(pool.free_slots(), o.max_running_requests);
  }
}

// A model of 4 layers, two of them a window of W (a synthetic Gemma-3-like spec), on a pool
// small enough to retract, sharded over a DCP group of 2: every request finishes, the window group
// holds no page outside each sequence's window and chunk, none leaks, and the other rank of the
// group, replaying the plans from the wire, holds the same pages.
TEST(Scheduler, WindowGroupPagesSlideAndTheRanksAgree) {
  std::mt19937 rng(9);
  for (int trial = 0; trial < 12; ++trial) {
    const SchedulerOptions o{.max_running_requests = 1 + static_cast<int>(rng() % 8),
                             .chunked_prefill_size = rng() % 4 == 0 ? -1 : 4 + int(rng() % 40),
                             .schedule_conservativeness = 0.05 + 0.2 * (rng() % 6)};
    const int window = 1 + static_cast<int>(rng() % 40), page = 1 + static_cast<int>(rng() % 8);
    KvPoolOptions options{.num_layers = 4,
                          .num_kv_heads = 1,
                          .head_dim_k = 16,
                          .head_dim_v = 16,
                          .page_size = page,
                          .dcp_size = 2,
                          .num_pages = 12 + static_cast<int>(rng() % 40),
                          .window_pages = 0,
                          .max_slots = o.max_running_requests,
                          .max_pages_per_slot = 128,
                          .groups = {{{1, 3}, 0, true}, {{0, 2}, window, true}}};
    auto made = KvPool::Create(options);
    ASSERT_FALSE(made.ok()) << "a window group needs window_pages";
    const int64_t chunk = o.chunked_prefill_size < 0 ? 130 : o.chunked_prefill_size;
    options.window_pages =
        (window - 1 + chunk + 2 * page - 2) / (2 * page) + 1 + static_cast<int>(rng() % 10);
    made = KvPool::Create(options);
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    options.dcp_rank = 1;
    auto follower = KvPool::Create(options);
    ASSERT_TRUE(follower.ok());
    KvPool& pool = *made;
    Scheduler s(o, &pool);
    Sim sim;
    const int n = 10 + static_cast<int>(rng() % 20);
    for (int i = 0; i < n; ++i) {
      auto q = std::make_unique<SeqState>();
      q->id = i + 1;
      q->prompt_len = 1 + static_cast<int>(rng() % 60);
      q->tokens.assign(q->prompt_len, 3);
      q->max_new_tokens = 1 + static_cast<int>(rng() % 70);
      // Every request fits the pool alone, as the engine guarantees (CTXPAR-ENGINE-006, -KV-006).
      const int64_t total = q->prompt_len + q->max_new_tokens;
      if (pool.PagesFor(total) > pool.num_pages() ||
          pool.PeakPages(1, total, std::min<int64_t>(chunk, total)) > pool.num_pages(1)) {
        continue;
      }
      s.Enqueue(q.get());
      sim.seqs.push_back(std::move(q));
    }
    int prefill_max = 0, steps = 0;
    while (sim.finished < static_cast<int>(sim.seqs.size())) {
      ASSERT_LT(++steps, 100000) << "no progress";
      Step(s, pool, o, sim, &prefill_max, &*follower);
      if (::testing::Test::HasFatalFailure()) return;
    }
    for (int g = 0; g < 2; ++g) {
      EXPECT_EQ(pool.free_pages(g), pool.num_pages(g));
      EXPECT_EQ(follower->free_pages(g), pool.num_pages(g));
    }
    EXPECT_EQ(pool.free_slots(), o.max_running_requests);
  }
}

// A low schedule_conservativeness makes admission reserve 7 % of each request's remaining tokens:
// the pool is over-committed, decode runs out of pages and retracts, and the retracted requests
// come back and finish.
TEST(Scheduler, DecodeOutOfPagesRetractsAndTheRequestsStillFinish) {
  const SchedulerOptions o{
      .max_running_requests = 8, .chunked_prefill_size = -1, .schedule_conservativeness = 0.1};
  KvPool pool = MakePool(12, 8, 4);
  Scheduler s(o, &pool);
  Sim sim;
  for (int i = 0; i < 8; ++i) {
    auto q = std::make_unique<SeqState>();
    q->id = i + 1;
    q->prompt_len = 4;
    q->tokens.assign(4, 3);
    q->max_new_tokens = 20;
    s.Enqueue(q.get());
    sim.seqs.push_back(std::move(q));
  }
  int prefill_max = 0;
  while (sim.finished < 8) {
    Step(s, pool, o, sim, &prefill_max);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GT(s.retractions(), 0u);
  EXPECT_EQ(pool.free_pages(), 12);
}

// SGLang's victim: the fewest output tokens; among equals the longest prompt; then the newest.
TEST(Scheduler, RetractsTheFewestOutputTokensThenTheLongestPrompt) {
  auto seq = [](uint64_t id, int prompt, int output) {
    SeqState q{.id = id, .prompt_len = prompt};
    q.tokens.assign(prompt + output, 1);
    return q;
  };
  EXPECT_TRUE(RetractBefore(seq(1, 5, 2), seq(2, 9, 3)));  // fewer outputs
  EXPECT_FALSE(RetractBefore(seq(1, 9, 3), seq(2, 5, 2)));
  EXPECT_TRUE(RetractBefore(seq(1, 9, 2), seq(2, 5, 2)));   // longer prompt
  EXPECT_TRUE(RetractBefore(seq(2, 5, 2), seq(1, 5, 2)));   // newer
  EXPECT_FALSE(RetractBefore(seq(1, 5, 2), seq(1, 5, 2)));  // a strict order
}

}  // namespace
}  // namespace ctxpar::engine
