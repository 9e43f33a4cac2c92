#include "ctxpar/pack_arena.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

namespace ctxpar {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

struct Block {
  unsigned char* p;
  std::size_t bytes;
};

Block Fill(std::size_t bytes, unsigned char seed) {
  auto* p = static_cast<unsigned char*>(AllocatePack(bytes));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u) << bytes << " bytes";
  for (std::size_t i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>(seed + i * 13);
  return {p, bytes};
}

bool Intact(const Block& b, unsigned char seed) {
  for (std::size_t i = 0; i < b.bytes; ++i) {
    if (b.p[i] != static_cast<unsigned char>(seed + i * 13)) return false;
  }
  return true;
}

// Sizes below a cache line, odd ones, ones that share a chunk and ones larger than a chunk's
// quarter (a mapping of their own): each 64-byte aligned and none overlapping another (every
// pattern survives every other write); nothing stays mapped once all are freed.
TEST(PackArena, AlignedDisjointAndReleased) {
  ASSERT_EQ(PackArenaBytes(), 0u);
  const std::size_t sizes[] = {1, 63, 64, 65, 5000, 3 * kMiB + 7, 9 * kMiB, 40 * kMiB, 100};
  std::vector<Block> blocks;
  for (std::size_t i = 0; i < std::size(sizes); ++i) {
    blocks.push_back(Fill(sizes[i], static_cast<unsigned char>(i)));
  }
  EXPECT_GE(PackArenaBytes(), 49 * kMiB + 32 * kMiB);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    EXPECT_TRUE(Intact(blocks[i], static_cast<unsigned char>(i))) << sizes[i] << " bytes";
  }
  for (const Block& b : blocks) FreePack(b.p, b.bytes);
  EXPECT_EQ(PackArenaBytes(), 0u);
}

// A chunk is unmapped when its last pack goes, while a chunk with a live pack stays.
TEST(PackArena, ChunkUnmappedWithItsLastPack) {
  ASSERT_EQ(PackArenaBytes(), 0u);
  std::vector<Block> blocks;
  for (int i = 0; i < 16; ++i) blocks.push_back(Fill(4 * kMiB, static_cast<unsigned char>(i)));
  const std::size_t two_chunks = PackArenaBytes();
  EXPECT_EQ(two_chunks, 64 * kMiB) << "8 packs of 4 MiB a 32 MiB chunk";
  for (int i = 0; i < 8; ++i) FreePack(blocks[i].p, blocks[i].bytes);
  EXPECT_EQ(PackArenaBytes(), 32 * kMiB);
  for (int i = 8; i < 16; ++i) EXPECT_TRUE(Intact(blocks[i], static_cast<unsigned char>(i)));
  for (int i = 8; i < 16; ++i) FreePack(blocks[i].p, blocks[i].bytes);
  EXPECT_EQ(PackArenaBytes(), 0u);
}

// A MatMul of a matrix without a pack packs it per call: those packs, made together and freed in
// any order while the model's packs stay, take the same space every call instead of new space
// (and, once a chunk is full, a chunk mapped and unmapped per call).
TEST(PackArena, PacksFreedTogetherGiveTheirSpaceBack) {
  ASSERT_EQ(PackArenaBytes(), 0u);
  const Block model = Fill(1000, 7);
  void* first = nullptr;
  for (int call = 0; call < 100; ++call) {
    void* q = AllocatePack(3 * kMiB);
    if (call == 0) first = q;
    ASSERT_EQ(q, first) << "call " << call;
    void* scale = AllocatePack(100 * 1024);
    void* sum = AllocatePack(200 * 1024 + 5);
    FreePack(q, 3 * kMiB);  // not the last handed out: its space comes back with the others
    FreePack(sum, 200 * 1024 + 5);
    FreePack(scale, 100 * 1024);
  }
  EXPECT_EQ(PackArenaBytes(), 32 * kMiB);
  EXPECT_TRUE(Intact(model, 7));
  FreePack(model.p, model.bytes);
  EXPECT_EQ(PackArenaBytes(), 0u);
}

// Packs made and freed from several threads at once (a model's layers are packed in parallel).
TEST(PackArena, ThreadsAllocateAndFreeConcurrently) {
  ASSERT_EQ(PackArenaBytes(), 0u);
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &failures] {
      std::vector<std::pair<Block, unsigned char>> mine;
      for (int i = 0; i < 200; ++i) {
        const auto seed = static_cast<unsigned char>(t * 50 + i);
        const std::size_t bytes = 1000 + 4096 * std::size_t((i * 7 + t) % 37);
        auto* p = static_cast<unsigned char*>(AllocatePack(bytes));
        for (std::size_t j = 0; j < bytes; ++j) p[j] = static_cast<unsigned char>(seed + j * 13);
        mine.push_back({{p, bytes}, seed});
        if (i % 3 == 2) {
          failures[t] += !Intact(mine.front().first, mine.front().second);
          FreePack(mine.front().first.p, mine.front().first.bytes);
          mine.erase(mine.begin());
        }
      }
      for (const auto& [b, seed] : mine) {
        failures[t] += !Intact(b, seed);
        FreePack(b.p, b.bytes);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
  EXPECT_EQ(PackArenaBytes(), 0u);
}

}  // namespace
}  // namespace ctxpar
