// RadixCache: the prefix cache of the leader (SGLang's RadixCache), a radix tree over token ids
// whose nodes own KV pages, so that a prompt that starts like an earlier sequence reuses its KV.
//
// Pages. The tree works in whole virtual pages of page_tokens = P * N tokens (page size P, DCP
// size N; kv_pool.h): a node's key is a multiple of page_tokens tokens and it owns one page id
// per page_tokens of its key, the page that holds those positions of the sequence on every rank.
// A match is a whole number of pages, so a sequence that reuses a prefix starts its own KV at a
// page boundary and never writes a page the tree owns.
//
// Ownership. The tree holds one reference to each page it owns (the pool counts references:
// PoolOp kHold when the tree takes a page, kDrop when it lets it go); slots that use a cached
// page hold their own reference (kAttach). The tree never frees memory itself: Insert says which
// of the caller's pages it took, Evict and Reset which pages it dropped, and the caller records
// the pool operations so that every rank replays them.
//
// Locks. A running sequence locks the deepest node of its prefix (Lock walks to the root, as
// SGLang's inc_lock_ref), so none of its cached pages is evicted while it runs. evictable_pages()
// counts the pages of unlocked nodes: evicting them frees pages no running sequence uses, so
// admission counts them as available. Evict removes least recently used unlocked leaves (ties:
// the older node) until it has dropped enough pages; a parent left without children becomes a
// leaf in turn.
//
// KV groups. Each node owns one page per page_tokens for the pool's single group. A model with
// sliding-window layers (a second group keeping the last W positions) would give a node one page
// list per group; docs/engine.md says how window layers are meant to use the cache.
//
// Determinism: no clock; recency is a counter of operations, so two runs of the same operations
// evict the same pages. Thread safety: not thread-safe (the scheduler's thread).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

namespace ctxpar::engine {

class RadixCache {
 public:
  struct Node;

  explicit RadixCache(int64_t page_tokens);
  ~RadixCache();
  RadixCache(const RadixCache&) = delete;
  RadixCache& operator=(const RadixCache&) = delete;

  struct Match {
    Node* node = nullptr;        // the node where the match ends (the root when nothing matched)
    std::vector<int32_t> pages;  // the cached pages of tokens[0, pages.size() * page_tokens)
  };
  // The longest cached prefix of `tokens` of at most max_pages whole pages. Splits the node in
  // which the match ends so that the result is a node to lock; marks the path as used.
  Match MatchPrefix(std::span<const int32_t> tokens, int64_t max_pages);
  // Pages MatchPrefix would return, without changing the tree (the lpm policy's sort key).
  int64_t PeekMatch(std::span<const int32_t> tokens, int64_t max_pages) const;
  // Caches tokens[0, pages.size() * page_tokens) whose KV is in `pages`. Where the tree already
  // holds a page of that prefix it keeps its own; the pages it takes are appended to `taken`
  // (the caller records kHold for each). Returns the node of the whole prefix.
  Node* Insert(std::span<const int32_t> tokens, std::span<const int32_t> pages,
               std::vector<int32_t>* taken);
  // Locks / unlocks `node` and its ancestors; null or the root is a no-op.
  void Lock(Node* node);
  void Unlock(Node* node);
  // Drops least recently used unlocked leaves until at least `pages` pages are dropped or none is
  // left to drop; appends the dropped pages to `dropped` and returns how many.
  int64_t Evict(int64_t pages, std::vector<int32_t>* dropped);
  // Drops every page; only when no node is locked (false, nothing done, otherwise).
  bool Reset(std::vector<int32_t>* dropped);

  int64_t page_tokens() const { return page_tokens_; }
  int64_t cached_pages() const { return cached_pages_; }
  int64_t evictable_pages() const { return evictable_pages_; }
  // Every page the tree owns, in no particular order (the tests' accounting).
  std::vector<int32_t> AllPages() const;

 private:
  Node* Split(Node* node, int64_t pages);
  void Touch(Node* node);
  // Leading whole pages of `tokens` equal to those of the node's key.
  int64_t CommonPages(const Node& node, std::span<const int32_t> tokens) const;

  int64_t page_tokens_;
  std::unique_ptr<Node> root_;
  int64_t cached_pages_ = 0;
  int64_t evictable_pages_ = 0;
  uint64_t clock_ = 0;
  uint64_t next_serial_ = 0;
};

}  // namespace ctxpar::engine
