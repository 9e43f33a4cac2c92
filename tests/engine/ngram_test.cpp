// NGRAM drafts against a brute-force reference: for every window from the longest down, the
// latest earlier occurrence of the suffix, and what followed it.
#include "engine/ngram.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace ctxpar::engine
