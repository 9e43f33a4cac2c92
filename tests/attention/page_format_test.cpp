// KvElementOffset against the page layouts as attention.h words them. The expectations are
// written from the contract comment (row-major rows; tiles of 16 slots per KV head; K words along
// d, V words along the keys), never by calling the function a second way, so that the KV cache
// and the kernels, which both trust it, are held to the documented layout.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "ctxpar/attention.h"

namespace ctxpar {
namespace {

constexpr int kPages = 3;

// A pool of kPages pages of the given shape; k and v point at a dummy (only v's non-nullness
// matters to KvElementOffset).
PagedKv Pool(DataType dtype, KvPageFormat format, int page_size, int heads, int dim_qk, int dim_v) {
  static const float dummy = 0;
  PagedKv kv;
  kv.k = kv.v = &dummy;
  kv.dtype = dtype;
  kv.format = format;
  kv.page_size = page_size;
  kv.num_kv_heads = heads;
  kv.head_dim_qk = dim_qk;
  kv.head_dim_v = dim_v;
  kv.num_pages = kPages;
  return kv;
}

std::string Describe(const PagedKv& kv, bool value) {
  return std::string(value ? "V" : "K") + " " + std::string(DataTypeName(kv.dtype)) +
         (kv.format == KvPageFormat::kRows ? " rows" : " tiles16") + " page " +
         std::to_string(kv.page_size) + " heads " + std::to_string(kv.num_kv_heads) + " dqk " +
         std::to_string(kv.head_dim_qk) + " dv " + std::to_string(kv.head_dim_v);
}

// Every shape of the test for the given formats: every KV dtype, pages of 16/32/64, 1/3/8 KV heads,
// K and V head dims each of 16/64/128. Stops at the first failure, which says enough.
void ForEachPool(std::initializer_list<KvPageFormat> formats,
                 const std::function<void(const PagedKv&)>& fn) {
  for (DataType dtype : {DataType::kF32, DataType::kBF16, DataType::kF8E4M3}) {
    for (KvPageFormat format : formats) {
      for (int page_size : {16, 32, 64}) {
        for (int heads : {1, 3, 8}) {
          for (int dim_qk : {16, 64, 128}) {
            for (int dim_v : {16, 64, 128}) {
              if (!::testing::Test::HasFailure()) {
                fn(Pool(dtype, format, page_size, heads, dim_qk, dim_v));
              }
            }
          }
        }
      }
    }
  }
}

int Dim(const PagedKv& kv, bool value) { return value ? kv.head_dim_v : kv.head_dim_qk; }

// Elements per 32-bit word: fp32 1, bf16 2, fp8 4.
int64_t Elems(const PagedKv& kv) { return 4 / static_cast<int64_t>(DataTypeSize(kv.dtype)); }

::testing::AssertionResult IsBijectionOntoPool(const PagedKv& kv, bool value) {
  const int dim = Dim(kv, value);
  const int64_t total = int64_t{kPages} * kv.page_size * kv.num_kv_heads * dim;
  std::vector<bool> seen(total, false);
  for (int page = 0; page < kPages; ++page) {
    for (int slot = 0; slot < kv.page_size; ++slot) {
      for (int head = 0; head < kv.num_kv_heads; ++head) {
        for (int d = 0; d < dim; ++d) {
          const int64_t at = KvElementOffset(kv, value, page, slot, head, d);
          if (at < 0 || at >= total || seen[at]) {
            return ::testing::AssertionFailure()
                   << "page " << page << " slot " << slot << " head " << head << " d " << d
                   << ": offset " << at << (at >= 0 && at < total ? " again" : " outside the pool")
                   << " of " << total;
          }
          seen[at] = true;
        }
      }
    }
  }
  // total distinct offsets in [0, total): every element of the pool is hit exactly once.
  return ::testing::AssertionSuccess();
}

TEST(KvElementOffset, IsABijectionOntoThePoolForKAndV) {
  ForEachPool({KvPageFormat::kRows, KvPageFormat::kTiles16}, [](const PagedKv& kv) {
    EXPECT_TRUE(IsBijectionOntoPool(kv, false)) << Describe(kv, false);
    EXPECT_TRUE(IsBijectionOntoPool(kv, true)) << Describe(kv, true);
  });
}

// KvPool::Store places a row with one offset per head plus a per-d table: that needs the offset
// to be the sum of a part without d and a part with d alone, in every format and dtype.
TEST(KvElementOffset, IsThePartOfTheHeadPlusThePartOfD) {
  ForEachPool({KvPageFormat::kRows, KvPageFormat::kTiles16}, [](const PagedKv& kv) {
    for (bool value : {false, true}) {
      for (int page = 0; page < kPages; ++page) {
        for (int slot = 0; slot < kv.page_size; ++slot) {
          for (int head = 0; head < kv.num_kv_heads; ++head) {
            const int64_t base = KvElementOffset(kv, value, page, slot, head, 0);
            for (int d = 0; d < Dim(kv, value); ++d) {
              ASSERT_EQ(KvElementOffset(kv, value, page, slot, head, d),
                        base + KvElementOffset(kv, value, 0, 0, 0, d))
                  << Describe(kv, value) << " page " << page << " slot " << slot << " head " << head
                  << " d " << d;
            }
          }
        }
      }
    }
  });
}

TEST(KvElementOffset, RowsAreRowMajor) {
  ForEachPool({KvPageFormat::kRows}, [](const PagedKv& kv) {
    for (bool value : {false, true}) {
      const int dim = Dim(kv, value);
      for (int page = 0; page < kPages; ++page) {
        for (int slot = 0; slot < kv.page_size; ++slot) {
          for (int head = 0; head < kv.num_kv_heads; ++head) {
            for (int d = 0; d < dim; d += 7) {
              const int64_t want =
                  ((int64_t{page} * kv.page_size + slot) * kv.num_kv_heads + head) * dim + d;
              ASSERT_EQ(KvElementOffset(kv, value, page, slot, head, d), want)
                  << Describe(kv, value) << " page " << page << " slot " << slot << " head " << head
                  << " d " << d;
            }
          }
        }
      }
    }
  });
}

TEST(KvElementOffset, AbsorbedMlaReadsVFromTheKRow) {
  PagedKv kv = Pool(DataType::kBF16, KvPageFormat::kRows, 16, 1, 576, 512);
  kv.v = nullptr;
  for (int slot : {0, 7, 15}) {
    for (int d : {0, 100, 511}) {
      EXPECT_EQ(KvElementOffset(kv, true, 2, slot, 0, d),
                KvElementOffset(kv, false, 2, slot, 0, d));
      EXPECT_EQ(KvElementOffset(kv, false, 2, slot, 0, d), (2 * 16 + slot) * 576 + d);
    }
  }
}

// Calls fn(at, tile) with at(j, d), the offset of key j in [0, 16) of the tile, and the tile's
// index in the pool ([page][head][slot / 16]), for every tile of K (or V) until a failure.
void ForEachTile(const PagedKv& kv, bool value,
                 const std::function<void(const std::function<int64_t(int, int)>&, int64_t)>& fn) {
  const int tiles_per_head = kv.page_size / 16;
  for (int page = 0; page < kPages; ++page) {
    for (int head = 0; head < kv.num_kv_heads; ++head) {
      for (int t = 0; t < tiles_per_head; ++t) {
        const auto at = [&](int j, int d) {
          return KvElementOffset(kv, value, page, t * 16 + j, head, d);
        };
        if (!::testing::Test::HasFailure()) {
          fn(at, (int64_t{page} * kv.num_kv_heads + head) * tiles_per_head + t);
        }
      }
    }
  }
}

// Where a tile check failed; built only on failure (gtest evaluates a streamed message lazily),
// as building it for every element would dominate the test's time.
std::string InTile(const PagedKv& kv, bool value, int64_t tile, int j, int d) {
  return Describe(kv, value) + " tile " + std::to_string(tile) + " key " + std::to_string(j) +
         " d " + std::to_string(d);
}

// A page is [num_kv_heads, page_size / 16, tile] and a tile 16 * D elements: the tile index is
// the offset divided by the tile size.
TEST(KvElementOffset, Tiles16PutsSixteenSlotsOfOneHeadInATile) {
  ForEachPool({KvPageFormat::kTiles16}, [](const PagedKv& kv) {
    for (bool value : {false, true}) {
      const int dim = Dim(kv, value);
      ForEachTile(kv, value, [&](const auto& at, int64_t tile) {
        for (int j = 0; j < 16; ++j) {
          for (int d = 0; d < dim; ++d) {
            ASSERT_EQ(at(j, d) / (16 * dim), tile) << InTile(kv, value, tile, j, d);
          }
        }
      });
    }
  });
}

// K tile [D / e, 16 keys, e]: a word holds e consecutive d of one key (d % e is the element in
// the word), the 16 keys of a word-column are consecutive words, and the next e d are the next
// column, 16 words on.
TEST(KvElementOffset, Tiles16KWordsRunAlongDAndColumnsAlongKeys) {
  ForEachPool({KvPageFormat::kTiles16}, [](const PagedKv& kv) {
    const int64_t e = Elems(kv);
    const int dim = kv.head_dim_qk;
    ForEachTile(kv, false, [&](const auto& at, int64_t tile) {
      for (int j = 0; j < 16; ++j) {
        for (int d = 0; d < dim; ++d) {
          const int64_t word = at(j, d) / e;
          ASSERT_EQ(at(j, d) % e, d % e) << InTile(kv, false, tile, j, d);
          if (d % e != 0) {
            ASSERT_EQ(word, at(j, d - 1) / e) << InTile(kv, false, tile, j, d) << ": one word";
          }
          if (j + 1 < 16) {
            ASSERT_EQ(at(j + 1, d) / e, word + 1) << InTile(kv, false, tile, j, d) << ": next key";
          }
          if (d + e < dim) {
            ASSERT_EQ(at(j, d + e) / e, word + 16) << InTile(kv, false, tile, j, d) << ": next d";
          }
        }
      }
    });
  });
}

// V tile [16 / e, D, e]: a word holds one d of e consecutive keys (j % e is the element in the
// word), consecutive d are consecutive words, and the next e keys follow D words on.
TEST(KvElementOffset, Tiles16VWordsRunAlongKeysAndRowsAlongD) {
  ForEachPool({KvPageFormat::kTiles16}, [](const PagedKv& kv) {
    const int64_t e = Elems(kv);
    const int dim = kv.head_dim_v;
    ForEachTile(kv, true, [&](const auto& at, int64_t tile) {
      for (int j = 0; j < 16; ++j) {
        for (int d = 0; d < dim; ++d) {
          const int64_t word = at(j, d) / e;
          ASSERT_EQ(at(j, d) % e, j % e) << InTile(kv, true, tile, j, d);
          if (j % e != 0) {
            ASSERT_EQ(word, at(j - 1, d) / e) << InTile(kv, true, tile, j, d) << ": one word";
          }
          if (d + 1 < dim) {
            ASSERT_EQ(at(j, d + 1) / e, word + 1) << InTile(kv, true, tile, j, d) << ": next d";
          }
          if (j + e < 16) {
            ASSERT_EQ(at(j + e, d) / e, word + dim)
                << InTile(kv, true, tile, j, d) << ": next keys";
          }
        }
      }
    });
  });
}

}  // namespace
}  // namespace ctxpar
