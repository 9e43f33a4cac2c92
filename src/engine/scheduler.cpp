#include "engine/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace ctxpar::engine {

Status ApplyPoolOp(KvPool& pool, const PoolOp& op) {
  switch (op.kind) {
    case PoolOp::kRelease:
      return pool.ReleaseSlot(op.slot);
    case PoolOp::kAcquire: {
      CTXPAR_ASSIGN_OR_RETURN(int32_t slot, pool.AcquireSlot());
      if (slot != op.slot) {
        return Internal(fmt::format(
            "the KV pool of this rank gave slot {} where the plan has slot {}: the ranks' pools "
            "have diverged",
            slot, op.slot));
      }
      return Status::Ok();
    }
    case PoolOp::kReserve:
      return pool.Reserve(op.slot, op.length);
    case PoolOp::kAttach:
      return pool.AttachPage(op.slot, static_cast<int32_t>(op.length), op.group);
    case PoolOp::kHold:
      return pool.HoldPage(static_cast<int32_t>(op.length), op.group);
    case PoolOp::kDrop:
      return pool.DropPage(static_cast<int32_t>(op.length), op.group);
    case PoolOp::kSlide:
      return pool.Slide(op.slot, op.length);
    case PoolOp::kTruncate:
      return pool.Truncate(op.slot, op.length);
  }
  return Internal("unknown pool operation");
}

StepRecord RecordStep(const StepPlan& plan) {
  StepRecord r;
  for (std::size_t i = 0; i < plan.seqs.size(); ++i) {
    const BatchSeq& b = plan.batch.seqs[i];
    r.batch.push_back(
        {plan.seqs[i]->id, b.pos0, b.num_tokens, static_cast<int32_t>(plan.seqs[i]->draft.size())});
  }
  for (const SeqState* s : plan.retracted) r.retracted.push_back(s->id);
  return r;
}

Scheduler::Scheduler(const SchedulerOptions& options, KvPool* pool)
    : options_(options),
      pool_(pool),
      init_ratio_(std::min(0.7 * options.schedule_conservativeness, 1.0)),
      min_ratio_(0.14 * init_ratio_),
      ratio_decay_((init_ratio_ - min_ratio_) / 600),
      ratio_(init_ratio_) {
  // The tree's pages cover page_tokens positions in every group: a group DCP does not shard
  // (at dcp > 1) leaves the cache off (the engine says so).
  std::vector<int> windows;
  bool same_pages = true;
  for (int g = 0; g < pool->num_groups(); ++g) {
    windows_ = windows_ || pool->group(g).window > 0;
    windows.push_back(pool->group(g).window);
    same_pages = same_pages && (pool->group(g).dcp_sharded || pool->options().dcp_size == 1);
  }
  if (options.radix_cache && same_pages) {
    cache_ = std::make_unique<RadixCache>(
        int64_t{pool->options().page_size} * pool->options().dcp_size, std::move(windows));
  }
}

void Scheduler::Enqueue(SeqState* seq) {
  auto at = std::upper_bound(waiting_.begin(), waiting_.end(), seq,
                             [](const SeqState* a, const SeqState* b) { return a->id < b->id; });
  waiting_.insert(at, seq);
}

Status Scheduler::Remove(SeqState* seq) {
  if (auto it = std::find(waiting_.begin(), waiting_.end(), seq); it != waiting_.end()) {
    waiting_.erase(it);
  }
  if (auto it = std::find(running_.begin(), running_.end(), seq); it != running_.end()) {
    running_.erase(it);
  }
  if (seq->slot < 0) return Status::Ok();
  return Drop(seq, pending_ops_);
}

bool Scheduler::FlushCache() {
  if (!running_.empty() || !waiting_.empty()) return false;
  if (!cache_) return true;
  std::vector<RadixCache::PageRef> dropped;
  cache_->Reset(&dropped);
  // Nothing runs, so every cached page is the cache's alone: a failed drop is the scheduler's own
  // bug, caught by the accounting tests.
  (void)RecordDrops(pending_ops_, dropped);
  return true;
}

std::vector<PoolOp> Scheduler::TakePendingOps() { return std::exchange(pending_ops_, {}); }

Status Scheduler::Record(std::vector<PoolOp>& ops, PoolOp op) {
  CTXPAR_RETURN_IF_ERROR(ApplyPoolOp(*pool_, op));
  ops.push_back(op);
  return Status::Ok();
}

int64_t Scheduler::FreePages(int g) const {
  if (!cache_) return pool_->free_pages(g);
  return pool_->free_pages(g) +
         (pool_->group(g).window == 0 ? cache_->evictable_pages() : pool_->cache_only_pages(g));
}

Status Scheduler::RecordDrops(std::vector<PoolOp>& ops,
                              const std::vector<RadixCache::PageRef>& dropped) {
  for (const RadixCache::PageRef& d : dropped) {
    CTXPAR_RETURN_IF_ERROR(Record(ops, {PoolOp::kDrop, -1, d.page, d.group}));
  }
  return Status::Ok();
}

Status Scheduler::EnsureFree(std::vector<PoolOp>& ops, int g, int64_t pages) {
  if (!cache_ || pool_->free_pages(g) >= pages) return Status::Ok();
  std::vector<RadixCache::PageRef> dropped;
  const int64_t missing = pages - pool_->free_pages(g);
  if (pool_->group(g).window == 0) {
    cache_->Evict(missing, &dropped);
  } else {
    cache_->EvictWindow(
        g, missing, [&](int32_t page) { return pool_->cache_only(page, g); }, &dropped);
  }
  return RecordDrops(ops, dropped);
}

int64_t Scheduler::FirstNeeded(int g, int64_t pos0) const {
  const int window = pool_->group(g).window;
  return window == 0 ? 0 : KvPool::FirstKept(pos0, window, cache_->page_tokens());
}

Status Scheduler::CachePages(SeqState* seq, std::vector<PoolOp>& ops) {
  const int64_t full = seq->kv_len / cache_->page_tokens();
  if (full <= seq->cached_pages) return Status::Ok();
  RadixCache::GroupPages pages(pool_->num_groups(), std::vector<int32_t>(full));
  for (int g = 0; g < pool_->num_groups(); ++g) {
    for (int32_t v = 0; v < full; ++v) {
      // A window group's pages below its first held one were given back (Slide).
      pages[g][v] = v < pool_->first_page(seq->slot, g) ? RadixCache::kNoPage
                                                        : pool_->SlotPage(seq->slot, v, g);
    }
  }
  std::vector<RadixCache::PageRef> taken;
  RadixCache::Node* node = cache_->Insert(seq->tokens, pages, &taken);
  for (const RadixCache::PageRef& t : taken) {
    CTXPAR_RETURN_IF_ERROR(Record(ops, {PoolOp::kHold, -1, t.page, t.group}));
  }
  cache_->Lock(node);
  cache_->Unlock(seq->cache_node);
  seq->cache_node = node;
  seq->cached_pages = full;
  return Status::Ok();
}

Status Scheduler::Drop(SeqState* seq, std::vector<PoolOp>& ops) {
  if (cache_) {
    CTXPAR_RETURN_IF_ERROR(CachePages(seq, ops));
    cache_->Unlock(seq->cache_node);
    seq->cache_node = nullptr;
    seq->cached_pages = 0;
  }
  CTXPAR_RETURN_IF_ERROR(Record(ops, {PoolOp::kRelease, seq->slot, 0}));
  seq->slot = -1;
  seq->kv_len = 0;
  seq->draft.clear();
  return Status::Ok();
}

RadixCache::GroupPages Scheduler::LockPrefix(SeqState* seq) {
  if (!cache_ || seq->want_prompt_logits) return RadixCache::GroupPages(pool_->num_groups());
  const auto max_pages = (static_cast<int64_t>(seq->tokens.size()) - 1) / cache_->page_tokens();
  RadixCache::Match m = cache_->MatchPrefix(seq->tokens, max_pages);
  cache_->Lock(m.node);
  seq->cache_node = m.node;
  return std::move(m.pages);
}

std::vector<SeqState*> Scheduler::AdmissionOrder() const {
  std::vector<SeqState*> order(waiting_.begin(), waiting_.end());
  constexpr std::size_t kLpmQueueLimit = 128;
  if (options_.policy != SchedulePolicy::kLpm || !cache_ || order.size() > kLpmQueueLimit) {
    return order;
  }
  std::vector<std::pair<int64_t, SeqState*>> keyed;
  for (SeqState* s : order) {
    const int64_t max_pages = (static_cast<int64_t>(s->tokens.size()) - 1) / cache_->page_tokens();
    keyed.emplace_back(s->want_prompt_logits ? 0 : cache_->PeekMatch(s->tokens, max_pages), s);
  }
  std::stable_sort(keyed.begin(), keyed.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (std::size_t i = 0; i < keyed.size(); ++i) order[i] = keyed[i].second;
  return order;
}

int64_t Scheduler::MaxChunk(const SeqState& s) const {
  const auto all = static_cast<int64_t>(s.tokens.size());
  return options_.chunked_prefill_size < 0 ? all
                                           : std::min<int64_t>(all, options_.chunked_prefill_size);
}

int64_t Scheduler::ReservedPages(int g) const {
  int64_t pages = 0;
  for (const SeqState* s : running_) {
    const int64_t remaining = std::max(0, s->max_new_tokens - s->output_len());
    const auto extra = static_cast<int64_t>(std::ceil(double(remaining) * ratio_));
    const int64_t want = static_cast<int64_t>(s->tokens.size()) + extra;
    pages += std::max<int64_t>(
        0, pool_->PeakPages(g, want, MaxChunk(*s)) - pool_->slot_pages(s->slot, g));
  }
  return pages;
}

bool Scheduler::Fits(int32_t slot, int64_t pos0, int64_t length) const {
  for (int g = 0; g < pool_->num_groups(); ++g) {
    if (NetPages(g, slot, pos0, length) > FreePages(g)) return false;
  }
  return true;
}

int64_t Scheduler::NetPages(int g, int32_t slot, int64_t pos0, int64_t length) const {
  return pool_->PagesNeeded(g, slot, pos0, length) - pool_->PagesFreed(g, slot, pos0);
}

Status Scheduler::Slide(StepPlan& plan, const SeqState& s) {
  if (!windows_) return Status::Ok();
  return Record(plan.ops, {PoolOp::kSlide, s.slot, s.kv_len});
}

void Scheduler::Retract(SeqState* seq, StepPlan& plan) {
  running_.erase(std::find(running_.begin(), running_.end(), seq));
  // A failed release would mean the slot was not in use: the scheduler's own bug, caught by the
  // pool accounting tests.
  (void)Drop(seq, plan.ops);
  Enqueue(seq);
  plan.retracted.push_back(seq);
  ++retractions_;
  int64_t decoded = 0, max_new = 0;
  for (const SeqState* s : running_) {
    decoded += s->output_len();
    max_new += s->max_new_tokens;
  }
  if (max_new > 0) {
    ratio_ = std::min(1.0, double(decoded + int64_t{kRetractDecodeSteps} * running()) / max_new);
  }
}

bool RetractBefore(const SeqState& a, const SeqState& b) {
  if (a.output_len() != b.output_len()) return a.output_len() < b.output_len();
  if (a.prompt_len != b.prompt_len) return a.prompt_len > b.prompt_len;
  return a.id > b.id;
}

SeqState* Scheduler::Victim() const {
  return *std::min_element(
      running_.begin(), running_.end(),
      [](const SeqState* a, const SeqState* b) { return RetractBefore(*a, *b); });
}

Status Scheduler::Decode(StepPlan& plan) {
  auto decoding = [](const SeqState* s) { return s->pending() == 1 && s->kv_len > 0; };
  // A decoding sequence's rows: its last token and its drafts.
  auto rows = [](const SeqState* s) { return 1 + static_cast<int64_t>(s->draft.size()); };
  for (SeqState* s : running_) {
    if (!decoding(s)) s->draft.clear();
  }
  for (;;) {
    bool fits = true;
    for (int g = 0; g < pool_->num_groups(); ++g) {
      int64_t need = 0;
      for (const SeqState* s : running_) {
        if (decoding(s)) need += NetPages(g, s->slot, s->kv_len, s->kv_len + rows(s));
      }
      fits = fits && need <= FreePages(g);
    }
    if (fits) break;
    // Drafts go before any request is retracted: they only save time.
    bool drafted = false;
    for (SeqState* s : running_) {
      drafted = drafted || !s->draft.empty();
      s->draft.clear();
    }
    if (!drafted) Retract(Victim(), plan);
  }
  // Every window slides before any page is reserved, so the pages one sequence gives back are
  // there for the others.
  for (SeqState* s : running_) {
    if (decoding(s)) CTXPAR_RETURN_IF_ERROR(Slide(plan, *s));
  }
  for (int g = 0; g < pool_->num_groups(); ++g) {
    int64_t need = 0;
    for (const SeqState* s : running_) {
      if (decoding(s)) need += pool_->PagesNeeded(g, s->slot, s->kv_len, s->kv_len + rows(s));
    }
    CTXPAR_RETURN_IF_ERROR(EnsureFree(plan.ops, g, need));
  }
  std::vector<int32_t> ids;
  for (SeqState* s : running_) {
    if (!decoding(s)) continue;
    CTXPAR_RETURN_IF_ERROR(Record(plan.ops, {PoolOp::kReserve, s->slot, s->kv_len + rows(s)}));
    // A verify step: the draft rows run as a chunk of the sequence, each row seeing the positions
    // up to its own (batch.h), with a logits row for every token.
    ids.assign(1, s->tokens[s->kv_len]);
    ids.insert(ids.end(), s->draft.begin(), s->draft.end());
    plan.batch.Add(s->slot, s->kv_len, ids.data(), static_cast<int32_t>(ids.size()), true,
                   !s->draft.empty());
    plan.seqs.push_back(s);
  }
  return Status::Ok();
}

Status Scheduler::Prefill(StepPlan& plan) {
  int64_t budget = options_.chunked_prefill_size < 0 ? std::numeric_limits<int64_t>::max()
                                                     : options_.chunked_prefill_size;
  auto add_chunk = [&](SeqState* s) -> Status {
    const int64_t chunk = std::min(s->pending(), budget);
    CTXPAR_RETURN_IF_ERROR(Slide(plan, *s));
    for (int g = 0; g < pool_->num_groups(); ++g) {
      CTXPAR_RETURN_IF_ERROR(
          EnsureFree(plan.ops, g, pool_->PagesNeeded(g, s->slot, s->kv_len, s->kv_len + chunk)));
    }
    CTXPAR_RETURN_IF_ERROR(Record(plan.ops, {PoolOp::kReserve, s->slot, s->kv_len + chunk}));
    const bool ends = s->kv_len + chunk == static_cast<int64_t>(s->tokens.size());
    plan.batch.Add(s->slot, s->kv_len, s->tokens.data() + s->kv_len, static_cast<int32_t>(chunk),
                   ends || s->want_prompt_logits, s->want_prompt_logits);
    plan.seqs.push_back(s);
    budget -= chunk;
    return Status::Ok();
  };
  for (SeqState* s : running_) {
    if (budget <= 0) break;
    if (s->pending() <= 1 && s->kv_len > 0) continue;  // decoding
    const int64_t chunk = std::min(s->pending(), budget);
    if (!Fits(s->slot, s->kv_len, s->kv_len + chunk)) {
      continue;  // waits for pages; decode retractions free them
    }
    CTXPAR_RETURN_IF_ERROR(add_chunk(s));
  }
  for (SeqState* s : AdmissionOrder()) {
    if (budget <= 0 || running() >= options_.max_running_requests || pool_->free_slots() == 0) {
      break;
    }
    const RadixCache::GroupPages prefix = LockPrefix(s);
    const auto cached = static_cast<int64_t>(prefix[0].size());
    const int64_t cached_tokens = cached * (cache_ ? cache_->page_tokens() : 0);
    const int64_t remaining = std::max(0, s->max_new_tokens - s->output_len());
    const auto estimate = static_cast<int64_t>(
        std::ceil(double(std::min<int64_t>(remaining, kClipMaxNewTokens)) * ratio_));
    const int64_t want = static_cast<int64_t>(s->tokens.size()) + estimate;
    const int64_t chunk = std::min(static_cast<int64_t>(s->tokens.size()) - cached_tokens, budget);
    // The cached pages are in use: the new slot attaches them (in a window group, those its
    // window shows). Those only the cache held stop counting as evictable.
    bool admit = true;
    for (int g = 0; g < pool_->num_groups(); ++g) {
      const int64_t attached = cached - (cached > 0 ? FirstNeeded(g, cached_tokens) : 0);
      int64_t pinned = 0;
      for (int64_t v = cached - attached; v < cached && pool_->group(g).window > 0; ++v) {
        pinned += pool_->cache_only(prefix[g][v], g) ? 1 : 0;
      }
      const int64_t free = FreePages(g) - pinned;
      const int64_t cost = pool_->PeakPages(g, want, MaxChunk(*s)) - attached;
      if (!running_.empty() && cost > free - ReservedPages(g)) admit = false;
      if (NetPages(g, -1, cached_tokens, cached_tokens + chunk) - attached > free) admit = false;
    }
    if (!admit) {
      if (cache_) cache_->Unlock(s->cache_node);
      s->cache_node = nullptr;
      break;
    }
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), s));
    CTXPAR_ASSIGN_OR_RETURN(s->slot, pool_->AcquireSlot());
    plan.ops.push_back({PoolOp::kAcquire, s->slot, 0});
    if (windows_ && cached > 0) {
      CTXPAR_RETURN_IF_ERROR(Record(plan.ops, {PoolOp::kSlide, s->slot, cached_tokens}));
    }
    for (int g = 0; g < pool_->num_groups() && cached > 0; ++g) {
      for (int64_t v = FirstNeeded(g, cached_tokens); v < cached; ++v) {
        CTXPAR_RETURN_IF_ERROR(Record(plan.ops, {PoolOp::kAttach, s->slot, prefix[g][v], g}));
      }
    }
    s->kv_len = cached_tokens;
    s->cached_pages = cached;
    if (!s->admitted_once) {
      s->admitted_once = true;
      s->cached_tokens = static_cast<int32_t>(cached_tokens);
    }
    running_.push_back(s);
    CTXPAR_RETURN_IF_ERROR(add_chunk(s));
  }
  return Status::Ok();
}

Expected<StepPlan> Scheduler::Plan() {
  StepPlan plan;
  plan.ops = TakePendingOps();
  CTXPAR_RETURN_IF_ERROR(Decode(plan));
  plan.decode_seqs = plan.seqs.size();
  CTXPAR_RETURN_IF_ERROR(Prefill(plan));
  // Prefills that each hold part of the pool and wait for more would wait forever: retract until
  // one can go on (with nothing running, the oldest queued sequence fits the whole pool).
  while (plan.batch.seqs.empty() && !running_.empty()) {
    Retract(Victim(), plan);
    CTXPAR_RETURN_IF_ERROR(Prefill(plan));
  }
  ratio_ = std::max(min_ratio_, ratio_ - ratio_decay_);
  return plan;
}

Status Scheduler::Commit(const StepPlan& plan) {
  for (std::size_t i = 0; i < plan.seqs.size(); ++i) {
    SeqState* s = plan.seqs[i];
    s->kv_len += plan.batch.seqs[i].num_tokens - static_cast<int64_t>(s->draft.size());
    if (s->kv_len >= s->prompt_len) s->want_prompt_logits = false;
    if (cache_) CTXPAR_RETURN_IF_ERROR(CachePages(s, pending_ops_));
  }
  return Status::Ok();
}

Status Scheduler::Accept(SeqState* seq, int32_t accepted) {
  const auto drafted = static_cast<int32_t>(seq->draft.size());
  seq->draft.clear();
  if (seq->slot < 0 || accepted < 0 || accepted > drafted) {
    return Internal(fmt::format("Scheduler::Accept: {} of {} drafts for request {} (slot {})",
                                accepted, drafted, seq->id, seq->slot));
  }
  seq->kv_len += accepted;
  if (accepted < drafted) {
    CTXPAR_RETURN_IF_ERROR(Record(pending_ops_, {PoolOp::kTruncate, seq->slot, seq->kv_len}));
  }
  if (cache_) CTXPAR_RETURN_IF_ERROR(CachePages(seq, pending_ops_));
  return Status::Ok();
}

}  // namespace ctxpar::engine
