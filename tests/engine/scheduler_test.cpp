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

// With `window`, layer 1 forms a second group keeping that many positions.
KvPool MakePool(int64_t pages, int slots, int page_size = 16, int window = 0) {
  KvPoolOptions o{.num_layers = window > 0 ? 2 : 1,
                  .num_kv_heads = 1,
                  .head_dim_k = 16,
                  .head_dim_v = 16,
                  .page_size = page_size,
                  .num_pages = pages,
                  .window_pages = pages,
                  .max_slots = slots,
                  .max_pages_per_slot = 64};
  if (window > 0) o.groups = {{.layers = {0}, .window = 0}, {.layers = {1}, .window = window}};
  auto pool = KvPool::Create(o);
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
// In every group, every page is free or held once by the cache and once by each slot that lists
// it, and a follower's pool that replayed the same operations agrees page for page.
void CheckSharedPool(const Scheduler& s, const KvPool& pool, const KvPool& follower,
                     const std::vector<std::unique_ptr<SeqState>>& seqs) {
  for (int g = 0; g < pool.num_groups(); ++g) {
    std::vector<int32_t> holders(pool.num_pages(g), 0);
    for (const RadixCache::PageRef& p : s.cache()->AllPages()) holders[p.page] += p.group == g;
    for (const auto& q : seqs) {
      if (q->slot < 0) continue;
      const int32_t first = pool.first_page(q->slot, g);
      ASSERT_EQ(first, follower.first_page(q->slot, g));
      ASSERT_EQ(pool.slot_pages(q->slot, g), follower.slot_pages(q->slot, g));
      for (int32_t v = first; v < first + pool.slot_pages(q->slot, g); ++v) {
        ++holders[pool.SlotPage(q->slot, v, g)];
        ASSERT_EQ(pool.SlotPage(q->slot, v, g), follower.SlotPage(q->slot, v, g));
      }
    }
    for (int32_t p = 0; p < pool.num_pages(g); ++p) {
      ASSERT_EQ(pool.page_refs(p, g), holders[p]) << "group " << g << " page " << p;
      ASSERT_EQ(follower.page_refs(p, g), holders[p]) << "group " << g << " page " << p;
    }
    ASSERT_EQ(pool.free_pages(g), follower.free_pages(g));
  }
}

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
  ASSERT_TRUE(s.Commit(*plan).ok());
  for (SeqState* q : plan->seqs) {
    if (q->kv_len != static_cast<int64_t>(q->tokens.size())) continue;
    q->tokens.push_back(7);
    if (q->output_len() == q->max_new_tokens) {
      ASSERT_TRUE(s.Remove(q).ok());
      ++sim.finished;
    }
  }
  for (int g = 0; g < pool.num_groups() && s.cache() == nullptr; ++g) {
    int64_t held = 0;
    for (const auto& q : sim.seqs) held += q->slot >= 0 ? pool.slot_pages(q->slot, g) : 0;
    ASSERT_EQ(held + pool.free_pages(g), pool.num_pages(g))
        << "group " << g << ": a page leaked or was held twice";
  }
  Replay(s.TakePendingOps(), follower);
  if (s.cache() != nullptr) {
    ASSERT_NO_FATAL_FAILURE(CheckSharedPool(s, pool, follower ? *follower : pool, sim.seqs));
  }
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
// group, replaying the plans from the wire, holds the same pages. The prefix cache shares these
// prompts of equal tokens and holds window pages that the small window group makes it evict.
TEST(Scheduler, WindowGroupPagesSlideAndTheRanksAgree) {
  std::mt19937 rng(9);
  int64_t hits = 0;
  for (int trial = 0; trial < 12; ++trial) {
    const SchedulerOptions o{.max_running_requests = 1 + static_cast<int>(rng() % 8),
                             .chunked_prefill_size = rng() % 4 == 0 ? -1 : 4 + int(rng() % 40),
                             .schedule_conservativeness = 0.05 + 0.2 * (rng() % 6),
                             .radix_cache = true};
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
    ASSERT_NE(s.cache(), nullptr);
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
    for (const auto& q : sim.seqs) hits += q->cached_tokens > 0;
    ASSERT_TRUE(s.FlushCache());
    Replay(s.TakePendingOps(), &*follower);
    for (int g = 0; g < 2; ++g) {
      EXPECT_EQ(pool.free_pages(g), pool.num_pages(g));
      EXPECT_EQ(follower->free_pages(g), pool.num_pages(g));
    }
    EXPECT_EQ(pool.free_slots(), o.max_running_requests);
  }
  EXPECT_GT(hits, 20) << "prompts of equal tokens were meant to hit the cache";
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

// With the prefix cache: requests sharing prefixes (both policies) run to completion through a
// pool small enough to retract them; a hit starts at a page boundary inside the prompt, retracted
// requests come back with whatever prefix is still cached, and a flush frees every page. With a
// window group of 6 positions, every forward finds the window pages its rows see in its slot.
class SchedulerPrefixCache : public ::testing::TestWithParam<int> {};

TEST_P(SchedulerPrefixCache, SharesPagesAndAFollowerReplaysTheSameOperations) {
  const int window = GetParam();
  std::mt19937 rng(3);
  int64_t hits = 0, retractions = 0;
  for (int trial = 0; trial < 16; ++trial) {
    const SchedulerOptions o{
        .max_running_requests = 1 + static_cast<int>(rng() % 8),
        .chunked_prefill_size = rng() % 3 == 0 ? -1 : 8 + static_cast<int>(rng() % 40),
        .schedule_conservativeness = 0.05 + 0.3 * (rng() % 4),
        .radix_cache = true,
        .policy = rng() % 2 == 0 ? SchedulePolicy::kFcfs : SchedulePolicy::kLpm};
    const int64_t pages = 10 + rng() % 20;
    KvPool pool = MakePool(pages, o.max_running_requests, 4, window);
    KvPool follower = MakePool(pages, o.max_running_requests, 4, window);
    Scheduler s(o, &pool);
    ASSERT_NE(s.cache(), nullptr);
    std::vector<std::vector<int32_t>> stems(3);
    for (auto& stem : stems) {
      for (int i = 0; i < 24; ++i) stem.push_back(static_cast<int32_t>(rng() % 4));
    }
    Sim sim;
    for (int i = 0; i < 30; ++i) {
      auto q = std::make_unique<SeqState>();
      q->id = i + 1;
      q->tokens = stems[rng() % 3];
      q->tokens.resize(1 + rng() % q->tokens.size());
      for (int k = static_cast<int>(rng() % 6); k > 0; --k) q->tokens.push_back(9);
      q->prompt_len = static_cast<int32_t>(q->tokens.size());
      q->max_new_tokens = 1 + static_cast<int>(rng() % 16);
      if (pool.PagesFor(q->prompt_len + q->max_new_tokens) > pages) continue;
      s.Enqueue(q.get());
      sim.seqs.push_back(std::move(q));
    }
    while (sim.finished < static_cast<int>(sim.seqs.size())) {
      Expected<StepPlan> plan = s.Plan();
      ASSERT_TRUE(plan.ok()) << plan.status().ToString();
      ASSERT_FALSE(plan->batch.seqs.empty());
      for (const PoolOp& op : plan->ops) ASSERT_TRUE(ApplyPoolOp(follower, op).ok());
      for (std::size_t i = 0; i < plan->seqs.size(); ++i) {
        const SeqState* q = plan->seqs[i];
        const BatchSeq& b = plan->batch.seqs[i];
        ASSERT_EQ(b.pos0, q->kv_len);
        ASSERT_LT(b.pos0, static_cast<int64_t>(q->tokens.size())) << "nothing left to sample";
        ASSERT_GE(pool.slot_pages(q->slot), pool.PagesFor(b.pos0 + b.num_tokens));
        if (window > 0) {
          ASSERT_LE(pool.first_page(q->slot, 1), KvPool::FirstKept(b.pos0, window, 4))
              << "a window page the rows see is missing";
          ASSERT_GE(pool.first_page(q->slot, 1) + pool.slot_pages(q->slot, 1),
                    pool.PagesFor(b.pos0 + b.num_tokens, 1));
        }
      }
      ASSERT_NO_FATAL_FAILURE(CheckSharedPool(s, pool, follower, sim.seqs));
      ASSERT_TRUE(s.Commit(*plan).ok());
      for (SeqState* q : plan->seqs) {
        if (q->kv_len != static_cast<int64_t>(q->tokens.size())) continue;
        q->tokens.push_back(7);
        if (q->output_len() == q->max_new_tokens) {
          ASSERT_TRUE(s.Remove(q).ok());
          ++sim.finished;
        }
      }
      for (const PoolOp& op : s.TakePendingOps()) ASSERT_TRUE(ApplyPoolOp(follower, op).ok());
      ASSERT_NO_FATAL_FAILURE(CheckSharedPool(s, pool, follower, sim.seqs));
    }
    for (const auto& q : sim.seqs) hits += q->cached_tokens > 0;
    retractions += static_cast<int64_t>(s.retractions());
    EXPECT_EQ(s.evictable_pages(), s.cached_pages());
    for (int g = 0; g < pool.num_groups(); ++g) {
      EXPECT_EQ(pool.free_pages(g) + s.cache()->cached_pages(g), pages);
    }
    ASSERT_TRUE(s.FlushCache());
    for (const PoolOp& op : s.TakePendingOps()) ASSERT_TRUE(ApplyPoolOp(follower, op).ok());
    for (int g = 0; g < pool.num_groups(); ++g) {
      EXPECT_EQ(pool.free_pages(g), pages);
      EXPECT_EQ(follower.free_pages(g), pages);
    }
  }
  EXPECT_GT(hits, 50) << "the stems were meant to share prefixes";
  EXPECT_GT(retractions, 0) << "the pools were meant to force retractions";
}

INSTANTIATE_TEST_SUITE_P(Groups, SchedulerPrefixCache, ::testing::Values(0, 6),
                         [](const auto& info) {
                           return info.param == 0 ? std::string("FullOnly")
                                                  : "Window" + std::to_string(info.param);
                         });

// Speculative decoding: decoding sequences carry random drafts, the "model" always emits 7, so a
// draft of 7s holds and anything else is rejected at its first wrong token. After every step the
// slots hold exactly the pages of their accepted tokens (the rejected ones' pages given back),
// the cache and a follower replaying the plans agree page for page, and at the end every page
// is free again on both.
TEST_P(SchedulerPrefixCache, VerifyStepsGiveBackTheRejectedDraftsPages) {
  const int window = GetParam();
  std::mt19937 rng(11);
  int64_t accepted_total = 0, rejected_total = 0, retractions = 0;
  for (int trial = 0; trial < 16; ++trial) {
    const SchedulerOptions o{
        .max_running_requests = 1 + static_cast<int>(rng() % 8),
        .chunked_prefill_size = rng() % 3 == 0 ? -1 : 8 + static_cast<int>(rng() % 40),
        .schedule_conservativeness = 0.05 + 0.3 * (rng() % 4),
        .radix_cache = true};
    const int64_t pages = 10 + rng() % 20;
    KvPool pool = MakePool(pages, o.max_running_requests, 4, window);
    KvPool follower = MakePool(pages, o.max_running_requests, 4, window);
    Scheduler s(o, &pool);
    Sim sim;
    for (int i = 0; i < 30; ++i) {
      auto q = std::make_unique<SeqState>();
      q->id = i + 1;
      for (int k = 1 + static_cast<int>(rng() % 20); k > 0; --k) {
        q->tokens.push_back(static_cast<int32_t>(rng() % 4));
      }
      q->prompt_len = static_cast<int32_t>(q->tokens.size());
      q->max_new_tokens = 1 + static_cast<int>(rng() % 24);
      if (pool.PagesFor(q->prompt_len + q->max_new_tokens) > pages) continue;
      s.Enqueue(q.get());
      sim.seqs.push_back(std::move(q));
    }
    while (sim.finished < static_cast<int>(sim.seqs.size())) {
      for (const auto& q : sim.seqs) {
        if (q->slot < 0 || q->kv_len == 0 || q->pending() != 1) continue;
        const int budget = std::min<int>(5, q->max_new_tokens - q->output_len() - 1);
        q->draft.clear();
        for (int k = static_cast<int>(rng() % (budget + 1)); k > 0; --k) {
          q->draft.push_back(rng() % 3 == 0 ? 8 : 7);
        }
      }
      Expected<StepPlan> plan = s.Plan();
      ASSERT_TRUE(plan.ok()) << plan.status().ToString();
      ASSERT_FALSE(plan->batch.seqs.empty());
      for (const PoolOp& op : plan->ops) ASSERT_TRUE(ApplyPoolOp(follower, op).ok());
      for (std::size_t i = 0; i < plan->seqs.size(); ++i) {
        const SeqState* q = plan->seqs[i];
        const BatchSeq& b = plan->batch.seqs[i];
        ASSERT_EQ(b.pos0, q->kv_len);
        ASSERT_GE(pool.slot_pages(q->slot), pool.PagesFor(b.pos0 + b.num_tokens));
        if (i < plan->decode_seqs) {
          ASSERT_EQ(b.num_tokens, 1 + static_cast<int32_t>(q->draft.size()));
          ASSERT_EQ(b.all_logits, !q->draft.empty());
        } else {
          ASSERT_TRUE(q->draft.empty()) << "a prefilling sequence verifies nothing";
        }
      }
      ASSERT_TRUE(s.Commit(*plan).ok());
      for (std::size_t i = 0; i < plan->seqs.size(); ++i) {
        SeqState* q = plan->seqs[i];
        if (q->kv_len != static_cast<int64_t>(q->tokens.size())) continue;
        const auto drafted = static_cast<int32_t>(q->draft.size());
        int32_t emitted = 0;
        bool finished = false;
        for (int32_t k = 0; k <= drafted; ++k) {
          q->tokens.push_back(7);
          ++emitted;
          if (q->output_len() == q->max_new_tokens) {
            ASSERT_TRUE(s.Remove(q).ok());
            ++sim.finished;
            finished = true;
            break;
          }
          if (k < drafted && q->draft[k] != 7) break;
        }
        if (finished || drafted == 0) continue;
        accepted_total += emitted - 1;
        rejected_total += drafted - (emitted - 1);
        ASSERT_TRUE(s.Accept(q, emitted - 1).ok());
        ASSERT_TRUE(q->draft.empty());
      }
      for (const PoolOp& op : s.TakePendingOps()) ASSERT_TRUE(ApplyPoolOp(follower, op).ok());
      ASSERT_NO_FATAL_FAILURE(CheckSharedPool(s, pool, follower, sim.seqs));
      for (const auto& q : sim.seqs) {
        if (q->slot < 0) continue;
        // The KV of accepted tokens only: the last sampled token has none yet.
        ASSERT_EQ(q->kv_len + q->pending(), static_cast<int64_t>(q->tokens.size()));
        ASSERT_EQ(pool.first_page(q->slot) + pool.slot_pages(q->slot), pool.PagesFor(q->kv_len))
            << "request " << q->id << ": pages past its accepted tokens";
        // (A window group's holes may end a match earlier.)
        if (window == 0) {
          ASSERT_GE(s.cache()->PeekMatch(q->tokens, q->kv_len / 4), q->cached_pages)
              << "the cache holds tokens the request does not have";
        }
      }
    }
    retractions += static_cast<int64_t>(s.retractions());
    ASSERT_TRUE(s.FlushCache());
    for (const PoolOp& op : s.TakePendingOps()) ASSERT_TRUE(ApplyPoolOp(follower, op).ok());
    for (int g = 0; g < pool.num_groups(); ++g) {
      EXPECT_EQ(pool.free_pages(g), pages);
      EXPECT_EQ(follower.free_pages(g), pages);
    }
  }
  EXPECT_GT(accepted_total, 100);
  EXPECT_GT(rejected_total, 100);
  EXPECT_GT(retractions, 0) << "the pools were meant to force retractions";
}

// fcfs admits by arrival; lpm admits the queued request with the longest cached prefix first, and
// its prefill starts after the cached pages.
TEST(Scheduler, LpmAdmitsTheLongestCachedPrefixFirst) {
  for (SchedulePolicy policy : {SchedulePolicy::kFcfs, SchedulePolicy::kLpm}) {
    const SchedulerOptions o{.max_running_requests = 1,
                             .chunked_prefill_size = -1,
                             .radix_cache = true,
                             .policy = policy};
    KvPool pool = MakePool(32, 1, 4);
    Scheduler s(o, &pool);
    auto seq = [](uint64_t id, std::vector<int32_t> tokens) {
      auto q = std::make_unique<SeqState>();
      q->id = id;
      q->tokens = std::move(tokens);
      q->prompt_len = static_cast<int32_t>(q->tokens.size());
      q->max_new_tokens = 1;
      return q;
    };
    std::vector<int32_t> stem(32);
    for (int i = 0; i < 32; ++i) stem[i] = 100 + i;
    auto first = seq(1, stem);
    s.Enqueue(first.get());
    Expected<StepPlan> plan = s.Plan();
    ASSERT_TRUE(plan.ok());
    ASSERT_TRUE(s.Commit(*plan).ok());
    first->tokens.push_back(7);
    ASSERT_TRUE(s.Remove(first.get()).ok());  // caches its 8 pages
    EXPECT_EQ(s.cached_pages(), 8);
    auto other = seq(2, std::vector<int32_t>(20, 5));
    std::vector<int32_t> longer = stem;
    longer.insert(longer.end(), {1, 2, 3, 4, 5});
    auto sharing = seq(3, longer);
    s.Enqueue(other.get());
    s.Enqueue(sharing.get());
    plan = s.Plan();
    ASSERT_TRUE(plan.ok());
    ASSERT_EQ(plan->seqs.size(), 1u);
    if (policy == SchedulePolicy::kFcfs) {
      EXPECT_EQ(plan->seqs[0], other.get());
      EXPECT_EQ(plan->batch.seqs[0].pos0, 0);
    } else {
      EXPECT_EQ(plan->seqs[0], sharing.get());
      EXPECT_EQ(plan->batch.seqs[0].pos0, 32);
      EXPECT_EQ(plan->batch.seqs[0].num_tokens, 5);
      EXPECT_EQ(sharing->cached_tokens, 32);
    }
  }
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

// The page operations name their group on the wire: a follower holds, attaches and drops the page
// of the group the leader named, and a plan whose group field is negative is malformed.
TEST(Scheduler, PageOperationsCarryTheirGroupOverTheWire) {
  KvPoolOptions options{.num_layers = 2,
                        .num_kv_heads = 1,
                        .head_dim_k = 16,
                        .head_dim_v = 16,
                        .page_size = 4,
                        .num_pages = 8,
                        .window_pages = 6,
                        .max_slots = 2,
                        .max_pages_per_slot = 8,
                        .groups = {{{0}, 0, true}, {{1}, 8, true}}};
  auto made = KvPool::Create(options);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  KvPool& pool = *made;
  ASSERT_TRUE(ApplyPoolOp(pool, {PoolOp::kAcquire, 0, 0}).ok());
  ASSERT_TRUE(ApplyPoolOp(pool, {PoolOp::kReserve, 0, 8}).ok());
  const int32_t full = pool.SlotPage(0, 1, 0), window = pool.SlotPage(0, 1, 1);
  const std::vector<PoolOp> ops = {{PoolOp::kHold, -1, full, 0},
                                   {PoolOp::kHold, -1, window, 1},
                                   {PoolOp::kRelease, 0, 0},
                                   {PoolOp::kAcquire, 0, 0},
                                   {PoolOp::kAttach, 0, window, 1}};
  const Expected<WirePlan> wire = DecodePlan(EncodePlan({.ops = ops}));
  ASSERT_TRUE(wire.ok()) << wire.status().ToString();
  ASSERT_EQ(wire->ops.size(), ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) {
    EXPECT_EQ(wire->ops[i].group, ops[i].group);
    const Status applied = ApplyPoolOp(pool, wire->ops[i]);
    ASSERT_TRUE(applied.ok()) << i << ": " << applied.ToString();
  }
  EXPECT_EQ(pool.free_pages(0), 7);
  EXPECT_EQ(pool.free_pages(1), 5);
  EXPECT_EQ(pool.page_refs(window, 1), 2);
  EXPECT_EQ(pool.SlotPage(0, 0, 1), window);
  ASSERT_TRUE(ApplyPoolOp(pool, {PoolOp::kDrop, -1, window, 1}).ok());
  EXPECT_EQ(pool.page_refs(window, 1), 1);
  EXPECT_EQ(pool.page_refs(full, 0), 1);
  std::vector<int64_t> words = EncodePlan({.ops = {{PoolOp::kDrop, -1, full, 0}}});
  words[5] = -1;
  EXPECT_FALSE(DecodePlan(words).ok());
}

}  // namespace
}  // namespace ctxpar::engine
