// Seeded corruption of the gguf-py fixture: every truncation, random byte flips, and huge
// values written over every field position. The reader must answer with a Status (never crash,
// never allocate without bound); whatever it accepts must be safe to read to the last byte.
// Run this binary under AddressSanitizer or valgrind to check the "never crash" half fully.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "ctxpar/gguf.h"
#include "loader/corruption.h"

namespace ctxpar {
namespace {

using testing::ExpectGracefulError;
using testing::FlipBytes;

const std::string kFixture = std::string(CTXPAR_TEST_DATA_DIR) + "/gguf/fixture_v3.gguf.bin";

std::vector<uint8_t> ReadFixture() {
  std::ifstream in(kFixture, std::ios::binary);
  EXPECT_TRUE(in.good()) << kFixture;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Touches everything an accepted file exposes: metadata, every tensor byte through
// dequantization, so that a bound the parser missed shows up under a sanitizer.
void Exercise(const GgufFile& f) {
  for (const auto& entry : f.metadata()) {
    (void)entry.value.TypeName();
    (void)entry.value.size();
  }
  std::vector<float> out;
  for (const GgufTensor& t : f.tensors()) {
    ASSERT_LE(t.size_bytes, f.file_size());
    if (!GetGgmlTypeTraits(t.type).dequantizable) continue;
    out.resize(static_cast<size_t>(t.num_elements()));
    EXPECT_TRUE(DequantizeRows(t, 0, t.num_rows(), out.data()).ok()) << t.name;
  }
}

TEST(GgufCorruptionTest, EveryTruncationIsDataLoss) {
  const std::vector<uint8_t> image = ReadFixture();
  auto whole = GgufFile::FromBytes(image);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  // The writer pads after the last tensor; cutting into that padding loses nothing.
  uint64_t end_of_data = whole->data_offset();
  for (const GgufTensor& t : whole->tensors()) {
    end_of_data = std::max(end_of_data, whole->data_offset() + t.offset + t.size_bytes);
  }
  for (size_t cut = 0; cut < image.size(); ++cut) {
    auto f = GgufFile::FromBytes(std::vector<uint8_t>(image.begin(), image.begin() + cut));
    if (cut >= end_of_data) {
      ASSERT_TRUE(f.ok()) << "cut at " << cut << ": " << f.status().ToString();
      continue;
    }
    ASSERT_FALSE(f.ok()) << "cut at " << cut;
    EXPECT_EQ(f.status().code(), StatusCode::kDataLoss) << "cut at " << cut;
    // Every message locates the damage: an offset, or the byte range of a tensor's data.
    const std::string& message = f.status().message();
    EXPECT_TRUE(message.find(" offset ") != std::string::npos ||
                message.find(" past end of file (size " + std::to_string(cut) + ")") !=
                    std::string::npos)
        << "cut at " << cut << ": " << message;
  }
}

TEST(GgufCorruptionTest, RandomByteFlips) {
  const std::vector<uint8_t> image = ReadFixture();
  auto whole = GgufFile::FromBytes(image);
  ASSERT_TRUE(whole.ok());
  // Flips inside the header, metadata and tensor infos: the bytes the parser interprets.
  const size_t header_end = whole->data_offset();
  std::mt19937_64 rng(20261130);
  int accepted = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    auto f = GgufFile::FromBytes(FlipBytes(image, header_end, 4, rng));
    if (f.ok()) {
      ++accepted;
      Exercise(*f);
    } else {
      ExpectGracefulError(f, "iteration " + std::to_string(iter));
    }
  }
  // Flips inside string bytes or float values leave a valid file; most flips must not.
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, 4000);
}

TEST(GgufCorruptionTest, HugeValuesAtEveryFieldPosition) {
  const std::vector<uint8_t> image = ReadFixture();
  auto whole = GgufFile::FromBytes(image);
  ASSERT_TRUE(whole.ok());
  const size_t header_end = whole->data_offset();
  const uint64_t kHuge64[] = {~0ull, 1ull << 63, (1ull << 63) - 1, 1ull << 40, 0x100000000ull};
  const uint32_t kHuge32[] = {~0u, 1u << 31, 13, 9, 4};
  for (size_t at = 0; at + 8 <= header_end; ++at) {
    for (uint64_t v : kHuge64) {
      std::vector<uint8_t> bad = image;
      std::memcpy(&bad[at], &v, 8);
      auto f = GgufFile::FromBytes(std::move(bad));
      if (f.ok()) {
        Exercise(*f);
      } else {
        ExpectGracefulError(f, "u64 " + std::to_string(v) + " at " + std::to_string(at));
      }
    }
    for (uint32_t v : kHuge32) {
      std::vector<uint8_t> bad = image;
      std::memcpy(&bad[at], &v, 4);
      auto f = GgufFile::FromBytes(std::move(bad));
      if (f.ok()) {
        Exercise(*f);
      } else {
        ExpectGracefulError(f, "u32 " + std::to_string(v) + " at " + std::to_string(at));
      }
    }
  }
}

}  // namespace
}  // namespace ctxpar
