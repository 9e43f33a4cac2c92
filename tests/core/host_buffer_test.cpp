#include "ctxpar/host_buffer.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <utility>

#include "core/resident_pages.h"

namespace ctxpar {
namespace {

using testing::ResidentPages;

constexpr std::size_t kMiB = std::size_t{1} << 20;

TEST(HostBuffer, ZeroBytesIsEmpty) {
  Expected<HostBuffer> b = HostBuffer::Allocate(0);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->data(), nullptr);
  EXPECT_EQ(b->size(), 0u);
}

// An odd size over two huge pages: the start is on a 2 MiB boundary (what THP needs), the memory
// is zero-filled, and every byte up to the size asked for can be written and read back.
TEST(HostBuffer, IsAlignedZeroFilledAndWritableEndToEnd) {
  const std::size_t bytes = 5 * kMiB + 3;
  Expected<HostBuffer> b = HostBuffer::Allocate(bytes);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_NE(b->data(), nullptr);
  EXPECT_EQ(b->size(), bytes);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b->data()) % (2 * kMiB), 0u);
  unsigned char* p = b->as<unsigned char>();
  for (std::size_t i = 0; i < bytes; ++i) ASSERT_EQ(p[i], 0) << "byte " << i;
  for (std::size_t i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>(i * 7 + 1);
  for (std::size_t i = 0; i < bytes; ++i) {
    ASSERT_EQ(p[i], static_cast<unsigned char>(i * 7 + 1)) << "byte " << i;
  }
}

TEST(HostBuffer, MoveTransfersOwnershipAndEmptiesTheSource) {
  Expected<HostBuffer> a = HostBuffer::Allocate(4096);
  ASSERT_TRUE(a.ok());
  void* const data = a->data();
  a->as<int>()[0] = 42;

  HostBuffer b(std::move(*a));
  EXPECT_EQ(b.data(), data);
  EXPECT_EQ(b.size(), 4096u);
  EXPECT_EQ(a->data(), nullptr);
  EXPECT_EQ(a->size(), 0u);

  // Assignment over a buffer that owns memory releases that memory and takes the other's.
  Expected<HostBuffer> c = HostBuffer::Allocate(3 * kMiB);
  ASSERT_TRUE(c.ok());
  *c = std::move(b);
  EXPECT_EQ(c->data(), data);
  EXPECT_EQ(c->size(), 4096u);
  EXPECT_EQ(c->as<int>()[0], 42);
  EXPECT_EQ(b.data(), nullptr);
  EXPECT_EQ(b.size(), 0u);
}

// Populate backs every page of a buffer nobody has touched (mincore: none resident before, all
// after), and keeps what was written before it: the bytes written, and zeros elsewhere.
TEST(HostBuffer, PopulateBacksEveryPageAndKeepsTheContents) {
  const std::size_t bytes = 6 * kMiB;
  Expected<HostBuffer> b = HostBuffer::Allocate(bytes);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  const std::size_t pages = bytes / static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  EXPECT_EQ(ResidentPages(b->data(), bytes), 0u);
  unsigned char* p = b->as<unsigned char>();
  p[4 * kMiB + 17] = 0x5a;
  EXPECT_LT(ResidentPages(b->data(), bytes), pages);
  ASSERT_TRUE(PopulateHostMemory(p + 1, bytes - 1).ok());  // an unaligned range: whole pages
  EXPECT_EQ(ResidentPages(b->data(), bytes), pages);
  for (std::size_t i = 0; i < bytes; ++i) {
    ASSERT_EQ(p[i], i == 4 * kMiB + 17 ? 0x5a : 0) << "byte " << i;
  }
  EXPECT_TRUE(PopulateHostMemory(nullptr, 0).ok());
}

// The system's refusal is a status, not a crash: a range that is not mapped.
TEST(HostBuffer, PopulateOfUnmappedMemoryIsUnavailable) {
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  void* m = mmap(nullptr, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  if (madvise(m, 0, MADV_POPULATE_WRITE) != 0) {
    munmap(m, page);
    GTEST_SKIP() << "this kernel has no MADV_POPULATE_WRITE (Linux < 5.14): pages are touched";
  }
  const Status s = PopulateHostMemory(m, page);
  munmap(m, page);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("backing 4096 bytes of host memory failed: "), std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace ctxpar
