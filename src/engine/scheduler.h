// The scheduler: what each engine step runs (SGLang's scheduler policy, continuous batching).
//
// A sequence is a request's tokens, prompt then output; the KV pool holds its first kv_len. A
// step feeds each chosen sequence the tokens it lacks, in order: one for a decoding sequence (the
// token it sampled last), a chunk of its prompt (or of prompt + output after a retraction) for
// a prefilling one; the row of its last token is sampled when the chunk reaches its end.
//
// Each step, in this order:
//  1. Decode: every running sequence that lacks one token gets it. When the pool cannot hold
//     them all, the running sequence with the fewest output tokens (ties: the longest prompt) is
//     retracted: its pages are freed, kv_len drops to 0 and it returns to the queue, to prefill
//     prompt + output again later. new_token_ratio then becomes
//     min(1, (sum of output tokens + 20 * running) / sum of max_new_tokens).
//  2. Prefill: running sequences that are partway through their prefill continue, then queued
//     ones are admitted in arrival order, while the step's prefill tokens stay within
//     chunked_prefill_size (-1: no limit), running sequences within max_running_requests, and
//     the admission rule holds: the pages left after every running sequence reserves
//     ceil(remaining new tokens * new_token_ratio) tokens must hold the new one's prompt (all of
//     it, page-rounded) plus min(max_new_tokens, 4096) * new_token_ratio. With window groups
//     (kv_pool.h) this holds in every group, a window group counting at most the pages a window
//     and one chunk span (KvPool::PeakPages); decode and prefill chunks likewise need their pages
//     in every group. The oldest queued
//     sequence is admitted whenever nothing runs (it always fits: the engine refuses requests
//     larger than the pool).
//  3. When nothing could run (prefills that each hold part of the pool and wait for more), the
//     same victim is retracted until something can.
//  4. new_token_ratio decays by (init - min) / 600 per step, from init = min(0.7 *
//     schedule_conservativeness, 1) to min = 0.14 * init.
//
// The prefix cache (radix_cache.h; on unless --disable-radix-cache, and off when a group's pages
// cover other positions than group 0's: a window group DCP does not shard at dcp > 1). Admission
// looks up the longest usable cached prefix of the sequence in whole pages, leaving at least its
// last token to compute (its logits row is the one sampled), locks it, attaches its pages to the
// new slot (in a window group only those the window shows, after a kSlide of the new slot to the
// prefix's end) and prefills from there. After every step each running sequence's completed pages
// are cached (a prefill shares its prefix with those admitted after it while it still runs); a
// finished or retracted sequence caches its pages before its slot is released, so a retracted one
// re-prefills from whatever the cache still holds when it is admitted again. Pages of unlocked
// cache nodes (in a window group: the pages only the cache holds) count as available wherever free
// pages are counted (decode, prefill, admission), and the least recently used are evicted when the
// free pages of a group fall short. With the lpm policy the queue is taken in order of cached
// prefix length (longest first; ties by arrival) when it holds at most 128 sequences, in arrival
// order beyond (SGLang's rule).
//
// The plan lists the pool operations in the order the leader made them (release, acquire,
// attach, reserve, hold, drop), so that every rank replays them on its own pool and the page ids
// and reference counts agree.
//
// Thread safety: used by the engine's run thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "ctxpar/batch.h"
#include "ctxpar/engine.h"
#include "ctxpar/kv_pool.h"
#include "ctxpar/status.h"
#include "engine/radix_cache.h"

namespace ctxpar::engine {

// What the scheduler knows of a request.
struct SeqState {
  uint64_t id = 0;
  std::vector<int32_t> tokens;  // prompt, then output
  int32_t prompt_len = 0;
  int32_t max_new_tokens = 0;
  int32_t slot = -1;                // -1: holds no KV
  int64_t kv_len = 0;               // tokens whose K/V the pool holds
  bool want_prompt_logits = false;  // every prompt row's logits (until the prompt is done once)
  RadixCache::Node* cache_node = nullptr;  // the locked end of its cached prefix
  int64_t cached_pages = 0;                // leading pages of its slot known to the cache
  int32_t cached_tokens = 0;               // prompt tokens the cache held at its first admission
  bool admitted_once = false;
  // Speculative decoding: tokens drafted to follow tokens.back(), set by the engine before Plan
  // for a decoding sequence; Decode verifies them in the same step (or drops them when pages are
  // short), and Accept clears them.
  std::vector<int32_t> draft;
  int32_t output_len() const { return static_cast<int32_t>(tokens.size()) - prompt_len; }
  int64_t pending() const { return static_cast<int64_t>(tokens.size()) - kv_len; }
};

// kSlide (KvPool::Slide) gives back the pages of a slot that its window groups no longer show,
// before the kReserve of its next chunk; plans carry it only for pools with a window group.
struct PoolOp {
  // kAttach: `length` is the page of group `group` that becomes the slot's next virtual page
  // there; kHold / kDrop: the prefix cache takes / lets go a reference to page `length` of group
  // `group` (slot unused). The other kinds act on every group and leave `group` 0.
  enum Kind : int32_t {
    kRelease = 0,
    kAcquire = 1,
    kReserve = 2,
    kSlide = 3,
    kAttach = 4,
    kHold = 5,
    kDrop = 6,
    kTruncate = 7
  };
  static constexpr int32_t kLastKind = kTruncate;
  Kind kind;
  int32_t slot;
  // kReserve: the length to hold; kSlide: the next chunk's first position; kTruncate: the length
  // whose pages stay (KvPool::Truncate); kAttach, kHold, kDrop: a page id
  int64_t length;
  int32_t group = 0;  // kAttach, kHold, kDrop: the KV group of the page
};

struct StepPlan {
  std::vector<PoolOp> ops;
  Batch batch;
  std::vector<SeqState*> seqs;       // the sequence of each batch entry
  std::size_t decode_seqs = 0;       // the first entries: decoding sequences (Decode's)
  std::vector<SeqState*> retracted;  // sent back to the queue this step
};

// SGLang's retraction order: whether `a` goes before `b` (fewer output tokens; then the longer
// prompt; then the newer request).
bool RetractBefore(const SeqState& a, const SeqState& b);

// Replays plan operations on a pool (every rank does, the leader while planning).
Status ApplyPoolOp(KvPool& pool, const PoolOp& op);

// The plan as engine.h's StepRecord (request ids, positions, retractions).
StepRecord RecordStep(const StepPlan& plan);

struct SchedulerOptions {
  int max_running_requests = 1;
  int chunked_prefill_size = -1;
  double schedule_conservativeness = 1.0;
  bool radix_cache = false;
  SchedulePolicy policy = SchedulePolicy::kFcfs;
};

class Scheduler {
 public:
  Scheduler(const SchedulerOptions& options, KvPool* pool);

  // Queues a new sequence (not owned; it must live until Remove).
  void Enqueue(SeqState* seq);
  // Drops a sequence wherever it is, releasing its slot (recorded in the next plan's ops).
  Status Remove(SeqState* seq);
  // Plans one step and applies its pool operations to the leader's pool. An empty batch means
  // nothing can run.
  Expected<StepPlan> Plan();
  // After the step: the sequences of the batch took their tokens (a verifying sequence only its
  // first, the token it sampled last: Accept adds the drafts the sampler confirmed).
  // Fails only when the pool refuses the cache's operations (a bug).
  Status Commit(const StepPlan& plan);
  // After sampling a verify step of `seq` (still running): the first `accepted` of its drafts
  // were confirmed, so their KV is kept and cached; the pages of the rejected ones are given back
  // (kTruncate, in the next plan's ops on every rank). Clears the draft.
  Status Accept(SeqState* seq, int32_t accepted);
  // Pool operations of Remove and Commit calls not yet in a plan, moved out (the engine sends
  // them with the next plan, or alone when it stops).
  std::vector<PoolOp> TakePendingOps();
  // Empties the prefix cache (its drops join the pending operations); false, nothing done, while
  // any sequence runs or waits.
  bool FlushCache();

  int running() const { return static_cast<int>(running_.size()); }
  int queued() const { return static_cast<int>(waiting_.size()); }
  double new_token_ratio() const { return ratio_; }
  uint64_t retractions() const { return retractions_; }
  // Pages the prefix cache owns, and those of them no running sequence uses.
  int64_t cached_pages() const { return cache_ ? cache_->cached_pages() : 0; }
  int64_t evictable_pages() const { return cache_ ? cache_->evictable_pages() : 0; }
  const RadixCache* cache() const { return cache_.get(); }

 private:
  Status Decode(StepPlan& plan);
  Status Prefill(StepPlan& plan);
  // Pages of group g the running sequences may still need, their remaining tokens times the
  // ratio (the admission reserve).
  int64_t ReservedPages(int g) const;
  // The most new tokens one forward gives the sequence.
  int64_t MaxChunk(const SeqState& s) const;
  // Whether every group has the pages `slot` (-1: a new one) lacks for positions [pos0, length).
  bool Fits(int32_t slot, int64_t pos0, int64_t length) const;
  // Pages of group g that sliding `slot` to pos0 and reserving up to `length` take (net of those
  // the slide gives back; may be negative).
  int64_t NetPages(int g, int32_t slot, int64_t pos0, int64_t length) const;
  // Records the kSlide of s's slot to its next position (pools with a window group only).
  Status Slide(StepPlan& plan, const SeqState& s);
  void Retract(SeqState* seq, StepPlan& plan);
  SeqState* Victim() const;
  Status Record(std::vector<PoolOp>& ops, PoolOp op);
  // Free pages of group g plus those the cache can evict: in a full-attention group the pages of
  // unlocked nodes, in a window group those the cache alone holds.
  int64_t FreePages(int g) const;
  // Evicts cached pages until `pages` of group g are free.
  Status EnsureFree(std::vector<PoolOp>& ops, int g, int64_t pages);
  // Records the kDrop of each page the cache let go.
  Status RecordDrops(std::vector<PoolOp>& ops, const std::vector<RadixCache::PageRef>& dropped);
  // Caches the sequence's complete pages and moves its lock to their end.
  Status CachePages(SeqState* seq, std::vector<PoolOp>& ops);
  // Caches the pages, unlocks them and releases the slot (a finish or a retraction).
  Status Drop(SeqState* seq, std::vector<PoolOp>& ops);
  // Locks the longest usable cached prefix of a queued sequence; returns its pages.
  RadixCache::GroupPages LockPrefix(SeqState* seq);
  // The first page a window group of `slot` needs for a continuation from pos0 (0 in a full
  // group): cached pages below it are not attached.
  int64_t FirstNeeded(int g, int64_t pos0) const;
  std::vector<SeqState*> AdmissionOrder() const;

  SchedulerOptions options_;
  KvPool* pool_;
  std::deque<SeqState*> waiting_;   // by arrival (id)
  std::vector<SeqState*> running_;  // by admission
  std::vector<PoolOp> pending_ops_;
  std::unique_ptr<RadixCache> cache_;
  double init_ratio_, min_ratio_, ratio_decay_, ratio_;
  uint64_t retractions_ = 0;
  bool windows_ = false;  // the pool has a window group: plans carry kSlide

  static constexpr int32_t kClipMaxNewTokens = 4096;
  static constexpr int32_t kRetractDecodeSteps = 20;
};

}  // namespace ctxpar::engine
