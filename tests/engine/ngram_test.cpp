// NGRAM drafts against a brute-force reference: for every window from the longest down, the
// latest earlier occurrence of the suffix, and what followed it.
#include "engine/ngram.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace ctxpar::engine {
namespace {

// The reference: every occurrence of every window, compared token by token.
std::vector<int32_t> Reference(const std::vector<int32_t>& t, const NgramOptions& o, int max) {
  const int n = static_cast<int>(t.size());
  const int want = std::min(max, o.branch_length);
  if (want <= 0) return {};
  for (int w = o.max_window; w >= o.min_window; --w) {
    if (w > n - 1) continue;
    int found = -1;
    for (int j = 0; j + w < n; ++j) {
      bool same = true;
      for (int k = 0; k < w; ++k) same = same && t[j + k] == t[n - w + k];
      if (same) found = j;  // the latest one wins
    }
    if (found < 0) continue;
    std::vector<int32_t> out;
    for (int k = found + w; k < n && static_cast<int>(out.size()) < want; ++k) out.push_back(t[k]);
    return out;
  }
  return {};
}

TEST(NgramDraft, WorkedExample) {
  // "a b c d | a b c" drafts "d a b" (the suffix "a b c" occurred at 0; then d, a, b, c).
  const std::vector<int32_t> t = {1, 2, 3, 4, 1, 2, 3};
  EXPECT_EQ(NgramDraft(t, {1, 12, 18}, 3), (std::vector<int32_t>{4, 1, 2}));
  EXPECT_EQ(NgramDraft(t, {1, 12, 2}, 3), (std::vector<int32_t>{4, 1}));  // branch length
  EXPECT_EQ(NgramDraft(t, {4, 12, 18}, 3), std::vector<int32_t>{});       // no 4-gram repeats
  EXPECT_EQ(NgramDraft(t, {1, 12, 18}, 0), std::vector<int32_t>{});
  EXPECT_EQ(NgramDraft(std::vector<int32_t>{5}, {1, 12, 18}, 3), std::vector<int32_t>{});
}

TEST(NgramDraft, MatchesTheReference) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<int32_t> t(1 + rng() % 60);
    const int alphabet = 2 + static_cast<int>(rng() % 5);
    for (int32_t& x : t) x = static_cast<int32_t>(rng() % alphabet);
    const int min_window = 1 + static_cast<int>(rng() % 3);
    const NgramOptions o{min_window, min_window + static_cast<int>(rng() % 6),
                         1 + static_cast<int>(rng() % 8)};
    const int max = static_cast<int>(rng() % 8);
    ASSERT_EQ(NgramDraft(t, o, max), Reference(t, o, max)) << "trial " << trial;
  }
}

// The shared store against a brute-force reference: the live sequences are the newest whose
// lengths (each cut to its last `capacity` tokens) fit the capacity; the draft follows the newest
// occurrence, newest sequence first, of the query's last kKey tokens that has a successor.
struct StoreReference {
  int64_t capacity;
  std::vector<std::vector<int32_t>> live;

  void Add(std::vector<int32_t> t) {
    if (static_cast<int64_t>(t.size()) > capacity) t.erase(t.begin(), t.end() - capacity);
    if (t.size() <= static_cast<std::size_t>(NgramStore::kKey)) return;
    int64_t held = static_cast<int64_t>(t.size());
    for (const auto& s : live) held += static_cast<int64_t>(s.size());
    while (held > capacity) {
      held -= static_cast<int64_t>(live.front().size());
      live.erase(live.begin());
    }
    live.push_back(std::move(t));
  }
  std::vector<int32_t> Draft(const std::vector<int32_t>& q, int branch, int max) const {
    const int k = NgramStore::kKey, want = std::min(branch, max);
    if (want <= 0 || static_cast<int>(q.size()) < k) return {};
    for (auto s = live.rbegin(); s != live.rend(); ++s) {
      for (int end = static_cast<int>(s->size()) - 1; end >= k; --end) {
        if (!std::equal(q.end() - k, q.end(), s->begin() + end - k)) continue;
        const int stop = std::min<int>(static_cast<int>(s->size()), end + want);
        return {s->begin() + end, s->begin() + stop};
      }
    }
    return {};
  }
};

TEST(NgramStore, DraftsFromTheNewestFinishedRequest) {
  NgramStore store(100);
  store.Add(std::vector<int32_t>{1, 2, 3, 4, 5, 6});
  store.Add(std::vector<int32_t>{9, 2, 3, 4, 7, 8});
  EXPECT_EQ(store.Draft(std::vector<int32_t>{0, 2, 3, 4}, 18, 2), (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(store.Draft(std::vector<int32_t>{1, 2, 3}, 18, 5), (std::vector<int32_t>{4, 5, 6}));
  EXPECT_TRUE(store.Draft(std::vector<int32_t>{4, 7, 8}, 18, 5).empty());  // nothing followed
  EXPECT_TRUE(store.Draft(std::vector<int32_t>{2, 3}, 18, 5).empty());     // shorter than a key
  EXPECT_EQ(store.Draft(std::vector<int32_t>{2, 3, 4}, 1, 5), (std::vector<int32_t>{7}));
  // Eight more tokens than the capacity holds: the oldest request goes, with its keys.
  NgramStore small(12);
  small.Add(std::vector<int32_t>{1, 2, 3, 4, 5, 6});
  small.Add(std::vector<int32_t>{7, 8, 9, 10, 11, 12, 13, 14});
  EXPECT_EQ(small.size(), 8);
  EXPECT_TRUE(small.Draft(std::vector<int32_t>{1, 2, 3}, 18, 5).empty());
  EXPECT_EQ(small.Draft(std::vector<int32_t>{8, 9, 10}, 18, 2), (std::vector<int32_t>{11, 12}));
}

TEST(NgramStore, MatchesTheReference) {
  std::mt19937 rng(7);
  for (const int64_t capacity : {int64_t{5}, int64_t{40}, int64_t{400}}) {
    NgramStore store(capacity);
    StoreReference ref{capacity, {}};
    for (int round = 0; round < 60; ++round) {
      std::vector<int32_t> t(std::uniform_int_distribution<int>(0, 60)(rng));
      for (int32_t& x : t) x = std::uniform_int_distribution<int32_t>(0, 3)(rng);
      store.Add(t);
      ref.Add(t);
      for (int q = 0; q < 20; ++q) {
        std::vector<int32_t> query(std::uniform_int_distribution<int>(0, 8)(rng));
        for (int32_t& x : query) x = std::uniform_int_distribution<int32_t>(0, 3)(rng);
        const int branch = std::uniform_int_distribution<int>(1, 6)(rng);
        const int max = std::uniform_int_distribution<int>(0, 6)(rng);
        ASSERT_EQ(store.Draft(query, branch, max), ref.Draft(query, branch, max))
            << "capacity " << capacity << " round " << round << " query " << q;
      }
    }
  }
}

}  // namespace
}  // namespace ctxpar::engine
