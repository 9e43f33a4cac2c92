// The int8 path of MatMul (ActFormat::kInt8, src/compute/linear_int8.h) on every weight type and
// every int8 ISA this CPU runs (CTXPAR_INT8_ISA forces the lower ones): close to a float64
// reference over ctxpar::DequantizeRow's weights, both with the original activations (bound:
// half a quantization step of each activation) and with the activations quantized here by the
// Q8 rule (bound: fp32 rounding); each ISA bitwise equal to the scalar sequence, on random
// integers and on integers at their extremes; a row's bits alone equal to its bits among 63
// others, on 1 and 3 threads; fused products equal to separate ones; a matrix packed once at load
// equal to one packed per call; and the activations' quantization of each ISA equal to the scalar
// code's.
#include "compute/linear_int8.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "compute/linear.h"
#include "compute/random_weights.h"
#include "ctxpar/cpu_features.h"

namespace ctxpar::compute {
namespace {

const WeightType kTypes[] = {WeightType::kQ4_1, WeightType::kQ8_0, WeightType::kQ5_0,
                             WeightType::kQ4_K, WeightType::kQ5_K, WeightType::kQ6_K};

using test_weights::Matrix;
using test_weights::Name;
using test_weights::Normal;
using test_weights::RandomMatrix;

// The int8 ISAs this CPU runs, lowest first, as CTXPAR_INT8_ISA names them.
std::vector<std::string> Isas() {
  std::vector<std::string> names;
  for (const char* isa : {"scalar", "avx2", "avx_vnni", "avx512_vnni", "amx"}) {
    setenv("CTXPAR_INT8_ISA", isa, 1);
    if (CheckInt8Isa().ok()) names.push_back(isa);
  }
  unsetenv("CTXPAR_INT8_ISA");
  return names;
}

class Int8MatMul : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv("CTXPAR_INT8_ISA"); }
  static void Force(const std::string& isa) {
    setenv("CTXPAR_INT8_ISA", isa.c_str(), 1);
    ASSERT_EQ(std::string(MatMulInt8Isa()), isa);
  }
  static std::vector<float> Run(const QuantMatrix& w, const std::vector<float>& x, int n,
                                ThreadPool* pool) {
    Acts acts;
    PrepareActs(ActFormat::kInt8, w.type, x.data(), n, w.cols, w.cols, &acts, pool);
    std::vector<float> y(std::size_t(n) * w.rows);
    MatMul(w, acts, y.data(), w.rows, pool);
    return y;
  }
};

TEST_F(Int8MatMul, MatchesFloat64) {
  std::mt19937 rng(36);
  const int rows = 37, cols = 512, n = 21;
  for (WeightType type : kTypes) {
    const Matrix m = RandomMatrix(type, rows, cols, rng);
    const std::vector<float> x = Normal(std::size_t(n) * cols, rng);
    std::vector<float> w(std::size_t(rows) * cols);
    for (int r = 0; r < rows; ++r) DequantizeRow(m.m, r, w.data() + std::size_t(r) * cols);
    for (const std::string& isa : Isas()) {
      Force(isa);
      const std::vector<float> y = Run(WithInt8Pack(m.m, ActFormat::kInt8), x, n, nullptr);
      for (int t = 0; t < n; ++t) {
        for (int r = 0; r < rows; ++r) {
          double exact = 0, quantized = 0, magnitude = 0, step = 0;
          for (int g = 0; g < cols / 32; ++g) {
            const float* xg = x.data() + std::size_t(t) * cols + g * 32;
            float amax = 0;
            for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xg[j]));
            const float d = amax / 127.0f;
            for (int j = 0; j < 32; ++j) {
              const double wj = w[std::size_t(r) * cols + g * 32 + j];
              const double xq = std::nearbyint(xg[j] * (1.0f / d)) * double(d);
              exact += wj * xg[j];
              quantized += wj * xq;
              magnitude += std::fabs(wj * xg[j]);
              step += 0.5 * d * std::fabs(wj);
            }
          }
          const double got = y[std::size_t(t) * rows + r];
          ASSERT_NEAR(got, quantized, 2e-5 * magnitude + 1e-6)
              << Name(type) << " " << isa << " t " << t << " r " << r;
          ASSERT_NEAR(got, exact, 1.001 * step + 2e-5 * magnitude + 1e-6)
              << Name(type) << " " << isa << " t " << t << " r " << r;
        }
      }
    }
  }
}

TEST_F(Int8MatMul, IsasEqualScalarBitwise) {
  std::mt19937 rng(7);
  const int rows = 50, cols = 768;
  for (WeightType type : kTypes) {
    const Matrix m = RandomMatrix(type, rows, cols, rng);
    const QuantMatrix packed = WithInt8Pack(m.m, ActFormat::kInt8);
    for (int n : {1, 3, 17, 35, 40}) {
      const std::vector<float> x = Normal(std::size_t(n) * cols, rng);
      Force("scalar");
      const std::vector<float> ref = Run(packed, x, n, nullptr);
      for (const std::string& isa : Isas()) {
        Force(isa);
        const std::vector<float> y = Run(packed, x, n, nullptr);
        for (std::size_t i = 0; i < y.size(); ++i) {
          ASSERT_EQ(std::bit_cast<std::uint32_t>(y[i]), std::bit_cast<std::uint32_t>(ref[i]))
              << Name(type) << " " << isa << " n " << n << " at " << i;
        }
      }
    }
  }
}

// Every q at the type's extreme (15 for the 4-bit types, 31 for Q5_K; for the signed types both
// ends: -16 and 15 for Q5_0, -32 and 31 for Q6_K, 127 and -128, which ggml never writes but a
// file may hold, for Q8_0) and every activation at 127 with q's sign, then at the other sign:
// each int32 sum sits at its bound, which a kernel that sums products in int16 over too many
// lines overflows.
TEST_F(Int8MatMul, ExtremeIntegersEqualScalarBitwise) {
  std::mt19937 rng(17);
  const int rows = 20, cols = 512;
  for (const auto [type, top] : {std::pair{WeightType::kQ4_1, true},
                                 {WeightType::kQ8_0, false},
                                 {WeightType::kQ8_0, true},
                                 {WeightType::kQ5_0, false},
                                 {WeightType::kQ5_0, true},
                                 {WeightType::kQ4_K, true},
                                 {WeightType::kQ5_K, true},
                                 {WeightType::kQ6_K, false},
                                 {WeightType::kQ6_K, true}}) {
    Matrix m = RandomMatrix(type, rows, cols, rng);
    const float sign = top ? 1.0f : -1.0f;
    const int fill = top ? 0xff : 0;
    for (std::size_t at = 0; at < m.bytes.size(); at += BlockBytes(type)) {
      std::uint8_t* blk = m.bytes.data() + at;
      switch (type) {
        case WeightType::kQ4_1:
          std::memset(blk + offsetof(BlockQ4_1, qs), fill, sizeof(BlockQ4_1::qs));
          break;
        case WeightType::kQ8_0:
          std::memset(blk + offsetof(BlockQ8_0, qs), top ? 0x7f : 0x80, sizeof(BlockQ8_0::qs));
          break;
        case WeightType::kQ5_0:
          std::memset(blk + offsetof(BlockQ5_0, qh), fill, 4 + sizeof(BlockQ5_0::qs));
          break;
        case WeightType::kQ4_K:
          std::memset(blk + offsetof(BlockQ4K, qs), fill, sizeof(BlockQ4K::qs));
          break;
        case WeightType::kQ5_K:
          std::memset(blk + offsetof(BlockQ5K, qh), fill,
                      sizeof(BlockQ5K::qh) + sizeof(BlockQ5K::qs));
          break;
        case WeightType::kQ6_K:
          std::memset(blk + offsetof(BlockQ6K, ql), fill,
                      sizeof(BlockQ6K::ql) + sizeof(BlockQ6K::qh));
          break;
        default:
          FAIL() << Name(type);
      }
    }
    const QuantMatrix packed = WithInt8Pack(m.m, ActFormat::kInt8);
    // x at q's sign, then at the other: the largest sums whichever way a kernel takes the
    // operands (|q| and x with q's sign, or q + bias and x).
    // 5 and 9 tokens: AVX2's kernels for a decode step's few tokens and for more.
    for (const auto [n, x_sign] : {std::pair{5, sign}, {5, -sign}, {9, sign}, {9, -sign}}) {
      const std::vector<float> x(std::size_t(n) * cols, x_sign);
      Force("scalar");
      const std::vector<float> ref = Run(packed, x, n, nullptr);
      std::vector<float> w(cols);
      for (int r = 0; r < rows; ++r) {
        DequantizeRow(m.m, r, w.data());
        double exact = 0, magnitude = 0;
        for (float v : w) {
          exact += double(v) * x_sign;
          magnitude += std::fabs(v);
        }
        ASSERT_NEAR(ref[r], exact, 2e-5 * magnitude) << Name(type) << " r " << r;
      }
      for (const std::string& isa : Isas()) {
        Force(isa);
        const std::vector<float> y = Run(packed, x, n, nullptr);
        for (std::size_t i = 0; i < y.size(); ++i) {
          ASSERT_EQ(std::bit_cast<std::uint32_t>(y[i]), std::bit_cast<std::uint32_t>(ref[i]))
              << Name(type) << " " << isa << " n " << n << " x " << x_sign << " at " << i;
        }
      }
    }
  }
}

TEST_F(Int8MatMul, RowAloneEqualsRowAmong63) {
  std::mt19937 rng(11);
  const int rows = 70, cols = 576, n = 64;
  auto pool = ThreadPool::Create(3);
  for (WeightType type : {WeightType::kQ4_1, WeightType::kQ8_0, WeightType::kQ6_K}) {
    const int c = type == WeightType::kQ6_K ? 768 : cols;
    const Matrix m = RandomMatrix(type, rows, c, rng);
    const QuantMatrix packed = WithInt8Pack(m.m, ActFormat::kInt8);
    const std::vector<float> x = Normal(std::size_t(n) * c, rng);
    for (const std::string& isa : Isas()) {
      Force(isa);
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), (*pool).get()}) {
        const std::vector<float> all = Run(packed, x, n, p);
        for (int t : {0, 5, 16, 37, 63}) {
          const std::vector<float> row(x.begin() + std::size_t(t) * c,
                                       x.begin() + std::size_t(t + 1) * c);
          const std::vector<float> alone = Run(packed, row, 1, p);
          for (int r = 0; r < rows; ++r) {
            ASSERT_EQ(std::bit_cast<std::uint32_t>(alone[r]),
                      std::bit_cast<std::uint32_t>(all[std::size_t(t) * rows + r]))
                << Name(type) << " " << isa << " t " << t << " r " << r;
          }
        }
      }
    }
  }
}

TEST_F(Int8MatMul, FusedAndUnpackedEqualSeparate) {
  std::mt19937 rng(5);
  const int cols = 512;
  // 3 and 1 row tiles: odd counts, which the pool's pairs of tiles (n >= kPrefillMinTokens on
  // VNNI) split unevenly.
  const Matrix a = RandomMatrix(WeightType::kQ5_0, 33, cols, rng);
  const Matrix b = RandomMatrix(WeightType::kQ4_K, 16, cols, rng);
  auto pool = ThreadPool::Create(2);
  const QuantMatrix pa = WithInt8Pack(a.m, ActFormat::kInt8);
  const QuantMatrix pb = WithInt8Pack(b.m, ActFormat::kInt8);
  for (int n : {19, 40}) {
    const std::vector<float> x = Normal(std::size_t(n) * cols, rng);
    Acts acts;
    PrepareActs(ActFormat::kInt8, pa.type, x.data(), n, cols, cols, &acts);
    std::vector<float> ya(std::size_t(n) * 33), yb(std::size_t(n) * 16);
    const MatMulOut outs[] = {{pa, ya.data(), 33}, {pb, yb.data(), 16}};
    MatMulMany(outs, acts, (*pool).get());
    // The scalar kernel, which the others equal bit for bit, takes the tiles one at a time.
    Force("scalar");
    EXPECT_EQ(ya, Run(a.m, x, n, nullptr)) << "n " << n;
    EXPECT_EQ(yb, Run(b.m, x, n, nullptr)) << "n " << n;
    unsetenv("CTXPAR_INT8_ISA");
  }
}

TEST_F(Int8MatMul, BestPathOfTheCpu) {
  const CpuFeatures& f = DetectCpuFeatures();
  const std::vector<std::string> isas = Isas();
  if (BestCpuIsa(f) >= CpuIsa::kAvx2) {
    EXPECT_NE(std::find(isas.begin(), isas.end(), "avx2"), isas.end());
  }
  // AVX-VNNI's kernel runs where the CPU has it, and (forced) with the EVEX encoding of its
  // instruction where AVX512-VNNI is.
  if (BestCpuIsa(f) >= CpuIsa::kAvx2 &&
      (f.avx_vnni || (BestCpuIsa(f) >= CpuIsa::kAvx512 && f.avx512_vnni))) {
    EXPECT_NE(std::find(isas.begin(), isas.end(), "avx_vnni"), isas.end());
  }
  if (BestCpuIsa(f) >= CpuIsa::kAvx512 && f.avx512_vnni) {
    EXPECT_NE(std::find(isas.begin(), isas.end(), "avx512_vnni"), isas.end());
  }
  if (BestCpuIsa(f) >= CpuIsa::kAvx512 && f.avx512_vnni && f.amx_tile && f.amx_int8) {
    EXPECT_EQ(isas.back(), "amx") << "Linux refused the AMX tile state";
    EXPECT_STREQ(MatMulInt8Isa(), "amx");
  }
}

// The activations' quantization (dx, xq, dx * sum(xq) and sum(xq) per 32-group and half) of every
// ISA equals the scalar code's bit for bit, on rows of 18 and 48 groups (the vector code takes 16
// groups at a time, then single ones) with a zero group, exact halves (ties to even) and wide
// magnitudes.
TEST_F(Int8MatMul, QuantizedActivationsEqualScalarBitwise) {
  for (int cols : {576, 1536}) {
    const int n = 3;
    std::mt19937 rng(cols);
    std::vector<float> x = Normal(std::size_t(n) * cols, rng);
    for (float& v : x) v *= 3.0f;
    std::fill(x.begin() + 64, x.begin() + 96, 0.0f);  // token 0, group 2: all zero
    for (int j = 0; j < 32; ++j) x[cols + 32 * 5 + j] = float(j % 2 == 0 ? 127 : j) - 0.5f;
    x[cols + 32 * 5] = 127.0f;  // token 1, group 5: dx = 1, every other value a tie
    for (int j = 0; j < 32; ++j) x[2 * cols + 32 * 17 + j] = std::ldexp(x[j + 100], -120);
    for (int j = 0; j < 32; ++j) x[2 * cols + j] *= 1e30f;
    auto quantized = [&](const std::string& isa) {
      Force(isa);
      Acts acts;
      PrepareActs(ActFormat::kInt8, WeightType::kQ8_0, x.data(), n, cols, cols, &acts, nullptr);
      return acts;
    };
    const Acts want = quantized("scalar");
    for (const std::string& isa : Isas()) {
      const Acts got = quantized(isa);
      const int groups = cols / 32;
      for (int t = 0; t < n; ++t) {
        EXPECT_EQ(0, std::memcmp(got.i8.data() + std::size_t(t) * cols,
                                 want.i8.data() + std::size_t(t) * cols, cols))
            << isa << " token " << t << " of " << cols;
        for (int g = 0; g < groups; ++g) {
          const std::size_t at = (std::size_t(t / 16) * groups + g) * 16 + t % 16;
          EXPECT_EQ(std::bit_cast<std::uint32_t>(got.i8_d[at]),
                    std::bit_cast<std::uint32_t>(want.i8_d[at]))
              << isa << " token " << t << " group " << g;
          EXPECT_EQ(std::bit_cast<std::uint32_t>(got.i8_xs[at]),
                    std::bit_cast<std::uint32_t>(want.i8_xs[at]))
              << isa << " token " << t << " group " << g;
          // The group's sum, then its halves'.
          for (int k = 0; k < 3; ++k) {
            const std::size_t where = (std::size_t(t / 16) * 3 * groups + 3 * g + k) * 16 + t % 16;
            const int first = k == 2 ? 16 : 0, count = k == 0 ? 32 : 16;
            int sum = 0;
            for (int j = first; j < first + count; ++j) {
              sum += want.i8[std::size_t(t) * cols + 32 * g + j];
            }
            EXPECT_EQ(want.i8_sums[where], sum) << "scalar token " << t << " group " << g;
            EXPECT_EQ(got.i8_sums[where], sum) << isa << " token " << t << " group " << g;
          }
        }
      }
    }
  }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))  // the x86 kernels' build
// AMX's widening of the nibble packs (Q4_1, Q4_K, and Q5_0 with its fifth bits) into the byte
// form's signed q equals the scalar kernel's reading of the pack, byte for byte, at both ends of
// each type's range and in between.
TEST_F(Int8MatMul, WidenedNibblesEqualScalarReading) {
  if (BestCpuIsa(DetectCpuFeatures()) < CpuIsa::kAvx512) GTEST_SKIP() << "no AVX-512 here";
  std::mt19937 rng(3);
  for (WeightType type : {WeightType::kQ4_1, WeightType::kQ4_K, WeightType::kQ5_0}) {
    Matrix m = RandomMatrix(type, 40, 256, rng);
    // Row 0's blocks at the top of the range (every bit set), the rest random.
    const std::size_t row0 = m.m.row_stride;
    const std::size_t quants = type == WeightType::kQ4_K   ? offsetof(BlockQ4K, qs)
                               : type == WeightType::kQ5_0 ? offsetof(BlockQ5_0, qh)
                                                           : offsetof(BlockQ4_1, qs);
    const std::size_t block = BlockBytes(type);
    for (std::size_t at = 0; at < row0; at += block) {
      std::fill(m.bytes.begin() + at + quants, m.bytes.begin() + at + block, 0xff);
    }
    const QuantMatrix packed = WithInt8Pack(m.m, ActFormat::kInt8);
    const Int8Pack& w = *packed.int8;
    ASSERT_TRUE(w.nibbles) << Name(type);
    LineVector<std::int8_t> out;
    int lowest = 127, highest = -128;
    for (int tile = 0; tile < w.tiles; ++tile) {
      const std::int8_t* wide = int8_internal::WidenNibbles(w, tile, 1, out);
      for (int s = 0; s < w.subs; ++s) {
        for (int k = 0; k < w.sub / 4; ++k) {
          for (int b = 0; b < 64; ++b) {
            const std::int8_t want = w.QAt(w.Q(tile, s), k, b);
            ASSERT_EQ(wide[std::size_t(s) * w.sub * 16 + k * 64 + b], want)
                << Name(type) << " tile " << tile << " s " << s << " line " << k << " byte " << b;
            lowest = std::min<int>(lowest, want);
            highest = std::max<int>(highest, want);
          }
        }
      }
    }
    EXPECT_EQ(highest, 15) << Name(type);
    EXPECT_EQ(lowest, type == WeightType::kQ5_0 ? -16 : 0) << Name(type);
  }
}
#endif

TEST_F(Int8MatMul, ForcedIsaChecked) {
  setenv("CTXPAR_INT8_ISA", "vnni2", 1);
  EXPECT_EQ(CheckInt8Isa().code(), StatusCode::kInvalidArgument);
  setenv("CTXPAR_INT8_ISA", "scalar", 1);
  EXPECT_TRUE(CheckInt8Isa().ok());
  EXPECT_STREQ(MatMulInt8Isa(), "scalar");
  unsetenv("CTXPAR_INT8_ISA");
  setenv("CTXPAR_CPU_ISA", "scalar", 1);
  EXPECT_STREQ(MatMulInt8Isa(), "scalar") << "CTXPAR_CPU_ISA lowers the int8 path";
  if (BestCpuIsa(DetectCpuFeatures()) >= CpuIsa::kAvx2) {
    setenv("CTXPAR_CPU_ISA", "avx2", 1);
    EXPECT_STREQ(MatMulInt8Isa(), DetectCpuFeatures().avx_vnni ? "avx_vnni" : "avx2")
        << "a 256-bit path: AVX-VNNI where the CPU has it";
  }
  unsetenv("CTXPAR_CPU_ISA");
}

}  // namespace
}  // namespace ctxpar::compute
