// The prefix cache against a reference model: random sequences of admissions (match, lock,
// attach, reserve, insert), finishes (unlock, release), evictions and lookups over a real KvPool,
// with the tree's answers compared to a map from every cached page-aligned prefix to its page, and
// every page of the pool accounted for after each operation (free, or held once by the tree and
// once by each slot that lists it).
#include "engine/radix_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "ctxpar/kv_pool.h"

namespace ctxpar::engine {
namespace {

constexpr int kPageSize = 2, kDcp = 2, kPageTokens = kPageSize * kDcp;

using Tokens = std::vector<int32_t>;

Tokens Prefix(const Tokens& t, int64_t pages) {
  return Tokens(t.begin(), t.begin() + pages * kPageTokens);
}

KvPool MakePool(int64_t pages) {
  auto pool = KvPool::Create({.num_layers = 1,
                              .num_kv_heads = 1,
                              .head_dim_k = 4,
                              .head_dim_v = 4,
                              .page_size = kPageSize,
                              .dcp_size = kDcp,
                              .num_pages = pages,
                              .max_slots = 6,
                              .max_pages_per_slot = 16});
  EXPECT_TRUE(pool.ok()) << pool.status().ToString();
  return std::move(*pool);
}

struct Slot {
  int32_t slot = -1;
  Tokens tokens;
  RadixCache::Node* node = nullptr;
  int64_t locked_pages = 0;  // the reference's view of the lock: the prefix it covers
};

class RadixModel {
 public:
  explicit RadixModel(int64_t pages) : pool_(MakePool(pages)), tree_(kPageTokens) {}

  // Pages the reference would match: the longest run of cached prefixes.
  std::vector<int32_t> RefMatch(const Tokens& t, int64_t max_pages) const {
    std::vector<int32_t> pages;
    for (int64_t j = 1; j <= max_pages && j * kPageTokens <= int64_t(t.size()); ++j) {
      auto it = ref_.find(Prefix(t, j));
      if (it == ref_.end()) break;
      pages.push_back(it->second);
    }
    return pages;
  }

  bool Locked(const Tokens& prefix) const {
    for (const Slot& s : slots_) {
      if (s.locked_pages * kPageTokens >= int64_t(prefix.size()) &&
          std::equal(prefix.begin(), prefix.end(), s.tokens.begin())) {
        return true;
      }
    }
    return false;
  }

  void Evict(int64_t n) {
    const int64_t evictable = tree_.evictable_pages();
    std::vector<int32_t> dropped;
    const int64_t done = tree_.Evict(n, &dropped);
    ASSERT_EQ(done, static_cast<int64_t>(dropped.size()));
    ASSERT_GE(done, std::min(n, evictable));
    std::vector<Tokens> gone;
    for (int32_t page : dropped) {
      auto it = std::find_if(ref_.begin(), ref_.end(), [&](auto& e) { return e.second == page; });
      ASSERT_NE(it, ref_.end()) << "evicted page " << page << " the cache did not own";
      ASSERT_FALSE(Locked(it->first)) << "evicted a locked page";
      gone.push_back(it->first);
      ref_.erase(it);
      ASSERT_TRUE(pool_.DropPage(page).ok()) << "page " << page << " freed twice";
    }
    for (const Tokens& g : gone) {
      for (const auto& [prefix, page] : ref_) {
        ASSERT_FALSE(prefix.size() > g.size() && std::equal(g.begin(), g.end(), prefix.begin()))
            << "evicted a page whose extension stays cached";
      }
    }
  }

  // A request's life up to its prefill: match, lock, attach, reserve (evicting as needed), then
  // the tree takes its complete pages.
  void Admit(const Tokens& t) {
    const int64_t max_pages = (int64_t(t.size()) - 1) / kPageTokens;
    ASSERT_EQ(tree_.PeekMatch(t, max_pages), int64_t(RefMatch(t, max_pages).size()));
    RadixCache::Match m = tree_.MatchPrefix(t, max_pages);
    ASSERT_EQ(m.pages, RefMatch(t, max_pages));
    tree_.Lock(m.node);
    Slot s{-1, t, m.node, static_cast<int64_t>(m.pages.size())};
    const int64_t need = pool_.PagesFor(int64_t(t.size())) - int64_t(m.pages.size());
    if (pool_.free_slots() == 0 || need > pool_.free_pages() + tree_.evictable_pages()) {
      tree_.Unlock(m.node);
      return;
    }
    slots_.push_back(s);  // locked: the eviction below must spare its prefix
    if (pool_.free_pages() < need) Evict(need - pool_.free_pages());
    if (::testing::Test::HasFatalFailure()) return;
    Slot& q = slots_.back();
    q.slot = *pool_.AcquireSlot();
    for (int32_t page : m.pages) ASSERT_TRUE(pool_.AttachPage(q.slot, page).ok());
    ASSERT_TRUE(pool_.Reserve(q.slot, int64_t(t.size())).ok());
    const int64_t full = int64_t(t.size()) / kPageTokens;
    std::vector<int32_t> pages, taken, want_taken;
    for (int64_t v = 0; v < full; ++v) pages.push_back(pool_.SlotPage(q.slot, int32_t(v)));
    for (int64_t j = 1; j <= full; ++j) {
      if (ref_.emplace(Prefix(t, j), pages[j - 1]).second) want_taken.push_back(pages[j - 1]);
    }
    RadixCache::Node* node = tree_.Insert(t, pages, &taken);
    ASSERT_EQ(taken, want_taken);
    for (int32_t page : taken) ASSERT_TRUE(pool_.HoldPage(page).ok());
    tree_.Lock(node);
    tree_.Unlock(q.node);
    q.node = node;
    q.locked_pages = full;
  }

  void Finish(std::size_t i) {
    tree_.Unlock(slots_[i].node);
    ASSERT_TRUE(pool_.ReleaseSlot(slots_[i].slot).ok());
    slots_.erase(slots_.begin() + static_cast<std::ptrdiff_t>(i));
  }

  void CheckAccounting() const {
    std::vector<int32_t> cached = tree_.AllPages(), want;
    for (const auto& [prefix, page] : ref_) want.push_back(page);
    std::sort(cached.begin(), cached.end());
    std::sort(want.begin(), want.end());
    ASSERT_EQ(cached, want);
    ASSERT_EQ(tree_.cached_pages(), int64_t(ref_.size()));
    int64_t unlocked = 0;
    for (const auto& [prefix, page] : ref_) unlocked += Locked(prefix) ? 0 : 1;
    ASSERT_EQ(tree_.evictable_pages(), unlocked);
    std::vector<int32_t> holders(pool_.num_pages(), 0);
    for (int32_t page : cached) ++holders[page];
    for (const Slot& s : slots_) {
      for (int32_t v = 0; v < pool_.slot_pages(s.slot); ++v) ++holders[pool_.SlotPage(s.slot, v)];
    }
    int64_t free = 0;
    for (int32_t p = 0; p < pool_.num_pages(); ++p) {
      ASSERT_EQ(pool_.page_refs(p), holders[p]) << "page " << p;
      free += holders[p] == 0;
    }
    ASSERT_EQ(pool_.free_pages(), free) << "a page leaked or was freed twice";
  }

  KvPool pool_;
  RadixCache tree_;
  std::map<Tokens, int32_t> ref_;
  std::vector<Slot> slots_;
};

TEST(RadixCache, RandomOperationsAgreeWithAReferenceAndAccountForEveryPage) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    RadixModel m(8 + rng() % 24);
    // Few stems over a small alphabet: prompts share prefixes and split nodes mid-key.
    std::vector<Tokens> stems(3);
    for (Tokens& s : stems) {
      for (int i = 0; i < 16; ++i) s.push_back(static_cast<int32_t>(rng() % 3));
    }
    for (int op = 0; op < 200; ++op) {
      const unsigned kind = rng() % 10;
      if (kind < 5) {
        Tokens t = stems[rng() % stems.size()];
        t.resize(1 + rng() % t.size());
        const int extra = static_cast<int>(rng() % 12);
        for (int i = 0; i < extra; ++i) t.push_back(static_cast<int32_t>(rng() % 3));
        m.Admit(t);
      } else if (kind < 8 && !m.slots_.empty()) {
        m.Finish(rng() % m.slots_.size());
      } else if (kind == 8) {
        m.Evict(1 + rng() % 6);
      } else {
        std::vector<int32_t> dropped;
        const bool idle = m.tree_.evictable_pages() == m.tree_.cached_pages();
        const int64_t had = m.tree_.cached_pages();
        ASSERT_EQ(m.tree_.Reset(&dropped), idle);
        if (idle) {
          ASSERT_EQ(int64_t(dropped.size()), had);
          for (int32_t page : dropped) ASSERT_TRUE(m.pool_.DropPage(page).ok());
          m.ref_.clear();
        }
      }
      ASSERT_NO_FATAL_FAILURE(m.CheckAccounting()) << "trial " << trial << " op " << op;
    }
    while (!m.slots_.empty()) m.Finish(0);
    ASSERT_EQ(m.tree_.evictable_pages(), m.tree_.cached_pages());
    m.Evict(m.pool_.num_pages());
    ASSERT_NO_FATAL_FAILURE(m.CheckAccounting());
    EXPECT_EQ(m.pool_.free_pages(), m.pool_.num_pages());
  }
}

// Least recently used first: of two unlocked leaves, the one matched last stays.
TEST(RadixCache, EvictsTheLeastRecentlyUsedLeafFirst) {
  RadixCache tree(kPageTokens);
  std::vector<int32_t> taken, dropped;
  const Tokens a = {1, 1, 1, 1, 2, 2, 2, 2}, b = {1, 1, 1, 1, 3, 3, 3, 3};
  tree.Insert(a, std::vector<int32_t>{10, 11}, &taken);
  tree.Insert(b, std::vector<int32_t>{20, 21}, &taken);
  EXPECT_EQ(taken, (std::vector<int32_t>{10, 11, 21}));  // b's first page is a's
  tree.MatchPrefix(a, 2);
  EXPECT_EQ(tree.Evict(1, &dropped), 1);
  EXPECT_EQ(dropped, std::vector<int32_t>{21});
  EXPECT_EQ(tree.Evict(3, &dropped), 2);  // then a's leaf, then the shared page
  EXPECT_EQ(dropped, (std::vector<int32_t>{21, 11, 10}));
  EXPECT_EQ(tree.cached_pages(), 0);
}

// A match ends on a page boundary inside a node: the node splits there, and a lock on the first
// part keeps it while the rest goes.
TEST(RadixCache, MatchSplitsANodeAndLocksOnlyItsPrefix) {
  RadixCache tree(kPageTokens);
  std::vector<int32_t> taken, dropped;
  tree.Insert(Tokens{1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9, 9}, std::vector<int32_t>{4, 5, 6}, &taken);
  RadixCache::Match m = tree.MatchPrefix(Tokens{1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0}, 3);
  EXPECT_EQ(m.pages, (std::vector<int32_t>{4, 5}));
  tree.Lock(m.node);
  EXPECT_EQ(tree.evictable_pages(), 1);
  EXPECT_EQ(tree.Evict(3, &dropped), 1);
  EXPECT_EQ(dropped, std::vector<int32_t>{6});
  EXPECT_FALSE(tree.Reset(&dropped));
  tree.Unlock(m.node);
  EXPECT_TRUE(tree.Reset(&dropped));
  EXPECT_EQ(dropped, (std::vector<int32_t>{6, 4, 5}));
  // A partial last page is never matched.
  EXPECT_TRUE(tree.MatchPrefix(Tokens{1, 2, 3}, 1).pages.empty());
}

}  // namespace
}  // namespace ctxpar::engine
