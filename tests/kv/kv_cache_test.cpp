#include "ctxpar/kv_cache.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "ctxpar/dtype.h"

namespace ctxpar {
namespace {

// The K value of (position, head, dim) that the tests append; V is its negation plus 0.5.
float KVal(int64_t p, int h, int d) { return static_cast<float>(p) + h * 0.25f + d * 1e-3f; }

std::vector<float> Tokens(int64_t first, int n, int heads, int dim, bool is_v) {
  std::vector<float> out;
  for (int i = 0; i < n; ++i) {
    for (int h = 0; h < heads; ++h) {
      for (int d = 0; d < dim; ++d) {
        const float k = KVal(first + i, h, d);
        out.push_back(is_v ? 0.5f - k : k);
      }
    }
  }
  return out;
}

// Reads K (or V when `value`) of local row r of sequence seq, head h, dim d through the view and
// KvElementOffset, as the attention kernels do.
float Read(const PagedKv& kv, bool value, int seq, int64_t r, int h, int d) {
  const int32_t page = kv.block_table[seq * kv.max_pages_per_seq + r / kv.page_size];
  const int64_t at = KvElementOffset(kv, value, page, static_cast<int>(r % kv.page_size), h, d);
  const void* base = value && kv.v != nullptr ? kv.v : kv.k;
  return kv.dtype == DataType::kF32 ? static_cast<const float*>(base)[at]
                                   : Bf16ToFloat(static_cast<const uint16_t*>(base)[at]);
}
float ReadK(const PagedKv& kv, int seq, int64_t r, int h, int d) {
  return Read(kv, false, seq, r, h, d);
}
float ReadV(const PagedKv& kv, int seq, int64_t r, int h, int d) {
  return Read(kv, true, seq, r, h, d);
}

const char* FormatName(KvPageFormat f) { return f == KvPageFormat::kRows ? "Rows" : "Tiles16"; }

struct Case {
  int n, interleave, page;
  KvPageFormat format;
};

std::string Name(const Case& c) {
  return fmt::format("N{}I{}P{}{}", c.n, c.interleave, c.page, FormatName(c.format));
}
void PrintTo(const Case& c, std::ostream* os) { *os << Name(c); }

class KvCacheTest : public ::testing::TestWithParam<Case> {};

// Every rank appends the same prefill and decode tokens; each global position must be found on
// exactly its owner, at the local row the DESIGN.md formula gives, and pages ids agree.
TEST_P(KvCacheTest, OwnerStoresEveryPositionAtItsLocalRow) {
  const Case c = GetParam();
  const int heads = 2, dim = 16, dv = 16;
  std::vector<KvCache> caches;
  for (int r = 0; r < c.n; ++r) {
    auto cache = KvCache::Create({.dcp_size = c.n,
                                  .dcp_rank = r,
                                  .interleave_size = c.interleave,
                                  .page_size = c.page,
                                  .num_pages = 64,
                                  .max_seqs = 3,
                                  .max_pages_per_seq = 16,
                                  .num_kv_heads = heads,
                                  .head_dim_qk = dim,
                                  .head_dim_v = dv,
                                  .format = c.format});
    ASSERT_TRUE(cache.ok()) << cache.status().ToString();
    EXPECT_EQ(cache->View().format, c.format);
    caches.push_back(std::move(*cache));
  }
  const int lengths[] = {1, 37, 5};  // sequence 1: a 30-token prefill, then 7 decode steps
  for (KvCache& cache : caches) {
    for (int s = 0; s < 3; ++s) ASSERT_EQ(*cache.AddSequence(), s);
    ASSERT_TRUE(cache
                    .Append(0, Tokens(0, 1, heads, dim, false).data(),
                            Tokens(0, 1, heads, dv, true).data(), 1)
                    .ok());
    ASSERT_TRUE(cache
                    .Append(1, Tokens(0, 30, heads, dim, false).data(),
                            Tokens(0, 30, heads, dv, true).data(), 30)
                    .ok());
    ASSERT_TRUE(cache
                    .Append(2, Tokens(0, 5, heads, dim, false).data(),
                            Tokens(0, 5, heads, dv, true).data(), 5)
                    .ok());
    for (int64_t p = 30; p < 37; ++p) {
      ASSERT_TRUE(cache
                      .Append(1, Tokens(p, 1, heads, dim, false).data(),
                              Tokens(p, 1, heads, dv, true).data(), 1)
                      .ok());
    }
  }
  for (int s = 0; s < 3; ++s) {
    int64_t total_local = 0;
    for (int r = 0; r < c.n; ++r) {
      const PagedKv kv = caches[r].View();
      EXPECT_EQ(caches[r].length(s), lengths[s]);
      total_local += caches[r].local_length(s);
      for (int v = 0; v < kv.max_pages_per_seq; ++v) {
        EXPECT_EQ(kv.block_table[s * kv.max_pages_per_seq + v],
                  caches[0].View().block_table[s * kv.max_pages_per_seq + v]);
      }
    }
    EXPECT_EQ(total_local, lengths[s]);
    for (int64_t p = 0; p < lengths[s]; ++p) {
      const int owner = static_cast<int>((p / c.interleave) % c.n);
      const int64_t row = (p / (c.interleave * c.n)) * c.interleave + p % c.interleave;
      ASSERT_LT(row, caches[owner].local_length(s));
      const PagedKv kv = caches[owner].View();
      for (int h = 0; h < heads; ++h) {
        for (int d = 0; d < dim; d += 5) {
          ASSERT_EQ(ReadK(kv, s, row, h, d), KVal(p, h, d)) << "seq " << s << " pos " << p;
          ASSERT_EQ(ReadV(kv, s, row, h, d), 0.5f - KVal(p, h, d));
        }
      }
    }
  }
}

// kTiles16 needs page_size % 16 == 0, so its cases have their own pages; 32 puts two tiles in a
// page.
INSTANTIATE_TEST_SUITE_P(
    Layouts, KvCacheTest,
    ::testing::Values(
        Case{1, 1, 4, KvPageFormat::kRows}, Case{2, 1, 4, KvPageFormat::kRows},
        Case{3, 1, 2, KvPageFormat::kRows}, Case{4, 4, 8, KvPageFormat::kRows},
        Case{8, 1, 1, KvPageFormat::kRows}, Case{2, 16, 16, KvPageFormat::kRows},
        Case{3, 4, 4, KvPageFormat::kRows}, Case{1, 1, 16, KvPageFormat::kTiles16},
        Case{1, 1, 32, KvPageFormat::kTiles16}, Case{2, 1, 16, KvPageFormat::kTiles16},
        Case{3, 1, 16, KvPageFormat::kTiles16}, Case{4, 4, 16, KvPageFormat::kTiles16},
        Case{8, 1, 16, KvPageFormat::kTiles16}, Case{2, 16, 16, KvPageFormat::kTiles16},
        Case{3, 4, 32, KvPageFormat::kTiles16}),
    [](const ::testing::TestParamInfo<Case>& info) { return Name(info.param); });

// The tests below run for each format, with the smallest page it allows.
class KvCacheFormatTest : public ::testing::TestWithParam<KvPageFormat> {
 protected:
  int Page() const { return GetParam() == KvPageFormat::kTiles16 ? 16 : 4; }
};

TEST_P(KvCacheFormatTest, VirtualPagesAreSharedAndReused) {
  // N = 2, page P: a virtual page holds 2P tokens, one physical page per rank.
  const int page = Page();
  auto cache = KvCache::Create({.dcp_size = 2,
                                .dcp_rank = 1,
                                .page_size = page,
                                .num_pages = 3,
                                .max_seqs = 2,
                                .max_pages_per_seq = 2,
                                .num_kv_heads = 1,
                                .head_dim_qk = 16,
                                .head_dim_v = 16,
                                .format = GetParam()});
  ASSERT_TRUE(cache.ok());
  const std::vector<float> k(4 * page * 16, 1.0f);
  const int a = *cache->AddSequence();
  const int b = *cache->AddSequence();
  ASSERT_TRUE(cache->Append(a, k.data(), k.data(), 2 * page + 1).ok());  // 2 virtual pages: 0, 1
  EXPECT_EQ(cache->free_pages(), 1);
  EXPECT_EQ(cache->local_length(a), page);                    // the odd positions
  ASSERT_TRUE(cache->Append(b, k.data(), k.data(), 1).ok());  // id 2
  EXPECT_EQ(cache->View().block_table[b * 2], 2);
  Status full = cache->Append(b, k.data(), k.data(), 2 * page);
  EXPECT_EQ(full.message(),
            "KvCache::Append: sequence 1 needs 1 more pages but 0 of num_pages=3 are free");
  Status too_long = cache->Append(a, k.data(), k.data(), 2 * page);
  EXPECT_EQ(too_long.message(),
            fmt::format("KvCache::Append: sequence 0 would reach {} tokens, more than "
                        "max_pages_per_seq=2 virtual pages of {} tokens hold",
                        4 * page + 1, 2 * page));
  ASSERT_TRUE(cache->FreeSequence(a).ok());
  EXPECT_EQ(cache->free_pages(), 2);
  ASSERT_TRUE(cache->Append(b, k.data(), k.data(), 2 * page).ok());
  EXPECT_EQ(cache->View().block_table[b * 2 + 1], 0);  // lowest free id first
}

// GQA K and V in bf16, every d of every head: kTiles16 packs two bf16 per 32-bit word, in K
// along d and in V along the keys, so a swapped pair shows here.
TEST_P(KvCacheFormatTest, GqaBf16RoundsToNearestEven) {
  const int page = Page(), heads = 3, dim = 32, tokens = 2 * page - 3;  // two pages
  auto cache = KvCache::Create({.page_size = page,
                                .num_pages = 2,
                                .max_seqs = 1,
                                .max_pages_per_seq = 2,
                                .num_kv_heads = heads,
                                .head_dim_qk = dim,
                                .head_dim_v = dim,
                                .dtype = DataType::kBF16,
                                .format = GetParam()});
  ASSERT_TRUE(cache.ok());
  std::vector<float> k(tokens * heads * dim), v(k.size());
  std::mt19937 rng(5);
  std::normal_distribution<float> dist;
  for (float& x : k) x = dist(rng);
  for (float& x : v) x = dist(rng);
  ASSERT_EQ(*cache->AddSequence(), 0);
  const Status appended = cache->Append(0, k.data(), v.data(), tokens);
  ASSERT_TRUE(appended.ok()) << appended.ToString();
  const PagedKv kv = cache->View();
  for (int t = 0; t < tokens; ++t) {
    for (int h = 0; h < heads; ++h) {
      for (int d = 0; d < dim; ++d) {
        const size_t i = (static_cast<size_t>(t) * heads + h) * dim + d;
        ASSERT_EQ(ReadK(kv, 0, t, h, d), Bf16ToFloat(FloatToBf16(k[i]))) << t << " " << h;
        ASSERT_EQ(ReadV(kv, 0, t, h, d), Bf16ToFloat(FloatToBf16(v[i]))) << t << " " << h;
      }
    }
  }
}

// Absorbed MLA keeps V inside the K row, so it is kRows only (kTiles16 is rejected with v_in_k).
TEST(KvCache, MlaStoresLatentAndRopeInOneRowAndBf16Rounds) {
  auto cache = KvCache::Create({.dcp_size = 2,
                                .dcp_rank = 0,
                                .page_size = 2,
                                .num_pages = 2,
                                .max_seqs = 1,
                                .max_pages_per_seq = 2,
                                .num_kv_heads = 1,
                                .head_dim_qk = 576,
                                .head_dim_v = 512,
                                .v_in_k = true,
                                .dtype = DataType::kBF16});
  ASSERT_TRUE(cache.ok());
  std::vector<float> k(3 * 576);
  std::mt19937 rng(7);
  std::normal_distribution<float> dist;
  for (float& x : k) x = dist(rng);
  ASSERT_EQ(*cache->AddSequence(), 0);
  ASSERT_TRUE(cache->Append(0, k.data(), nullptr, 3).ok());
  const PagedKv kv = cache->View();
  EXPECT_EQ(kv.v, nullptr);
  // Rank 0 owns positions 0 and 2 (local rows 0 and 1).
  for (int d = 0; d < 576; ++d) {
    const float want0 = Bf16ToFloat(FloatToBf16(k[d]));
    const float want2 = Bf16ToFloat(FloatToBf16(k[2 * 576 + d]));
    ASSERT_EQ(ReadK(kv, 0, 0, 0, d), want0);
    ASSERT_EQ(ReadK(kv, 0, 1, 0, d), want2);
    ASSERT_LE(std::abs(want0 - k[d]), std::abs(k[d]) * (1.0f / 256));
  }
}

TEST_P(KvCacheFormatTest, RejectsBadOptionsNamingTheField) {
  KvCacheOptions o{.dcp_size = 2,
                   .dcp_rank = 2,
                   .page_size = Page(),
                   .num_pages = 1,
                   .max_seqs = 1,
                   .max_pages_per_seq = 1,
                   .num_kv_heads = 1,
                   .head_dim_qk = 16,
                   .head_dim_v = 16,
                   .format = GetParam()};
  EXPECT_EQ(KvCache::Create(o).status().message(),
            "KvCache: dcp_rank must be in [0, dcp_size=2), got dcp_rank=2");
  o.dcp_rank = 0;
  o.interleave_size = 3;
  EXPECT_EQ(KvCache::Create(o).status().message(),
            fmt::format("KvCache: page_size must be a multiple of interleave_size so that a "
                        "virtual page is one physical page on every rank, got page_size={} and "
                        "interleave_size=3",
                        Page()));
  o.interleave_size = 1;
  o.num_pages = 0;
  EXPECT_EQ(KvCache::Create(o).status().message(),
            "KvCache: num_pages must be >= 1, got num_pages=0");
  o.num_pages = 1;
  o.v_in_k = true;
  o.head_dim_v = 32;
  EXPECT_EQ(KvCache::Create(o).status().message(),
            "KvCache: with v_in_k, V is a prefix of K and head_dim_v must be <= head_dim_qk, got "
            "head_dim_v=32 and head_dim_qk=16");
  o.dcp_size = 0;
  EXPECT_EQ(KvCache::Create(o).status().error_id(), "CTXPAR-DCP-001");
}

INSTANTIATE_TEST_SUITE_P(Formats, KvCacheFormatTest,
                         ::testing::Values(KvPageFormat::kRows, KvPageFormat::kTiles16),
                         [](const ::testing::TestParamInfo<KvPageFormat>& info) {
                           return std::string(FormatName(info.param));
                         });

TEST(KvCache, RejectsTiles16WithoutSeparateVOrWholeTiles) {
  KvCacheOptions o{.page_size = 16,
                   .num_pages = 1,
                   .max_seqs = 1,
                   .max_pages_per_seq = 1,
                   .num_kv_heads = 1,
                   .head_dim_qk = 576,
                   .head_dim_v = 512,
                   .v_in_k = true,
                   .format = KvPageFormat::kTiles16};
  Status st = KvCache::Create(o).status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "KvCache: format=kTiles16 tiles K and V separately and needs v_in_k=false, got "
            "v_in_k=true");
  o.v_in_k = false;
  o.page_size = 8;
  st = KvCache::Create(o).status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "KvCache: format=kTiles16 needs page_size to be a multiple of 16 (a tile holds 16 "
            "slots), got page_size=8");
  o.page_size = 48;
  EXPECT_TRUE(KvCache::Create(o).ok());
}

}  // namespace
}  // namespace ctxpar
