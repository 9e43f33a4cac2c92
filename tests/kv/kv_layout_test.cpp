#include "ctxpar/kv_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace ctxpar {
namespace {

TEST(KvLayout, WorkedExampleNTwoIFour) {
  // N = 2, I = 4: positions 0-3 on rank 0 rows 0-3, 4-7 on rank 1 rows 0-3, 8-11 on rank 0
  // rows 4-7, ...
  auto layout = KvLayout::Create(2, 4);
  ASSERT_TRUE(layout.ok());
  const int owners[] = {0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1};
  const int rows[] = {0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 4};
  for (int p = 0; p < 13; ++p) {
    EXPECT_EQ(layout->Owner(p), owners[p]) << p;
    EXPECT_EQ(layout->LocalRow(p), rows[p]) << p;
  }
  EXPECT_EQ(layout->LocalLength(0, 13), 8);
  EXPECT_EQ(layout->LocalLength(1, 13), 5);
  EXPECT_EQ(layout->LocalLength(1, 13, 5), 4);
  EXPECT_EQ(layout->VisibleLocalRows(1, 4), 1);
  EXPECT_EQ(layout->VisibleLocalRows(1, 3), 0);
}

// Against enumeration: every combination of N, I, start and length of a small range.
TEST(KvLayout, MatchesEnumeration) {
  for (int n : {1, 2, 3, 4, 8}) {
    for (int i : {1, 4, 16}) {
      auto layout = KvLayout::Create(n, i);
      ASSERT_TRUE(layout.ok());
      for (int rank = 0; rank < n; ++rank) {
        std::vector<int64_t> owned;  // positions of this rank, in order
        for (int64_t p = 0; p < 300; ++p) {
          if ((p / i) % n == rank) owned.push_back(p);
        }
        // Local rows are dense and in position order.
        for (size_t r = 0; r < owned.size(); ++r) {
          ASSERT_EQ(layout->LocalRow(owned[r]), static_cast<int64_t>(r));
          ASSERT_EQ(layout->Owner(owned[r]), rank);
        }
        for (int64_t len = 0; len <= 140; len += 1 + (len > 40) * 6) {
          for (int64_t start = 0; start <= len + 2; start += 3) {
            int64_t want = 0;
            for (int64_t p : owned) want += (p >= start && p < len);
            ASSERT_EQ(layout->LocalLength(rank, len, start), want)
                << "n=" << n << " i=" << i << " rank=" << rank << " len=" << len
                << " start=" << start;
          }
          if (len > 0) {
            int64_t visible = 0;
            for (int64_t p : owned) visible += p <= len - 1;
            ASSERT_EQ(layout->VisibleLocalRows(rank, len - 1), visible);
          }
        }
      }
    }
  }
}

// The local rows a window of W shows a query at t: exactly the rows of the owned positions p with
// t - W < p <= t (HF transformers' and llama.cpp's sliding window), found by enumeration; a rank
// may own none of them.
TEST(KvLayout, WindowLocalRowsMatchEnumeration) {
  for (int n : {1, 2, 3, 4}) {
    for (int i : {1, 2, 4}) {
      auto layout = KvLayout::Create(n, i);
      ASSERT_TRUE(layout.ok());
      for (int rank = 0; rank < n; ++rank) {
        for (int64_t t = 0; t < 70; ++t) {
          for (int64_t w : {0, 1, 2, 3, 5, 8, 13, 64}) {
            std::vector<int64_t> rows;
            for (int64_t p = 0; p <= t; ++p) {
              if (layout->Owner(p) == rank && (w == 0 || p > t - w)) {
                rows.push_back(layout->LocalRow(p));
              }
            }
            const LocalRange got = layout->WindowLocalRows(rank, t, w);
            const std::string at = "n=" + std::to_string(n) + " i=" + std::to_string(i) +
                                   " rank=" + std::to_string(rank) + " t=" + std::to_string(t) +
                                   " w=" + std::to_string(w);
            ASSERT_EQ(got.end - got.begin, static_cast<int64_t>(rows.size())) << at;
            if (!rows.empty()) {
              ASSERT_EQ(got.begin, rows.front()) << at;
              ASSERT_EQ(got.end, rows.back() + 1) << at;
            } else {
              ASSERT_EQ(got.end, layout->VisibleLocalRows(rank, t)) << at;
            }
          }
        }
      }
    }
  }
}

// A verify step (speculative decoding) runs k + 1 query rows of one sequence at positions
// pos0 .. pos0 + k: row t sees, on each rank, the rank's positions <= pos0 + t, counted by
// enumeration. That is not the rank's local length minus (k - t) when positions are strided over
// the ranks: the count of positions the later rows add on this rank depends on which it owns.
TEST(KvLayout, VerifyRowsSeeTheirOwnPrefixOnEveryRank) {
  int64_t differs = 0;
  for (int n : {1, 2, 3, 4, 8}) {
    for (int i : {1, 2, 3, 16}) {
      auto layout = KvLayout::Create(n, i);
      ASSERT_TRUE(layout.ok());
      for (int rank = 0; rank < n; ++rank) {
        for (int64_t pos0 = 0; pos0 < 120; pos0 += 1 + pos0 / 20) {
          for (int64_t k = 0; k <= 12; ++k) {
            const int64_t local = layout->LocalLength(rank, pos0 + k + 1);
            for (int64_t t = 0; t <= k; ++t) {
              int64_t owned = 0;
              for (int64_t p = 0; p <= pos0 + t; ++p) owned += (p / i) % n == rank;
              ASSERT_EQ(layout->VisibleLocalRows(rank, pos0 + t), owned)
                  << "n=" << n << " i=" << i << " rank=" << rank << " row " << pos0 + t;
              differs += std::max<int64_t>(0, local - (k - t)) != owned;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(differs, 0) << "the naive bound was meant to be wrong somewhere";
}

TEST(KvLayout, RejectsBadSizes) {
  auto bad = KvLayout::Create(0);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().error_id(), "CTXPAR-DCP-001");
  EXPECT_EQ(bad.status().message(),
            "Decode context parallel size (--dcp-size / --decode-context-parallel-size) must be "
            ">= 1, but got dcp_size=0.");
  auto bad_i = KvLayout::Create(2, 0);
  ASSERT_FALSE(bad_i.ok());
  EXPECT_EQ(bad_i.status().message(),
            "KV layout: interleave_size must be >= 1, got interleave_size=0");
}

}  // namespace
}  // namespace ctxpar
