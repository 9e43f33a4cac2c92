// The bf16 products of --dtype auto for F16 and BF16 weights (linear_bf16.h): the scalar sequence
// against float64 within its bound; AVX512-BF16 (where this CPU has it) bitwise equal to the
// scalar sequence; and every path (AMX-BF16's own sequence too) giving a row the same bits alone
// and in a batch.
#include "compute/linear_bf16.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "ctxpar/dtype.h"

namespace ctxpar::compute {
namespace {

using bf16_internal::Bf16Isa;

struct Weights {
  std::vector<std::uint16_t> bits;
  QuantMatrix m;
};

// rows x cols of `type` (F16 or BF16), normal values with a few tiny ones (subnormal in bf16).
Weights RandomWeights(WeightType type, int rows, int cols, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  Weights w;
  w.bits.resize(std::size_t(rows) * cols);
  for (std::size_t i = 0; i < w.bits.size(); ++i) {
    const float v = i % 97 == 5 ? 1e-39f : normal(rng);
    w.bits[i] = type == WeightType::kF16 ? Fp32ToFp16(v) : FloatToBf16(v);
  }
  w.m = {.type = type,
         .data = reinterpret_cast<const std::uint8_t*>(w.bits.data()),
         .rows = rows,
         .cols = cols,
         .row_stride = std::size_t(cols) * 2};
  return w;
}

std::vector<float> RandomActs(int n, int cols, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(std::size_t(n) * cols);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = i % 89 == 7 ? -3e-39f : normal(rng);
  return x;
}

std::vector<float> Product(const QuantMatrix& w, const std::vector<float>& x, int n, Bf16Isa isa,
                           ThreadPool* pool) {
  Acts acts;
  acts.format = ActFormat::kInt8;
  acts.type = w.type;
  acts.n = n;
  acts.blocks_per_row = w.cols / kBlock;
  bf16_internal::PrepareBf16Acts(x.data(), n, w.cols, w.cols, &acts, pool);
  std::vector<float> y(std::size_t(n) * (w.rows + 3), -1.0f);
  const MatMulOut out{w, y.data(), w.rows + 3};
  bf16_internal::MatMulBf16({&out, 1}, acts, pool, isa);
  return y;
}

// Every output of y (row stride rows + 3) within the bf16 path's bound of the float64 product of
// the weights as stored and the activations unrounded, and nothing written past a row.
void ExpectWithinBound(const QuantMatrix& w, const std::vector<float>& x, int n,
                       const std::vector<float>& y) {
  const int rows = w.rows, cols = w.cols;
  std::vector<float> row(cols);
  for (int r = 0; r < rows; ++r) {
    DequantizeRow(w, r, row.data());
    for (int t = 0; t < n; ++t) {
      double exact = 0.0, mag = 0.0;
      for (int c = 0; c < cols; ++c) {
        exact += double(row[c]) * x[t * cols + c];
        mag += std::fabs(double(row[c]) * x[t * cols + c]);
      }
      // Two bf16 roundings (2^-9 each, relative) and fp32 accumulation over `cols` terms.
      const double bound = (2.0 * std::ldexp(1.0, -9) + cols * double(FLT_EPSILON)) * mag;
      ASSERT_NEAR(y[t * (rows + 3) + r], exact, bound) << t << "," << r;
    }
  }
  for (int t = 0; t < n; ++t) {
    for (int r = rows; r < rows + 3; ++r) ASSERT_EQ(y[t * (rows + 3) + r], -1.0f);
  }
}

TEST(Bf16MatMul, ScalarSequenceIsWithinItsBoundOfFloat64) {
  for (WeightType type : {WeightType::kF16, WeightType::kBF16}) {
    const int n = 5, rows = 21, cols = 96;
    const Weights w = RandomWeights(type, rows, cols, 1);
    const std::vector<float> x = RandomActs(n, cols, 2);
    ExpectWithinBound(w.m, x, n, Product(w.m, x, n, Bf16Isa::kScalar, nullptr));
  }
}

TEST(Bf16MatMul, EveryPathGivesARowTheSameBitsAloneAndInABatch) {
  const Bf16Isa best = bf16_internal::SelectBf16();
  if (best == Bf16Isa::kNone) GTEST_SKIP() << "no AVX512-BF16 on this CPU (or lowered)";
  auto pool = ThreadPool::Create(2);
  ASSERT_TRUE(pool.ok());
  std::vector<Bf16Isa> paths = {Bf16Isa::kAvx512Bf16};
  if (best == Bf16Isa::kAmx) paths.push_back(Bf16Isa::kAmx);
  for (WeightType type : {WeightType::kF16, WeightType::kBF16}) {
    const int rows = 37, cols = 576;
    const Weights w = RandomWeights(type, rows, cols, 3);
    const int n = 35;  // register tiles of 8 tokens (AMX: of 16) and a rest of 3
    const std::vector<float> x = RandomActs(n, cols, 4);
    const std::vector<float> scalar = Product(w.m, x, n, Bf16Isa::kScalar, nullptr);
    for (Bf16Isa isa : paths) {
      const std::vector<float> got = Product(w.m, x, n, isa, pool->get());
      ExpectWithinBound(w.m, x, n, got);
      for (int t = 0; t < n; ++t) {
        const std::vector<float> one(x.begin() + std::size_t(t) * cols,
                                     x.begin() + std::size_t(t + 1) * cols);
        const std::vector<float> alone = Product(w.m, one, 1, isa, nullptr);
        for (int r = 0; r < rows; ++r) {
          const std::size_t i = std::size_t(t) * (rows + 3) + r;
          ASSERT_EQ(alone[r], got[i]) << "isa " << int(isa) << " token " << t << " row " << r;
          // vdpbf16ps's sequence is the scalar one; AMX's tiles round their own way.
          if (isa == Bf16Isa::kAvx512Bf16) ASSERT_EQ(got[i], scalar[i]) << t << "," << r;
        }
      }
    }
  }
}

// vdpbf16ps and tdpbf16ps read subnormal inputs as zero: a huge weight times a subnormal activation
// adds nothing, where plain fp32 products would add 2^100 * 2^-130 each.
TEST(Bf16MatMul, SubnormalInputsReadAsZeroOnEveryPath) {
  const int rows = 16, cols = 64;
  Weights w = RandomWeights(WeightType::kBF16, rows, cols, 7);
  for (std::uint16_t& b : w.bits) b = FloatToBf16(std::ldexp(1.0f, 100));
  const std::vector<float> x(cols, std::ldexp(1.0f, -130));
  std::vector<Bf16Isa> paths = {Bf16Isa::kScalar};
  if (bf16_internal::SelectBf16() != Bf16Isa::kNone) paths.push_back(Bf16Isa::kAvx512Bf16);
  if (bf16_internal::SelectBf16() == Bf16Isa::kAmx) paths.push_back(Bf16Isa::kAmx);
  for (Bf16Isa isa : paths) {
    const std::vector<float> y = Product(w.m, x, 1, isa, nullptr);
    for (int r = 0; r < rows; ++r) EXPECT_EQ(y[r], 0.0f) << "isa " << int(isa) << " row " << r;
  }
}

// The activations' rounding to bf16 on this CPU's path (AVX-512's integer sequence where a bf16
// path runs) is FloatToBf16 bit for bit, NaN
// (kept a quiet NaN) and the rounding's carry into the exponent included, over every 997th
// pattern and a tail shorter than a register.
TEST(Bf16MatMul, VectorRoundingIsFloatToBf16Bitwise) {
  std::vector<float> in;
  for (std::uint64_t b = 0; b <= 0xffffffffu; b += 997) {
    const auto bits = static_cast<std::uint32_t>(b);
    float f;
    std::memcpy(&f, &bits, 4);
    in.push_back(f);
  }
  for (std::uint32_t bits : {0x7f7fffffu, 0x3f808000u, 0x3f818000u, 0x7f800001u, 0xff800000u}) {
    float f;
    std::memcpy(&f, &bits, 4);
    in.push_back(f);
  }
  for (int n : {static_cast<int>(in.size()), 37, 5}) {
    std::vector<std::uint16_t> got(n + 1, 0xabcd);
    bf16_internal::RoundToBf16(in.data() + (in.size() - n), n, got.data(),
                               bf16_internal::SelectBf16());
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(got[i], FloatToBf16(in[in.size() - n + i])) << "n " << n << " i " << i;
    }
    EXPECT_EQ(got[n], 0xabcd) << "written past n = " << n;
  }
}

TEST(Bf16MatMul, KInt8TakesF16AndBf16AsBf16ProductsWhereAPathRuns) {
  const int n = 17, rows = 16, cols = 64;
  const Weights w = RandomWeights(WeightType::kBF16, rows, cols, 5);
  const std::vector<float> x = RandomActs(n, cols, 6);
  const QuantMatrix packed = WithInt8Pack(w.m, ActFormat::kInt8);
  Acts acts;
  PrepareActs(ActFormat::kInt8, packed.type, x.data(), n, cols, cols, &acts);
  std::vector<float> y(std::size_t(n) * rows);
  MatMul(packed, acts, y.data(), rows, nullptr);
  if (!Bf16Takes(WeightType::kBF16)) {
    EXPECT_EQ(packed.bf16, nullptr);
    EXPECT_EQ(acts.format, ActFormat::kF32);
    GTEST_SKIP() << "no bf16 path here: BF16 weights take the fp32 sequence";
  }
  ASSERT_NE(packed.bf16, nullptr);
  const std::vector<float> want = Product(w.m, x, n, bf16_internal::SelectBf16(), nullptr);
  for (int t = 0; t < n; ++t) {
    for (int r = 0; r < rows; ++r) ASSERT_EQ(y[t * rows + r], want[t * (rows + 3) + r]);
  }
}

}  // namespace
}  // namespace ctxpar::compute
