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
// KV groups (kv_pool.h). A node owns one page list per group of the pool, each a page per
// page_tokens of its key (every group's pages cover page_tokens positions). A full-attention
// group's list is complete; a window group's may lack pages (kNoPage): a sequence gives back the
// window pages it no longer shows, and the cache lets them go first when the window group runs
// short (EvictWindow), keeping the node for the full-attention layers, as SGLang's SWA radix
// cache does. A prefix is usable only where every window group still has the pages a
// continuation needs: a match ends at the deepest page boundary b (b * page_tokens positions)
// whose pages [KvPool::FirstKept(b * page_tokens, W), b) are held in every window group of W.
// Locks protect the tree's shape (a locked node is never removed) and the full groups' pages; a
// window page is never locked: the cache drops only those it alone holds (the `droppable` test),
// and a sequence that uses one holds its own reference.
//
// Determinism: no clock; recency is a counter of operations, so two runs of the same operations
// evict the same pages. Thread safety: not thread-safe (the scheduler's thread).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <vector>

namespace ctxpar::engine {

class RadixCache {
 public:
  struct Node;

  static constexpr int32_t kNoPage = -1;
  // One page list per KV group ([group][page]).
  using GroupPages = std::vector<std::vector<int32_t>>;
  struct PageRef {
    int32_t group = 0;
    int32_t page = 0;
    bool operator==(const PageRef&) const = default;
  };

  // windows[g]: group g's window W (0: full attention); windows[0] must be 0.
  explicit RadixCache(int64_t page_tokens, std::vector<int> windows = {0});
  ~RadixCache();
  RadixCache(const RadixCache&) = delete;
  RadixCache& operator=(const RadixCache&) = delete;

  struct Match {
    Node* node = nullptr;  // the node where the match ends (the root when nothing matched)
    // The cached pages of tokens[0, num_pages() * page_tokens), per group. A window group of W
    // holds at least those a continuation sees, [KvPool::FirstKept(num_pages() * page_tokens, W),
    // num_pages()); below them it may have kNoPage.
    GroupPages pages;
    int64_t num_pages() const { return static_cast<int64_t>(pages[0].size()); }
  };
  // The longest usable cached prefix of `tokens` of at most max_pages whole pages. Splits the
  // node in which the match ends so that the result is a node to lock; marks the path as used.
  Match MatchPrefix(std::span<const int32_t> tokens, int64_t max_pages);
  // Pages MatchPrefix would return, without changing the tree (the lpm policy's sort key).
  int64_t PeekMatch(std::span<const int32_t> tokens, int64_t max_pages) const;
  // Caches tokens[0, n * page_tokens) whose KV is in `pages` (n pages per group; kNoPage in a
  // window group for a page the caller does not hold). Where the tree already holds a page of
  // that prefix it keeps its own; the pages it takes are appended to `taken` (the caller records
  // kHold for each). Returns the node of the whole prefix.
  Node* Insert(std::span<const int32_t> tokens, const GroupPages& pages,
               std::vector<PageRef>* taken);
  // Locks / unlocks `node` and its ancestors; null or the root is a no-op.
  void Lock(Node* node);
  void Unlock(Node* node);
  // Drops least recently used unlocked leaves until at least `pages` pages of group 0 are dropped
  // or none is left to drop; appends the dropped pages of every group to `dropped` and returns
  // how many of group 0's.
  int64_t Evict(int64_t pages, std::vector<PageRef>* dropped);
  // Drops pages of window group g for which droppable(page) holds, those of the least recently
  // used nodes first, until `pages` are dropped or none is left; the nodes stay. Appends them to
  // `dropped` and returns how many.
  int64_t EvictWindow(int g, int64_t pages, const std::function<bool(int32_t)>& droppable,
                      std::vector<PageRef>* dropped);
  // Drops every page; only when no node is locked (false, nothing done, otherwise).
  bool Reset(std::vector<PageRef>* dropped);

  int64_t page_tokens() const { return page_tokens_; }
  int num_groups() const { return static_cast<int>(windows_.size()); }
  // Pages of group g the tree holds.
  int64_t cached_pages(int g = 0) const { return cached_pages_[g]; }
  // Pages of group 0 in unlocked nodes (as many in every full-attention group).
  int64_t evictable_pages() const { return evictable_pages_; }
  // Every page the tree owns, in no particular order (the tests' accounting).
  std::vector<PageRef> AllPages() const;

 private:
  Node* Split(Node* node, int64_t pages);
  void Touch(Node* node);
  // Leading whole pages of `tokens` equal to those of the node's key.
  int64_t CommonPages(const Node& node, std::span<const int32_t> tokens) const;
  // The deepest usable match (see KV groups above) of at most max_pages pages.
  int64_t UsablePages(std::span<const int32_t> tokens, int64_t max_pages) const;
  // Removes an unlocked leaf, appending its pages to `dropped`.
  void RemoveLeaf(Node* leaf, std::vector<PageRef>* dropped);

  int64_t page_tokens_;
  std::vector<int> windows_;
  std::unique_ptr<Node> root_;
  std::vector<int64_t> cached_pages_;
  int64_t evictable_pages_ = 0;
  uint64_t clock_ = 0;
  uint64_t next_serial_ = 0;
};

}  // namespace ctxpar::engine
