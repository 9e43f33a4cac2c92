// The prefix cache against a reference model: random sequences of admissions (match, lock,
// attach, reserve, slide, insert), finishes (unlock, release), evictions and lookups over a real
// KvPool, with the tree's answers compared to a map from every cached page-aligned prefix to its
// pages, and every page of the pool accounted for after each operation (free, or held once by the
// tree and once by each slot that lists it). With a window group (W = 7 positions), a sequence
// gives back the window pages it no longer shows, the tree keeps those it was given, the window
// group is evicted on its own, and a match ends where a continuation's window pages are all held.
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

constexpr int kPageSize = 2, kDcp = 2, kPageTokens = kPageSize * kDcp, kWindow = 7;
constexpr int32_t kNone = RadixCache::kNoPage;

using Tokens = std::vector<int32_t>;
using PageRef = RadixCache::PageRef;

Tokens Prefix(const Tokens& t, int64_t pages) {
  return Tokens(t.begin(), t.begin() + pages * kPageTokens);
}

// One full-attention group, and with `window` a second group of layer 1 keeping W positions.
KvPool MakePool(int64_t pages, int window) {
  KvPoolOptions o{.num_layers = window > 0 ? 2 : 1,
                  .num_kv_heads = 1,
                  .head_dim_k = 4,
                  .head_dim_v = 4,
                  .page_size = kPageSize,
                  .dcp_size = kDcp,
                  .num_pages = pages,
                  .window_pages = pages,
                  .max_slots = 6,
                  .max_pages_per_slot = 16};
  if (window > 0) o.groups = {{.layers = {0}, .window = 0}, {.layers = {1}, .window = window}};
  auto pool = KvPool::Create(o);
  EXPECT_TRUE(pool.ok()) << pool.status().ToString();
  return std::move(*pool);
}

struct Slot {
  int32_t slot = -1;
  Tokens tokens;
  RadixCache::Node* node = nullptr;
  int64_t locked_pages = 0;  // the reference's view of the lock: the prefix it covers
};

// The reference's entry of a cached prefix: its last page in each group (kNone: not held).
struct Entry {
  int32_t page = 0;
  int32_t window = kNone;
};

class RadixModel {
 public:
  RadixModel(int64_t pages, int window)
      : window_(window),
        pool_(MakePool(pages, window)),
        tree_(kPageTokens, window > 0 ? std::vector<int>{0, window} : std::vector<int>{0}) {}

  int groups() const { return window_ > 0 ? 2 : 1; }
  int64_t FirstNeeded(int64_t pages) const {
    return pages == 0 ? 0 : KvPool::FirstKept(pages * kPageTokens, window_, kPageTokens);
  }

  // The pages the reference would match: the longest run of cached prefixes, cut back to the
  // deepest boundary whose window pages are all held.
  int64_t RefMatch(const Tokens& t, int64_t max_pages) const {
    int64_t run = 0;
    while (run < max_pages && (run + 1) * kPageTokens <= int64_t(t.size()) &&
           ref_.count(Prefix(t, run + 1)) != 0) {
      ++run;
    }
    for (; run > 0 && window_ > 0; --run) {
      bool held = true;
      for (int64_t j = FirstNeeded(run) + 1; j <= run; ++j) {
        held = held && ref_.at(Prefix(t, j)).window != kNone;
      }
      if (held) break;
    }
    return run;
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

  void Drop(const std::vector<PageRef>& dropped) {
    for (const PageRef& d : dropped) {
      ASSERT_TRUE(pool_.DropPage(d.page, d.group).ok()) << "page " << d.page << " freed twice";
    }
  }

  // Whole prefixes go: leaves first, locked ones never, with their window pages.
  void Evict(int64_t n) {
    const int64_t evictable = tree_.evictable_pages();
    std::vector<PageRef> dropped;
    const int64_t done = tree_.Evict(n, &dropped);
    ASSERT_GE(done, std::min(n, evictable));
    std::vector<Tokens> gone;
    int64_t full = 0, gone_windows = 0;
    for (const PageRef& d : dropped) {
      if (d.group != 0) continue;
      ++full;
      auto it =
          std::find_if(ref_.begin(), ref_.end(), [&](auto& e) { return e.second.page == d.page; });
      ASSERT_NE(it, ref_.end()) << "evicted page " << d.page << " the cache did not own";
      ASSERT_FALSE(Locked(it->first)) << "evicted a locked page";
      gone.push_back(it->first);
      if (it->second.window != kNone) {
        ++gone_windows;
        ASSERT_NE(std::find(dropped.begin(), dropped.end(), PageRef{1, it->second.window}),
                  dropped.end())
            << "a prefix went without its window page";
      }
      ref_.erase(it);
    }
    ASSERT_EQ(full, done);
    int64_t windows = 0;
    for (const PageRef& d : dropped) windows += d.group == 1;
    ASSERT_EQ(windows, gone_windows) << "dropped window pages of prefixes that stay";
    for (const Tokens& g : gone) {
      for (const auto& [prefix, entry] : ref_) {
        ASSERT_FALSE(prefix.size() > g.size() && std::equal(g.begin(), g.end(), prefix.begin()))
            << "evicted a page whose extension stays cached";
      }
    }
    Drop(dropped);
  }

  // Window pages only the cache holds go, the prefixes stay for the full-attention layers.
  void EvictWindow(int64_t n) {
    const int64_t droppable = pool_.cache_only_pages(1);
    std::vector<PageRef> dropped;
    const int64_t done = tree_.EvictWindow(
        1, n, [&](int32_t page) { return pool_.cache_only(page, 1); }, &dropped);
    ASSERT_EQ(done, int64_t(dropped.size()));
    ASSERT_EQ(done, std::min(n, droppable));
    for (const PageRef& d : dropped) {
      ASSERT_EQ(d.group, 1);
      ASSERT_TRUE(pool_.cache_only(d.page, 1)) << "dropped a window page a slot still uses";
      auto it = std::find_if(ref_.begin(), ref_.end(),
                             [&](auto& e) { return e.second.window == d.page; });
      ASSERT_NE(it, ref_.end()) << "evicted window page " << d.page << " the cache did not own";
      it->second.window = kNone;
    }
    Drop(dropped);
  }

  void EnsureFree(int g, int64_t need) {
    if (pool_.free_pages(g) >= need) return;
    if (g == 0) {
      Evict(need - pool_.free_pages());
    } else {
      EvictWindow(need - pool_.free_pages(1));
    }
  }

  // A request's life up to its prefill: match, lock, attach (after sliding the new slot to the
  // prefix's end), reserve (evicting as needed), slide its window to a random point of its
  // prompt, then the tree takes its complete pages.
  void Admit(const Tokens& t, std::mt19937& rng) {
    const int64_t max_pages = (int64_t(t.size()) - 1) / kPageTokens;
    const int64_t want = RefMatch(t, max_pages);
    ASSERT_EQ(tree_.PeekMatch(t, max_pages), want);
    RadixCache::Match m = tree_.MatchPrefix(t, max_pages);
    ASSERT_EQ(m.num_pages(), want);
    for (int64_t j = 1; j <= want; ++j) {
      const Entry& e = ref_.at(Prefix(t, j));
      ASSERT_EQ(m.pages[0][j - 1], e.page);
      if (window_ > 0) ASSERT_EQ(m.pages[1][j - 1], e.window);
    }
    tree_.Lock(m.node);
    const int64_t keep = FirstNeeded(want), len = int64_t(t.size());
    int64_t pinned = 0;
    for (int64_t v = keep; v < want && window_ > 0; ++v)
      pinned += pool_.cache_only(m.pages[1][v], 1);
    const int64_t need0 = pool_.PagesFor(len) - want;
    const int64_t need1 = window_ > 0 ? pool_.PagesFor(len, 1) - want : 0;
    if (pool_.free_slots() == 0 || need0 > pool_.free_pages() + tree_.evictable_pages() ||
        (window_ > 0 && need1 > pool_.free_pages(1) + pool_.cache_only_pages(1) - pinned)) {
      tree_.Unlock(m.node);
      return;
    }
    slots_.push_back({-1, t, m.node, want});  // locked: the eviction below must spare its prefix
    Slot& q = slots_.back();
    q.slot = *pool_.AcquireSlot();
    if (window_ > 0) ASSERT_TRUE(pool_.Slide(q.slot, want * kPageTokens).ok());
    for (int g = 0; g < groups(); ++g) {
      for (int64_t v = g == 0 ? 0 : keep; v < want; ++v) {
        ASSERT_TRUE(pool_.AttachPage(q.slot, m.pages[g][v], g).ok());
      }
    }
    ASSERT_NO_FATAL_FAILURE(EnsureFree(0, need0));
    if (window_ > 0) ASSERT_NO_FATAL_FAILURE(EnsureFree(1, need1));
    ASSERT_TRUE(pool_.Reserve(q.slot, len).ok());
    if (window_ > 0) {
      const int64_t to = want * kPageTokens + int64_t(rng() % (len - want * kPageTokens + 1));
      ASSERT_TRUE(pool_.Slide(q.slot, to).ok());
    }
    const int64_t full = len / kPageTokens;
    RadixCache::GroupPages pages(groups());
    for (int g = 0; g < groups(); ++g) {
      for (int32_t v = 0; v < full; ++v) {
        pages[g].push_back(v < pool_.first_page(q.slot, g) ? kNone : pool_.SlotPage(q.slot, v, g));
      }
    }
    std::vector<PageRef> want_taken, taken;
    for (int64_t j = 1; j <= full; ++j) {
      const int32_t w = window_ > 0 ? pages[1][j - 1] : kNone;
      auto [it, added] = ref_.emplace(Prefix(t, j), Entry{pages[0][j - 1], w});
      if (added) want_taken.push_back({0, pages[0][j - 1]});
      if (w != kNone && (added || it->second.window == kNone)) {
        it->second.window = w;
        want_taken.push_back({1, w});
      }
    }
    RadixCache::Node* node = tree_.Insert(t, pages, &taken);
    auto order = [](const PageRef& a, const PageRef& b) {
      return std::pair(a.group, a.page) < std::pair(b.group, b.page);
    };
    std::sort(taken.begin(), taken.end(), order);
    std::sort(want_taken.begin(), want_taken.end(), order);
    ASSERT_EQ(taken, want_taken);
    for (const PageRef& p : taken) ASSERT_TRUE(pool_.HoldPage(p.page, p.group).ok());
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
    std::vector<std::vector<int32_t>> cached(groups()), want(groups());
    for (const PageRef& p : tree_.AllPages()) cached[p.group].push_back(p.page);
    for (const auto& [prefix, e] : ref_) {
      want[0].push_back(e.page);
      if (e.window != kNone) want[1].push_back(e.window);
    }
    int64_t unlocked = 0;
    for (const auto& [prefix, e] : ref_) unlocked += Locked(prefix) ? 0 : 1;
    ASSERT_EQ(tree_.evictable_pages(), unlocked);
    for (int g = 0; g < groups(); ++g) {
      std::sort(cached[g].begin(), cached[g].end());
      std::sort(want[g].begin(), want[g].end());
      ASSERT_EQ(cached[g], want[g]) << "group " << g;
      ASSERT_EQ(tree_.cached_pages(g), int64_t(want[g].size()));
      std::vector<int32_t> holders(pool_.num_pages(g), 0);
      for (int32_t page : cached[g]) ++holders[page];
      std::vector<int32_t> cache_only = holders;
      for (const Slot& s : slots_) {
        const int32_t first = pool_.first_page(s.slot, g);
        for (int32_t v = first; v < first + pool_.slot_pages(s.slot, g); ++v) {
          ++holders[pool_.SlotPage(s.slot, v, g)];
        }
      }
      int64_t free = 0, only = 0;
      for (int32_t p = 0; p < pool_.num_pages(g); ++p) {
        ASSERT_EQ(pool_.page_refs(p, g), holders[p]) << "group " << g << " page " << p;
        free += holders[p] == 0;
        only += holders[p] > 0 && holders[p] == cache_only[p];
      }
      ASSERT_EQ(pool_.free_pages(g), free) << "a page leaked or was freed twice, group " << g;
      ASSERT_EQ(pool_.cache_only_pages(g), only) << "group " << g;
    }
  }

  int window_;
  KvPool pool_;
  RadixCache tree_;
  std::map<Tokens, Entry> ref_;
  std::vector<Slot> slots_;
};

class RadixCacheRandom : public ::testing::TestWithParam<int> {};

TEST_P(RadixCacheRandom, OperationsAgreeWithAReferenceAndAccountForEveryPage) {
  const int window = GetParam();
  std::mt19937 rng(11 + window);
  for (int trial = 0; trial < 40; ++trial) {
    RadixModel m(8 + rng() % 24, window);
    // Few stems over a small alphabet: prompts share prefixes and split nodes mid-key.
    std::vector<Tokens> stems(3);
    for (Tokens& s : stems) {
      for (int i = 0; i < 16; ++i) s.push_back(static_cast<int32_t>(rng() % 3));
    }
    for (int op = 0; op < 200; ++op) {
      const unsigned kind = rng() % 11;
      if (kind < 5) {
        Tokens t = stems[rng() % stems.size()];
        t.resize(1 + rng() % t.size());
        const int extra = static_cast<int>(rng() % 12);
        for (int i = 0; i < extra; ++i) t.push_back(static_cast<int32_t>(rng() % 3));
        m.Admit(t, rng);
      } else if (kind < 8 && !m.slots_.empty()) {
        m.Finish(rng() % m.slots_.size());
      } else if (kind == 8) {
        m.Evict(1 + rng() % 6);
      } else if (kind == 9 && window > 0) {
        m.EvictWindow(1 + rng() % 6);
      } else if (kind == 10) {
        std::vector<PageRef> dropped;
        const bool idle = m.tree_.evictable_pages() == m.tree_.cached_pages();
        int64_t had = 0;
        for (int g = 0; g < m.groups(); ++g) had += m.tree_.cached_pages(g);
        ASSERT_EQ(m.tree_.Reset(&dropped), idle);
        if (idle) {
          ASSERT_EQ(int64_t(dropped.size()), had);
          m.Drop(dropped);
          m.ref_.clear();
        }
      }
      ASSERT_NO_FATAL_FAILURE(m.CheckAccounting()) << "trial " << trial << " op " << op;
    }
    while (!m.slots_.empty()) m.Finish(0);
    ASSERT_EQ(m.tree_.evictable_pages(), m.tree_.cached_pages());
    m.Evict(m.pool_.num_pages());
    ASSERT_NO_FATAL_FAILURE(m.CheckAccounting());
    for (int g = 0; g < m.groups(); ++g) EXPECT_EQ(m.pool_.free_pages(g), m.pool_.num_pages(g));
  }
}

INSTANTIATE_TEST_SUITE_P(Groups, RadixCacheRandom, ::testing::Values(0, kWindow),
                         [](const auto& info) {
                           return info.param == 0 ? std::string("FullOnly")
                                                  : "Window" + std::to_string(info.param);
                         });

// Least recently used first: of two unlocked leaves, the one matched last stays.
TEST(RadixCache, EvictsTheLeastRecentlyUsedLeafFirst) {
  RadixCache tree(kPageTokens);
  std::vector<PageRef> taken, dropped;
  const Tokens a = {1, 1, 1, 1, 2, 2, 2, 2}, b = {1, 1, 1, 1, 3, 3, 3, 3};
  tree.Insert(a, RadixCache::GroupPages{{10, 11}}, &taken);
  tree.Insert(b, RadixCache::GroupPages{{20, 21}}, &taken);
  EXPECT_EQ(taken, (std::vector<PageRef>{{0, 10}, {0, 11}, {0, 21}}));  // b's first page is a's
  tree.MatchPrefix(a, 2);
  EXPECT_EQ(tree.Evict(1, &dropped), 1);
  EXPECT_EQ(dropped, (std::vector<PageRef>{{0, 21}}));
  EXPECT_EQ(tree.Evict(3, &dropped), 2);  // then a's leaf, then the shared page
  EXPECT_EQ(dropped, (std::vector<PageRef>{{0, 21}, {0, 11}, {0, 10}}));
  EXPECT_EQ(tree.cached_pages(), 0);
}

// A match ends on a page boundary inside a node: the node splits there, and a lock on the first
// part keeps it while the rest goes.
TEST(RadixCache, MatchSplitsANodeAndLocksOnlyItsPrefix) {
  RadixCache tree(kPageTokens);
  std::vector<PageRef> taken, dropped;
  tree.Insert(Tokens{1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9, 9}, RadixCache::GroupPages{{4, 5, 6}},
              &taken);
  RadixCache::Match m = tree.MatchPrefix(Tokens{1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0}, 3);
  EXPECT_EQ(m.pages[0], (std::vector<int32_t>{4, 5}));
  tree.Lock(m.node);
  EXPECT_EQ(tree.evictable_pages(), 1);
  EXPECT_EQ(tree.Evict(3, &dropped), 1);
  EXPECT_EQ(dropped, (std::vector<PageRef>{{0, 6}}));
  EXPECT_FALSE(tree.Reset(&dropped));
  tree.Unlock(m.node);
  EXPECT_TRUE(tree.Reset(&dropped));
  EXPECT_EQ(dropped, (std::vector<PageRef>{{0, 6}, {0, 4}, {0, 5}}));
  // A partial last page is never matched.
  EXPECT_EQ(tree.MatchPrefix(Tokens{1, 2, 3}, 1).num_pages(), 0);
}

// A window group of W = 7 over pages of 4 positions: a continuation from page boundary b sees the
// pages b - 2 and b - 1. A match ends at the deepest boundary whose window pages the tree holds;
// EvictWindow lets window pages go and keeps the node; a later insert fills the holes.
TEST(RadixCache, WindowPagesDecideWhereAMatchEnds) {
  RadixCache tree(kPageTokens, {0, kWindow});
  std::vector<PageRef> taken, dropped;
  const Tokens a = {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5};
  tree.Insert(a, RadixCache::GroupPages{{10, 11, 12, 13}, {kNone, kNone, 22, 23}}, &taken);
  EXPECT_EQ(taken, (std::vector<PageRef>{{0, 10}, {0, 11}, {0, 12}, {0, 13}, {1, 22}, {1, 23}}));
  RadixCache::Match m = tree.MatchPrefix(a, 4);
  EXPECT_EQ(m.num_pages(), 4);
  EXPECT_EQ(m.pages[1], (std::vector<int32_t>{kNone, kNone, 22, 23}));
  // From boundary 3 the window needs page 1, from 2 and 1 page 0: none held.
  EXPECT_EQ(tree.PeekMatch(a, 3), 0);
  EXPECT_EQ(tree.MatchPrefix(a, 3).num_pages(), 0);
  EXPECT_EQ(tree.EvictWindow(
                1, 1, [](int32_t) { return true; }, &dropped),
            1);
  EXPECT_EQ(dropped, (std::vector<PageRef>{{1, 22}}));
  EXPECT_EQ(tree.PeekMatch(a, 4), 0);
  EXPECT_EQ(tree.cached_pages(0), 4);
  EXPECT_EQ(tree.cached_pages(1), 1);
  taken.clear();
  tree.Insert(a, RadixCache::GroupPages{{40, 41, 42, 43}, {kNone, 31, 32, 33}}, &taken);
  EXPECT_EQ(taken, (std::vector<PageRef>{{1, 31}, {1, 32}}));
  EXPECT_EQ(tree.MatchPrefix(a, 3).pages[1], (std::vector<int32_t>{kNone, 31, 32}));
  // Pages the test says a slot still uses are not dropped.
  dropped.clear();
  EXPECT_EQ(tree.EvictWindow(
                1, 5, [](int32_t page) { return page != 32; }, &dropped),
            2);
  EXPECT_EQ(dropped,
            (std::vector<PageRef>{{1, 23}, {1, 31}}));  // the last page was not matched: older
}

}  // namespace
}  // namespace ctxpar::engine
