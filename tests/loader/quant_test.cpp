// Dequantization against gguf-py's numpy dequantizers (goldens made by
// tools/golden/gguf/make_goldens.py from seeded random blocks), plus the formats gguf-py lacks
// (Q8_1, Q8_K) against their ggml-common.h definition evaluated in double.
#include "ctxpar/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "gguf_test_data.h"

namespace ctxpar {
namespace {

const std::string& kDir = testing::kGgufDataDir;

using testing::ReadBytes;
using testing::ReadFloats;

const GgmlTypeTraits* TypeByName(const std::string& name) {
  for (uint32_t id = 0; id < 64; ++id) {
    const GgmlTypeTraits* t = FindGgmlType(id);
    if (t != nullptr && t->name == name) return t;
  }
  return nullptr;
}

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

struct BlockCase {
  std::string type;
  int64_t n;
  std::string input;
  std::string golden;
};

std::vector<BlockCase> LoadBlockCases() {
  std::ifstream in(kDir + "golden.json");
  const auto manifest = nlohmann::json::parse(in);
  std::vector<BlockCase> cases;
  for (const auto& b : manifest.at("blocks")) {
    cases.push_back({b.at("type"), b.at("n"), b.at("input"), b.at("golden")});
  }
  return cases;
}

void PrintTo(const BlockCase& c, std::ostream* os) { *os << c.type; }

class DequantizeGoldenTest : public ::testing::TestWithParam<BlockCase> {};

TEST_P(DequantizeGoldenTest, MatchesGgufPy) {
  const BlockCase& c = GetParam();
  const GgmlTypeTraits* t = TypeByName(c.type);
  ASSERT_NE(t, nullptr) << c.type;
  const std::vector<uint8_t> input = ReadBytes(kDir + c.input);
  const std::vector<float> golden = ReadFloats(kDir + c.golden);
  ASSERT_EQ(static_cast<int64_t>(golden.size()), c.n);
  ASSERT_EQ(static_cast<int64_t>(input.size()), c.n / t->block_size * t->type_size);

  std::vector<float> out(c.n);
  ASSERT_TRUE(DequantizeRow(t->type, input.data(), out.data(), c.n).ok());
  // MXFP4's values are a power of two times a small integer: gguf-py's bits exactly.
  const bool exact = t->block_size == 1 || t->type == GgmlType::kMXFP4;
  for (int64_t i = 0; i < c.n; ++i) {
    if (std::isnan(golden[i])) {
      EXPECT_TRUE(std::isnan(out[i])) << c.type << " element " << i;
    } else if (exact) {
      EXPECT_EQ(Bits(out[i]), Bits(golden[i])) << c.type << " element " << i;
    } else {
      EXPECT_NEAR(out[i], golden[i], 1e-6 * std::fabs(golden[i]) + 1e-30)
          << c.type << " element " << i;
    }
  }

  // Row by row, from an odd address: the blocks need no alignment, and each row stands alone.
  const int64_t row = 4 * t->block_size;
  const int64_t row_bytes = 4 * t->type_size;
  std::vector<uint8_t> shifted(input.size() + 1);
  std::memcpy(shifted.data() + 1, input.data(), input.size());
  std::vector<float> rows(c.n);
  for (int64_t r = 0; r * row < c.n; ++r) {
    ASSERT_TRUE(
        DequantizeRow(t->type, shifted.data() + 1 + r * row_bytes, rows.data() + r * row, row)
            .ok());
  }
  EXPECT_EQ(0, std::memcmp(rows.data(), out.data(), out.size() * 4)) << c.type;

  // bf16 output is the fp32 output rounded to nearest even.
  std::vector<uint16_t> bf16(c.n);
  ASSERT_TRUE(DequantizeRowBf16(t->type, input.data(), bf16.data(), c.n).ok());
  for (int64_t i = 0; i < c.n; ++i) {
    if (std::isnan(out[i])) continue;
    const double want = golden[i];
    const double got = Bf16ToFloat(bf16[i]);
    if (std::isinf(want)) {
      EXPECT_EQ(got, want) << c.type << " element " << i;
      continue;
    }
    EXPECT_LE(std::fabs(got - want), std::ldexp(std::fabs(want), -8) + 1e-30)
        << c.type << " element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(GgufPy, DequantizeGoldenTest, ::testing::ValuesIn(LoadBlockCases()),
                         [](const ::testing::TestParamInfo<BlockCase>& info) {
                           return info.param.type;
                         });

TEST(DequantizeGoldenTest, CoversTheRequiredTypes) {
  std::vector<std::string> types;
  for (const auto& c : LoadBlockCases()) types.push_back(c.type);
  for (const char* need : {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K"}) {
    EXPECT_NE(std::find(types.begin(), types.end(), need), types.end()) << need;
  }
}

// ggml-common.h: block_q8_1 {half d; half s; int8 qs[32]} dequantizes to d * qs[i] (s is a sum
// kept for dot products); block_q8_K {float d; int8 qs[256]; int16 bsums[16]} to d * qs[i].
TEST(DequantizeTest, Q8_1AndQ8_KFollowGgmlCommon) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<uint8_t> q81(3 * 36);
  for (auto& b : q81) b = static_cast<uint8_t>(byte(rng));
  const uint16_t halves[3] = {0x3C00, 0xB800, 0x1234};  // 1.0, -0.5, a small normal
  const double half_values[3] = {1.0, -0.5, std::ldexp(1.0 + 0x234 / 1024.0, 4 - 15)};
  std::vector<float> out(96);
  for (int b = 0; b < 3; ++b) std::memcpy(&q81[b * 36], &halves[b], 2);
  ASSERT_TRUE(DequantizeRow(GgmlType::kQ8_1, q81.data(), out.data(), 96).ok());
  for (int i = 0; i < 96; ++i) {
    const double want = half_values[i / 32] * static_cast<int8_t>(q81[(i / 32) * 36 + 4 + i % 32]);
    EXPECT_EQ(out[i], static_cast<float>(want)) << i;
  }

  std::vector<uint8_t> q8k(2 * 292);
  for (auto& b : q8k) b = static_cast<uint8_t>(byte(rng));
  const float scales[2] = {0.013f, -7.5f};
  for (int b = 0; b < 2; ++b) std::memcpy(&q8k[b * 292], &scales[b], 4);
  out.resize(512);
  ASSERT_TRUE(DequantizeRow(GgmlType::kQ8_K, q8k.data(), out.data(), 512).ok());
  for (int i = 0; i < 512; ++i) {
    const double want = static_cast<double>(scales[i / 256]) *
                        static_cast<int8_t>(q8k[(i / 256) * 292 + 4 + i % 256]);
    EXPECT_EQ(out[i], static_cast<float>(want)) << i;
  }
}

TEST(Fp16Test, EveryHalfConvertsExactly) {
  // Reference: the IEEE binary16 definition evaluated in double.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const int sign = (h >> 15) ? -1 : 1;
    const int exponent = (h >> 10) & 0x1F;
    const int mantissa = h & 0x3FF;
    const float got = Fp16ToFp32(static_cast<uint16_t>(h));
    if (exponent == 31) {
      if (mantissa == 0) {
        EXPECT_EQ(got, sign * INFINITY) << h;
      } else {
        EXPECT_TRUE(std::isnan(got)) << h;
      }
      continue;
    }
    const double want = exponent == 0 ? sign * std::ldexp(mantissa, -24)
                                      : sign * std::ldexp(1024 + mantissa, exponent - 25);
    EXPECT_EQ(Bits(got), Bits(static_cast<float>(want))) << h;
  }
}

TEST(DequantizeTest, RejectsBadLengthsAndUnsupportedTypes) {
  float out[64];
  uint8_t in[64] = {};
  Status s = DequantizeRow(GgmlType::kQ4_1, in, out, 48);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "row length n=48 must be a non-negative multiple of the Q4_1 block size 32");
  EXPECT_EQ(DequantizeRow(GgmlType::kF32, in, out, -1).code(), StatusCode::kInvalidArgument);
  s = DequantizeRow(GgmlType::kIQ2_XXS, in, out, 256);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_EQ(s.message(), "dequantization of ggml type IQ2_XXS is not implemented");
  uint16_t bf[32];
  EXPECT_EQ(DequantizeRowBf16(GgmlType::kI32, in, bf, 0).code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(DequantizeRow(GgmlType::kQ6_K, in, out, 0).ok());
}

TEST(GgmlTypeTest, SizesMatchGgml) {
  // (block size, bytes per block) from ggml.c's type_traits, the same table as gguf-py's
  // GGML_QUANT_SIZES.
  const struct {
    GgmlType type;
    int64_t block;
    int64_t bytes;
  } want[] = {{GgmlType::kQ4_0, 32, 18},     {GgmlType::kQ4_1, 32, 20},   {GgmlType::kQ8_0, 32, 34},
              {GgmlType::kQ4_K, 256, 144},   {GgmlType::kQ6_K, 256, 210}, {GgmlType::kBF16, 1, 2},
              {GgmlType::kIQ4_XS, 256, 136}, {GgmlType::kMXFP4, 32, 17}};
  for (const auto& w : want) {
    const GgmlTypeTraits& t = GetGgmlTypeTraits(w.type);
    EXPECT_EQ(t.block_size, w.block) << t.name;
    EXPECT_EQ(t.type_size, w.bytes) << t.name;
  }
  EXPECT_EQ(FindGgmlType(4), nullptr);  // Q4_2, removed from ggml
  EXPECT_EQ(FindGgmlType(31), nullptr);
  EXPECT_EQ(*GgmlRowBytes(GgmlType::kQ4_1, 576), 360);
  EXPECT_EQ(GgmlRowBytes(GgmlType::kF64, INT64_MAX).status().code(), StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace ctxpar
