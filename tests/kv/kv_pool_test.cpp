// KvPool against the sharding formula (kv_layout.h written out here), its page accounting against
// a reference model of the allocator, and its option checks.
#include "ctxpar/kv_pool.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/resident_pages.h"
#include "ctxpar/dtype.h"

namespace ctxpar {
namespace {

// The K value of (position, head, dim) the tests write; V is its negation plus 0.5; layer l adds
// 1000 * l so that layers cannot be mixed up.
float KVal(int64_t p, int h, int d, int layer = 0) {
  return static_cast<float>(p) + h * 0.25f + d * 1e-3f + 1000.0f * layer;
}

std::vector<float> Tokens(int64_t first, int n, int heads, int dim, bool is_v, int layer = 0) {
  std::vector<float> out;
  for (int i = 0; i < n; ++i) {
    for (int h = 0; h < heads; ++h) {
      for (int d = 0; d < dim; ++d) {
        const float k = KVal(first + i, h, d, layer);
        out.push_back(is_v ? 0.5f - k : k);
      }
    }
  }
  return out;
}

// K (or V) of local row r of slot s, head h, dim d, read through the view and KvElementOffset as
// the attention kernels do.
float Read(const PagedKv& kv, bool value, int slot, int64_t r, int h, int d) {
  const int32_t page = kv.block_table[slot * kv.max_pages_per_seq + r / kv.page_size];
  const int64_t at = KvElementOffset(kv, value, page, static_cast<int>(r % kv.page_size), h, d);
  const void* base = value && kv.v != nullptr ? kv.v : kv.k;
  switch (kv.dtype) {
    case DataType::kF32:
      return static_cast<const float*>(base)[at];
    case DataType::kF8E4M3:
      return Fp8E4M3ToFloat(static_cast<const uint8_t*>(base)[at]);
    case DataType::kF8E5M2:
      return Fp8E5M2ToFloat(static_cast<const uint8_t*>(base)[at]);
    default:
      return Bf16ToFloat(static_cast<const uint16_t*>(base)[at]);
  }
}

// Reserve + Write of positions [pos0, pos0 + n) in every layer.
Status Append(KvPool& pool, int slot, int64_t pos0, int n, int heads, int dim) {
  CTXPAR_RETURN_IF_ERROR(pool.Reserve(slot, pos0 + n));
  for (int l = 0; l < pool.options().num_layers; ++l) {
    const auto k = Tokens(pos0, n, heads, dim, false, l);
    const auto v = Tokens(pos0, n, heads, dim, true, l);
    CTXPAR_RETURN_IF_ERROR(pool.Write(l, slot, pos0, n, k.data(), v.data()));
  }
  return Status::Ok();
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

class KvPoolTest : public ::testing::TestWithParam<Case> {};

// Every rank runs the same slot and write calls; each global position must be found on exactly
// its owner, rank (p / I) % N, at local row (p / (I*N)) * I + p % I, in every layer, and the page
// ids agree across ranks.
TEST_P(KvPoolTest, OwnerStoresEveryPositionAtItsLocalRowInEveryLayer) {
  const Case c = GetParam();
  const int heads = 2, dim = 16, layers = 2;
  std::vector<KvPool> pools;
  for (int r = 0; r < c.n; ++r) {
    auto pool = KvPool::Create({.num_layers = layers,
                                .num_kv_heads = heads,
                                .head_dim_k = dim,
                                .head_dim_v = dim,
                                .format = c.format,
                                .page_size = c.page,
                                .dcp_size = c.n,
                                .dcp_rank = r,
                                .interleave_size = c.interleave,
                                .num_pages = 64,
                                .max_slots = 3,
                                .max_pages_per_slot = 16});
    ASSERT_TRUE(pool.ok()) << pool.status().ToString();
    pools.push_back(std::move(*pool));
  }
  const int lengths[] = {1, 37, 5};  // slot 1: a 30-token prefill, then 7 decode steps
  for (KvPool& pool : pools) {
    for (int s = 0; s < 3; ++s) ASSERT_EQ(*pool.AcquireSlot(), s);
    ASSERT_TRUE(Append(pool, 0, 0, 1, heads, dim).ok());
    ASSERT_TRUE(Append(pool, 1, 0, 30, heads, dim).ok());
    ASSERT_TRUE(Append(pool, 2, 0, 5, heads, dim).ok());
    for (int64_t p = 30; p < 37; ++p) ASSERT_TRUE(Append(pool, 1, p, 1, heads, dim).ok());
  }
  for (int s = 0; s < 3; ++s) {
    for (int r = 1; r < c.n; ++r) {
      EXPECT_EQ(pools[r].slot_pages(s), pools[0].slot_pages(s));
      for (int v = 0; v < pools[0].slot_pages(s); ++v) {
        EXPECT_EQ(pools[r].View(0).block_table[s * 16 + v],
                  pools[0].View(0).block_table[s * 16 + v]);
      }
    }
    for (int64_t p = 0; p < lengths[s]; ++p) {
      const int owner = static_cast<int>((p / c.interleave) % c.n);
      const int64_t row = (p / (c.interleave * c.n)) * c.interleave + p % c.interleave;
      for (int l = 0; l < layers; ++l) {
        const PagedKv kv = pools[owner].View(l);
        for (int h = 0; h < heads; ++h) {
          for (int d = 0; d < dim; d += 5) {
            ASSERT_EQ(Read(kv, false, s, row, h, d), KVal(p, h, d, l))
                << "slot " << s << " p " << p;
            ASSERT_EQ(Read(kv, true, s, row, h, d), 0.5f - KVal(p, h, d, l));
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, KvPoolTest,
    ::testing::Values(Case{1, 1, 4, KvPageFormat::kRows}, Case{2, 1, 4, KvPageFormat::kRows},
                      Case{3, 1, 2, KvPageFormat::kRows}, Case{4, 4, 8, KvPageFormat::kRows},
                      Case{8, 1, 1, KvPageFormat::kRows}, Case{2, 16, 16, KvPageFormat::kRows},
                      Case{3, 4, 4, KvPageFormat::kRows}, Case{1, 1, 16, KvPageFormat::kTiles16},
                      Case{1, 1, 32, KvPageFormat::kTiles16},
                      Case{3, 1, 16, KvPageFormat::kTiles16},
                      Case{4, 4, 16, KvPageFormat::kTiles16},
                      Case{3, 4, 32, KvPageFormat::kTiles16}),
    [](const ::testing::TestParamInfo<Case>& info) { return Name(info.param); });

class KvPoolFormatTest : public ::testing::TestWithParam<KvPageFormat> {
 protected:
  int Page() const { return GetParam() == KvPageFormat::kTiles16 ? 16 : 4; }
};

TEST_P(KvPoolFormatTest, VirtualPagesAreSharedReservedAllOrNothingAndReusedLowestFirst) {
  // N = 2, page P: a virtual page holds 2P tokens, one physical page per rank.
  const int page = Page();
  auto pool = KvPool::Create({.num_layers = 1,
                              .num_kv_heads = 1,
                              .head_dim_k = 16,
                              .head_dim_v = 16,
                              .format = GetParam(),
                              .page_size = page,
                              .dcp_size = 2,
                              .dcp_rank = 1,
                              .num_pages = 3,
                              .max_slots = 2,
                              .max_pages_per_slot = 2});
  ASSERT_TRUE(pool.ok());
  EXPECT_EQ(pool->capacity_tokens(), 3 * 2 * page);
  const int a = *pool->AcquireSlot();
  const int b = *pool->AcquireSlot();
  EXPECT_EQ(pool->AcquireSlot().status().code(), StatusCode::kOutOfRange);
  ASSERT_TRUE(pool->Reserve(a, 2 * page + 1).ok());  // 2 virtual pages: ids 0, 1
  EXPECT_EQ(pool->free_pages(), 1);
  EXPECT_EQ(pool->PagesFor(2 * page + 1), 2);
  ASSERT_TRUE(pool->Reserve(b, 1).ok());  // id 2
  EXPECT_EQ(pool->View(0).block_table[b * 2], 2);
  const Status full = pool->Reserve(b, 2 * page + 1);
  EXPECT_EQ(full.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(full.message(), "KvPool::Reserve: slot 1 needs 1 more pages, 0 of 3 are free");
  EXPECT_EQ(pool->slot_pages(b), 1);  // nothing allocated by the failed call
  const Status too_long = pool->Reserve(a, 4 * page + 1);
  EXPECT_EQ(too_long.message(),
            fmt::format("KvPool::Reserve: {} tokens need 3 pages of {} tokens, more than "
                        "max_pages_per_slot=2",
                        4 * page + 1, 2 * page));
  ASSERT_TRUE(pool->Reserve(a, 1).ok());  // shorter: keeps its pages
  EXPECT_EQ(pool->slot_pages(a), 2);
  ASSERT_TRUE(pool->ReleaseSlot(a).ok());
  EXPECT_EQ(pool->free_pages(), 2);
  EXPECT_EQ(pool->ReleaseSlot(a).message(), "KvPool::ReleaseSlot: slot 0 is not in use");
  ASSERT_TRUE(pool->Reserve(b, 2 * page + 1).ok());
  EXPECT_EQ(pool->View(0).block_table[b * 2 + 1], 0);  // lowest free id first
  const std::vector<float> k(16, 1.0f);
  EXPECT_EQ(pool->Write(0, b, 4 * page, 1, k.data(), k.data()).code(), StatusCode::kOutOfRange);
}

// populate backs every page of every layer's K and V at Create; without it the pool leaves
// them to the first write (what ctxpar generate does, and serve does not: docs/engine.md).
TEST(KvPool, PopulateBacksTheKAndVOfEveryLayerAtCreate) {
  using testing::ResidentPages;
  for (const bool populate : {false, true}) {
    auto pool = KvPool::Create({.num_layers = 3,
                                .num_kv_heads = 2,
                                .head_dim_k = 64,
                                .head_dim_v = 64,
                                .dtype = DataType::kBF16,
                                .page_size = 16,
                                .num_pages = 512,  // 2 MiB of K and of V a layer
                                .max_slots = 1,
                                .max_pages_per_slot = 512,
                                .populate = populate});
    ASSERT_TRUE(pool.ok()) << pool.status().ToString();
    const std::size_t bytes = std::size_t{512} * 16 * 2 * 64 * 2;
    const std::size_t pages = bytes / static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    for (int l = 0; l < 3; ++l) {
      const PagedKv kv = pool->View(l);
      EXPECT_EQ(ResidentPages(kv.k, bytes), populate ? pages : 0u) << "layer " << l;
      EXPECT_EQ(ResidentPages(kv.v, bytes), populate ? pages : 0u) << "layer " << l;
    }
  }
}

// GQA K and V in bf16 and fp8, every d of every head: kTiles16 packs two bf16 (four fp8) per
// 32-bit word, in K along d and in V along the keys, so a swapped pair shows here. The fp8 values
// span past the largest finite ones, which saturate.
void CheckRounding(DataType dtype, KvPageFormat format, int page, float spread,
                   float (*round)(float)) {
  const int heads = 3, dim = 32, tokens = 2 * page - 3;
  auto pool = KvPool::Create({.num_layers = 1,
                              .num_kv_heads = heads,
                              .head_dim_k = dim,
                              .head_dim_v = dim,
                              .dtype = dtype,
                              .format = format,
                              .page_size = page,
                              .num_pages = 2,
                              .max_slots = 1,
                              .max_pages_per_slot = 2});
  ASSERT_TRUE(pool.ok());
  std::vector<float> k(tokens * heads * dim), v(k.size());
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, spread);
  for (float& x : k) x = dist(rng);
  for (float& x : v) x = dist(rng);
  ASSERT_EQ(*pool->AcquireSlot(), 0);
  ASSERT_TRUE(pool->Reserve(0, tokens).ok());
  ASSERT_TRUE(pool->Write(0, 0, 0, tokens, k.data(), v.data()).ok());
  const PagedKv kv = pool->View(0);
  for (int t = 0; t < tokens; ++t) {
    for (int h = 0; h < heads; ++h) {
      for (int d = 0; d < dim; ++d) {
        const size_t i = (static_cast<size_t>(t) * heads + h) * dim + d;
        ASSERT_EQ(Read(kv, false, 0, t, h, d), round(k[i])) << DataTypeName(dtype) << " " << t;
        ASSERT_EQ(Read(kv, true, 0, t, h, d), round(v[i])) << DataTypeName(dtype) << " " << t;
      }
    }
  }
}

TEST_P(KvPoolFormatTest, GqaBf16AndFp8RoundToNearestEven) {
  CheckRounding(DataType::kBF16, GetParam(), Page(), 1.0f,
                [](float x) { return Bf16ToFloat(FloatToBf16(x)); });
  CheckRounding(DataType::kF8E4M3, GetParam(), Page(), 300.0f,
                [](float x) { return Fp8E4M3ToFloat(FloatToFp8E4M3(x)); });
  CheckRounding(DataType::kF8E5M2, GetParam(), Page(), 40000.0f,
                [](float x) { return Fp8E5M2ToFloat(FloatToFp8E5M2(x)); });
}

TEST_P(KvPoolFormatTest, RejectsBadOptionsNamingTheField) {
  KvPoolOptions o{.num_layers = 1,
                  .num_kv_heads = 1,
                  .head_dim_k = 16,
                  .head_dim_v = 16,
                  .format = GetParam(),
                  .page_size = Page(),
                  .dcp_size = 2,
                  .dcp_rank = 2,
                  .num_pages = 1,
                  .max_slots = 1,
                  .max_pages_per_slot = 1};
  EXPECT_EQ(KvPool::Create(o).status().message(),
            "KvPool: dcp_rank must be in [0, dcp_size=2), got dcp_rank=2");
  o.dcp_rank = 0;
  o.interleave_size = 3;
  EXPECT_EQ(KvPool::Create(o).status().message(),
            fmt::format("KvPool: page_size must be a multiple of interleave_size so that a virtual "
                        "page is one physical page on every rank, got page_size={} and "
                        "interleave_size=3",
                        Page()));
  o.interleave_size = 1;
  o.num_pages = 0;
  EXPECT_EQ(KvPool::Create(o).status().message(),
            "KvPool: num_pages must be >= 1, got num_pages=0");
  o.num_pages = 1;
  o.num_layers = 0;
  EXPECT_EQ(KvPool::Create(o).status().message(),
            "KvPool: num_layers must be >= 1, got num_layers=0");
  o.num_layers = 1;
  o.dtype = DataType::kF16;
  EXPECT_EQ(KvPool::Create(o).status().message(),
            "KvPool: dtype must be f32, bf16, f8_e4m3 or f8_e5m2, got f16");
  o.dtype = DataType::kF32;
  o.dcp_size = 0;
  EXPECT_EQ(KvPool::Create(o).status().message(),
            "KvPool: dcp_rank must be in [0, dcp_size=0), got dcp_rank=0");
}

INSTANTIATE_TEST_SUITE_P(Formats, KvPoolFormatTest,
                         ::testing::Values(KvPageFormat::kRows, KvPageFormat::kTiles16),
                         [](const ::testing::TestParamInfo<KvPageFormat>& info) {
                           return std::string(FormatName(info.param));
                         });

// Absorbed MLA keeps V inside the K row: kRows only, v null.
TEST(KvPool, MlaStoresLatentAndRopeInOneRow) {
  auto pool = KvPool::Create({.num_layers = 1,
                              .num_kv_heads = 1,
                              .head_dim_k = 80,
                              .head_dim_v = 64,
                              .v_in_k = true,
                              .page_size = 2,
                              .dcp_size = 2,
                              .num_pages = 2,
                              .max_slots = 1,
                              .max_pages_per_slot = 2});
  ASSERT_TRUE(pool.ok());
  std::vector<float> k(3 * 80);
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = 0.5f * float(i);
  ASSERT_EQ(*pool->AcquireSlot(), 0);
  ASSERT_TRUE(pool->Reserve(0, 3).ok());
  ASSERT_TRUE(pool->Write(0, 0, 0, 3, k.data(), nullptr).ok());
  const PagedKv kv = pool->View(0);
  EXPECT_EQ(kv.v, nullptr);
  for (int d = 0; d < 80; ++d) {  // rank 0 owns positions 0 and 2 (local rows 0 and 1)
    ASSERT_EQ(Read(kv, false, 0, 0, 0, d), k[d]);
    ASSERT_EQ(Read(kv, false, 0, 1, 0, d), k[2 * 80 + d]);
  }
  KvPoolOptions tiles = pool->options();
  tiles.format = KvPageFormat::kTiles16;
  tiles.page_size = 16;
  EXPECT_EQ(KvPool::Create(tiles).status().message(),
            "KvPool: format=kTiles16 tiles K and V separately and needs v_in_k=false, got "
            "v_in_k=true");
}

// Random acquire / reserve / release sequences against a reference model of the allocator:
// free pages = all pages minus those held, no page held twice, the lowest free page handed out
// first, and every page back when every slot is released. The same with no storage mapped
// (the planner's accounting-only pool).
TEST(KvPool, AccountingMatchesAReferenceAllocator) {
  std::mt19937 rng(2024);
  for (int trial = 0; trial < 80; ++trial) {
    const bool mapped = trial % 2 == 0;
    const int page = 1 + static_cast<int>(rng() % 4), n = 1 + static_cast<int>(rng() % 3);
    const int num_pages = 4 + static_cast<int>(rng() % 40), slots = 1 + static_cast<int>(rng() % 6);
    const int per_slot = 1 + static_cast<int>(rng() % 12);
    auto made = KvPool::Create({.num_layers = 1,
                                .num_kv_heads = 1,
                                .head_dim_k = 16,
                                .head_dim_v = 16,
                                .page_size = page,
                                .dcp_size = n,
                                .num_pages = num_pages,
                                .max_slots = slots,
                                .max_pages_per_slot = per_slot,
                                .map_storage = mapped});
    ASSERT_TRUE(made.ok());
    KvPool& pool = *made;
    EXPECT_EQ(pool.View(0).k == nullptr, !mapped);
    std::set<int> free;
    for (int p = 0; p < num_pages; ++p) free.insert(p);
    std::map<int, std::vector<int>> held;  // slot -> pages in order
    for (int op = 0; op < 400; ++op) {
      const int kind = static_cast<int>(rng() % 3);
      if (kind == 0) {
        Expected<int32_t> s = pool.AcquireSlot();
        ASSERT_EQ(s.ok(), static_cast<int>(held.size()) < slots);
        if (s.ok()) {
          ASSERT_EQ(held.count(*s), 0u);
          held[*s] = {};
        }
      } else if (kind == 1 && !held.empty()) {
        auto it = std::next(held.begin(), rng() % held.size());
        const int64_t length = rng() % (int64_t{per_slot + 1} * page * n + 1);
        const int64_t want = (length + int64_t{page} * n - 1) / (int64_t{page} * n);
        const int64_t missing = std::max<int64_t>(0, want - int64_t(it->second.size()));
        const bool fits = want <= per_slot && missing <= int64_t(free.size());
        ASSERT_EQ(pool.Reserve(it->first, length).ok(), fits) << "length " << length;
        for (int64_t i = 0; fits && i < missing; ++i) {
          it->second.push_back(*free.begin());
          free.erase(free.begin());
        }
      } else if (kind == 2 && !held.empty()) {
        auto it = std::next(held.begin(), rng() % held.size());
        ASSERT_TRUE(pool.ReleaseSlot(it->first).ok());
        for (int p : it->second) free.insert(p);
        held.erase(it);
      }
      ASSERT_EQ(pool.free_pages(), static_cast<int64_t>(free.size()));
      for (const auto& [slot, pages] : held) {
        ASSERT_EQ(pool.slot_pages(slot), static_cast<int32_t>(pages.size()));
        for (std::size_t v = 0; v < pages.size(); ++v) {
          ASSERT_EQ(pool.View(0).block_table[slot * per_slot + v], pages[v]);
        }
      }
    }
    for (const auto& [slot, pages] : held) ASSERT_TRUE(pool.ReleaseSlot(slot).ok());
    EXPECT_EQ(pool.free_pages(), num_pages);
    EXPECT_EQ(pool.free_slots(), slots);
  }
}

// Shared pages (the prefix cache): a page attached to a second slot and held by the cache stays
// in use until its last holder lets it go, and then is the lowest free page again; a page that is
// not in use can be neither attached, held nor dropped (no page is freed twice).
TEST(KvPool, SharedPagesLiveUntilTheirLastHolderAndAreNeverFreedTwice) {
  auto made = KvPool::Create({.num_layers = 1,
                              .num_kv_heads = 1,
                              .head_dim_k = 16,
                              .head_dim_v = 16,
                              .page_size = 4,
                              .dcp_size = 2,
                              .num_pages = 4,
                              .max_slots = 2,
                              .max_pages_per_slot = 2});
  ASSERT_TRUE(made.ok());
  KvPool& pool = *made;
  const int32_t a = *pool.AcquireSlot(), b = *pool.AcquireSlot();
  ASSERT_TRUE(pool.Reserve(a, 16).ok());  // pages 0 and 1
  ASSERT_TRUE(pool.HoldPage(0).ok());     // the cache takes page 0
  ASSERT_TRUE(pool.AttachPage(b, 0).ok());
  EXPECT_EQ(pool.page_refs(0), 3);
  EXPECT_EQ(pool.slot_pages(b), 1);
  EXPECT_EQ(pool.SlotPage(b, 0), 0);
  ASSERT_TRUE(pool.Reserve(b, 9).ok());  // its own second page: 2
  EXPECT_EQ(pool.SlotPage(b, 1), 2);
  EXPECT_FALSE(pool.AttachPage(b, 1).ok()) << "beyond max_pages_per_slot";
  ASSERT_TRUE(pool.ReleaseSlot(a).ok());
  EXPECT_EQ(pool.free_pages(), 2);  // page 1 only was a's alone
  EXPECT_EQ(pool.page_refs(0), 2);
  EXPECT_FALSE(pool.cache_only(0)) << "b still lists page 0";
  EXPECT_FALSE(pool.DropPage(2).ok()) << "page 2 is b's, not the cache's";
  ASSERT_TRUE(pool.ReleaseSlot(b).ok());
  EXPECT_EQ(pool.page_refs(0), 1);
  EXPECT_TRUE(pool.cache_only(0));
  EXPECT_EQ(pool.cache_only_pages(), 1);
  ASSERT_TRUE(pool.DropPage(0).ok());
  EXPECT_EQ(pool.cache_only_pages(), 0);
  EXPECT_EQ(pool.free_pages(), 4);
  EXPECT_FALSE(pool.DropPage(0).ok());
  EXPECT_FALSE(pool.HoldPage(3).ok());
  const int32_t c = *pool.AcquireSlot();
  EXPECT_FALSE(pool.AttachPage(c, 0).ok());
  ASSERT_TRUE(pool.Reserve(c, 1).ok());
  EXPECT_EQ(pool.SlotPage(c, 0), 0);
}

// A sliding-window group next to a full one (layers 1 and 3 full, 0 and 2 a window of W), through
// random chunked requests on several slots: after each Slide + Reserve the window group holds
// exactly the pages that span positions [pos0 - W + 1, pos0 + n) (the window before the chunk and
// the chunk), the full group every page up to pos0 + n; every page of each group is free or held
// by one slot (none held twice, none leaked); Reserve adds what PagesNeeded said; the window rows
// a query sees still hold their own K/V; and releasing every slot gives every page back.
// Truncate (speculative decoding) gives back what lies past the kept positions.
TEST(KvPool, WindowGroupHoldsTheWindowAndTheChunkAndNothingElse) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 30; ++trial) {
    const int page = 1 + static_cast<int>(rng() % 4), n = 1 + static_cast<int>(rng() % 3);
    const int rank = static_cast<int>(rng() % n), window = 1 + static_cast<int>(rng() % 12);
    const int chunk_max = 1 + static_cast<int>(rng() % 9), slots = 1 + static_cast<int>(rng() % 4);
    const int per_slot = 24, heads = 1, dim = 16;
    const int64_t per_page = int64_t{page} * n;
    KvPoolOptions o{.num_layers = 4,
                    .num_kv_heads = heads,
                    .head_dim_k = dim,
                    .head_dim_v = dim,
                    .page_size = page,
                    .dcp_size = n,
                    .dcp_rank = rank,
                    .num_pages = 20 + static_cast<int>(rng() % 40),
                    .window_pages = 6 + static_cast<int>(rng() % 20),
                    .max_slots = slots,
                    .max_pages_per_slot = per_slot,
                    .groups = {{{1, 3}, 0, true}, {{0, 2}, window, true}}};
    auto made = KvPool::Create(o);
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    KvPool& pool = *made;
    ASSERT_EQ(pool.num_groups(), 2);
    ASSERT_EQ(pool.group_of_layer(2), 1);
    ASSERT_EQ(pool.capacity_tokens(1), o.window_pages * per_page);
    std::map<int, int64_t> len;   // slot -> tokens written
    std::map<int, int64_t> slid;  // slot -> position of its last Slide
    auto first_kept = [&](int64_t pos0) {
      return std::max<int64_t>(0, pos0 - window + 1) / per_page;
    };
    auto held_pages = [&](int slot, int g) -> std::pair<int64_t, int64_t> {
      const int64_t end = pool.PagesFor(len[slot], g);
      return {g == 0 ? 0 : std::min(end, first_kept(slid[slot])), end};
    };
    for (int op = 0; op < 300; ++op) {
      const int kind = static_cast<int>(rng() % 5);
      if (kind == 0) {
        Expected<int32_t> s = pool.AcquireSlot();
        ASSERT_EQ(s.ok(), static_cast<int>(len.size()) < slots);
        if (s.ok()) len[*s] = slid[*s] = 0;
      } else if (kind == 1 && !len.empty()) {
        auto it = std::next(len.begin(), rng() % len.size());
        ASSERT_TRUE(pool.ReleaseSlot(it->first).ok());
        slid.erase(it->first);
        len.erase(it);
      } else if (!len.empty()) {
        auto it = std::next(len.begin(), rng() % len.size());
        const int slot = it->first;
        const int64_t pos0 = it->second, chunk = 1 + static_cast<int64_t>(rng() % chunk_max);
        if (pool.PagesFor(pos0 + chunk) > per_slot) continue;
        int64_t needed[2];
        for (int g = 0; g < 2; ++g) needed[g] = pool.PagesNeeded(g, slot, pos0, pos0 + chunk);
        ASSERT_TRUE(pool.Slide(slot, pos0).ok());
        slid[slot] = pos0;
        const int64_t free_before[2] = {pool.free_pages(0), pool.free_pages(1)};
        const bool fits = needed[0] <= free_before[0] && needed[1] <= free_before[1];
        ASSERT_EQ(pool.Reserve(slot, pos0 + chunk).ok(), fits);
        if (!fits) continue;
        for (int g = 0; g < 2; ++g) ASSERT_EQ(pool.free_pages(g), free_before[g] - needed[g]);
        it->second = pos0 + chunk;
        for (int l = 0; l < 4; ++l) {
          const auto k = Tokens(pos0, static_cast<int>(chunk), heads, dim, false, l);
          const auto v = Tokens(pos0, static_cast<int>(chunk), heads, dim, true, l);
          ASSERT_TRUE(pool.Write(l, slot, pos0, static_cast<int>(chunk), k.data(), v.data()).ok());
        }
        // Every row of the chunk sees its window's positions, stored where they belong.
        for (int64_t t = pos0; t < pos0 + chunk; ++t) {
          const LocalRange rows = pool.VisibleRange(0, t);
          for (int64_t r = rows.begin; r < rows.end; ++r) {
            const int64_t p = r * n + rank;  // interleave 1: local row r is position r * n + rank
            ASSERT_GT(p, t - window);
            ASSERT_LE(p, t);
            ASSERT_EQ(Read(pool.View(2), false, slot, r, 0, 3), KVal(p, 0, 3, 2));
            ASSERT_EQ(Read(pool.View(0), true, slot, r, 0, 5), 0.5f - KVal(p, 0, 5, 0));
          }
        }
        // Sometimes the chunk was a verify step whose later drafts were rejected: the pages past
        // the kept positions go back (checked below: each slot holds exactly its span).
        if (rng() % 3 == 0) {
          const int64_t kept = pos0 + 1 + static_cast<int64_t>(rng() % chunk);
          ASSERT_TRUE(pool.Truncate(slot, kept).ok());
          it->second = kept;
        }
      }
      // Each slot holds exactly its span; each group's pages are free or held once.
      for (int g = 0; g < 2; ++g) {
        std::set<int32_t> seen;
        int64_t held = 0;
        for (const auto& [slot, length] : len) {
          const auto [begin, end] = held_pages(slot, g);
          ASSERT_EQ(pool.slot_pages(slot, g), end - begin) << "group " << g << " slot " << slot;
          const int32_t* table = pool.View(g == 0 ? 1 : 0).block_table + slot * per_slot;
          for (int64_t v = begin; v < end; ++v) ASSERT_TRUE(seen.insert(table[v]).second);
          held += end - begin;
        }
        ASSERT_EQ(held + pool.free_pages(g), pool.num_pages(g)) << "group " << g;
      }
    }
    for (const auto& [slot, length] : len) ASSERT_TRUE(pool.ReleaseSlot(slot).ok());
    EXPECT_EQ(pool.free_pages(0), pool.num_pages(0));
    EXPECT_EQ(pool.free_pages(1), pool.num_pages(1));
  }
}

// What a window group may hold at most (the scheduler's admission counts it): the pages W - 1 + a
// chunk of consecutive positions span, found by enumerating every alignment; never more than the
// sequence's own pages.
TEST(KvPool, PeakPagesOfAWindowGroupIsTheWorstAlignedSpan) {
  for (int page : {1, 4, 16}) {
    for (int n : {1, 2, 4}) {
      for (int window : {1, 7, 16, 64}) {
        auto made = KvPool::Create({.num_layers = 2,
                                    .num_kv_heads = 1,
                                    .head_dim_k = 16,
                                    .head_dim_v = 16,
                                    .page_size = page,
                                    .dcp_size = n,
                                    .num_pages = 4,
                                    .window_pages = 4,
                                    .max_slots = 1,
                                    .max_pages_per_slot = 64,
                                    .groups = {{{0}, 0, true}, {{1}, window, true}}});
        ASSERT_TRUE(made.ok());
        const int64_t per_page = int64_t{page} * n;
        for (int64_t chunk : {1, 3, 32}) {
          int64_t worst = 0;
          for (int64_t pos0 = 0; pos0 < 4 * per_page + window; ++pos0) {
            const int64_t first = std::max<int64_t>(0, pos0 - window + 1) / per_page;
            worst = std::max(worst, (pos0 + chunk + per_page - 1) / per_page - first);
          }
          const int64_t length = 100000;
          EXPECT_EQ(made->PeakPages(1, length, chunk), worst)
              << "page " << page << " n " << n << " window " << window << " chunk " << chunk;
          EXPECT_EQ(made->PeakPages(1, 5, chunk), std::min(worst, made->PagesFor(5, 1)));
          EXPECT_EQ(made->PeakPages(0, length, chunk), made->PagesFor(length));
        }
      }
    }
  }
}

TEST(KvPool, RejectsBadGroupsNamingTheRule) {
  const KvPoolOptions base{.num_layers = 3,
                           .num_kv_heads = 1,
                           .head_dim_k = 16,
                           .head_dim_v = 16,
                           .num_pages = 4,
                           .window_pages = 4,
                           .max_slots = 1,
                           .max_pages_per_slot = 4};
  auto refused = [&](std::vector<KvGroupSpec> groups, int64_t window_pages, const char* text) {
    KvPoolOptions o = base;
    o.groups = std::move(groups);
    o.window_pages = window_pages;
    const Status st = KvPool::Create(o).status();
    EXPECT_FALSE(st.ok()) << text;
    EXPECT_NE(st.message().find(text), std::string::npos) << st.ToString();
  };
  refused({{{0, 1}, 0, true}, {{1, 2}, 8, true}}, 4, "layer 1 is in groups[0] and groups[1]");
  refused({{{0, 1}, 0, true}}, 4, "layer 2 is in no group");
  refused({{{0}, 8, true}, {{1, 2}, 0, true}}, 4, "groups[0] must be a full-attention group");
  refused({{{0}, 0, true}, {{1, 2}, -1, true}}, 4, "groups[1].window must be >= 0");
  refused({{{0}, 0, true}, {{1, 2, 3}, 8, true}}, 4, "names layer 3, outside [0, num_layers=3)");
  refused({{{0}, 0, true}, {{1, 2}, 8, true}}, 0, "window_pages must be >= 1");
}

// An accounting-only pool of a GPU's size (here 8 TiB of K/V) maps nothing, and refuses writes.
TEST(KvPool, AccountingOnlyPoolMapsNothingAndRefusesWrites) {
  auto made = KvPool::Create({.num_layers = 61,
                              .num_kv_heads = 1,
                              .head_dim_k = 576,
                              .head_dim_v = 512,
                              .v_in_k = true,
                              .dtype = DataType::kBF16,
                              .page_size = 64,
                              .num_pages = 2'000'000,
                              .max_slots = 4,
                              .max_pages_per_slot = 8,
                              .map_storage = false});
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  const int32_t slot = *made->AcquireSlot();
  ASSERT_TRUE(made->Reserve(slot, 100).ok());
  const std::vector<float> k(576);
  EXPECT_EQ(made->Write(0, slot, 0, 1, k.data(), nullptr).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(made->capacity_tokens(), 2'000'000 * 64);
}

// The pages come from the options' allocator (the compute seam's memory): every K and V buffer of
// every layer, and nothing else, and View reads inside them.
TEST(KvPool, PagesComeFromTheOptionsAllocator) {
  struct Buffer {
    const char* begin;
    std::size_t bytes;
  };
  class Recording final : public DeviceAllocator {
   public:
    Device device() const override { return Device::kCpu; }
    Expected<DeviceBuffer> Allocate(std::size_t bytes) const override {
      CTXPAR_ASSIGN_OR_RETURN(DeviceBuffer b, HostAllocator().Allocate(bytes));
      buffers.push_back({b.as<const char>(), bytes});
      return b;
    }
    mutable std::vector<Buffer> buffers;
  } recording;
  const KvPoolOptions o{.num_layers = 3,
                        .num_kv_heads = 2,
                        .head_dim_k = 64,
                        .head_dim_v = 64,
                        .dtype = DataType::kBF16,
                        .page_size = 16,
                        .num_pages = 10,
                        .max_slots = 2,
                        .max_pages_per_slot = 4,
                        .allocator = &recording};
  auto made = KvPool::Create(o);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  ASSERT_EQ(recording.buffers.size(), 6u);  // K and V of each layer
  std::size_t total = 0;
  for (const Buffer& b : recording.buffers) total += b.bytes;
  EXPECT_EQ(total, std::size_t(KvPool::PageBytes(o)) * o.num_pages);
  auto inside = [&](const void* p) {
    const auto* c = static_cast<const char*>(p);
    return std::any_of(recording.buffers.begin(), recording.buffers.end(),
                       [&](const Buffer& b) { return c >= b.begin && c < b.begin + b.bytes; });
  };
  for (int l = 0; l < o.num_layers; ++l) {
    EXPECT_TRUE(inside(made->View(l).k)) << l;
    EXPECT_TRUE(inside(made->View(l).v)) << l;
  }
}

}  // namespace
}  // namespace ctxpar
