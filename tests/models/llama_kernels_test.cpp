// The Llama forward's kernels against float64 references: fp16 conversion, activation
// quantization (ggml's rule), the quantized matmul (dispatched SIMD and scalar), RMSNorm, RoPE
// and SwiGLU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "models/linear.h"
#include "models/llama_ops.h"

namespace ctxpar::model {
namespace {

TEST(Fp16, KnownValues) {
  EXPECT_EQ(Fp32ToFp16(1.0f), 0x3C00);
  EXPECT_EQ(Fp32ToFp16(-2.0f), 0xC000);
  EXPECT_EQ(Fp32ToFp16(65504.0f), 0x7BFF);
  EXPECT_EQ(Fp32ToFp16(65520.0f), 0x7C00);
  EXPECT_EQ(Fp32ToFp16(0.1f), 0x2E66);
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.0f, -26)), 0x0000);
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties go to the even mantissa.
  EXPECT_EQ(Fp32ToFp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(Fp32ToFp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(Fp16ToFp32(0x3555), 0.333251953125f);
  EXPECT_EQ(Fp16ToFp32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(Fp16ToFp32(0x8400), -std::ldexp(1.0f, -14));
}

TEST(Fp16, EveryFiniteHalfRoundTrips) {
  for (int h = 0; h < 0x10000; ++h) {
    if ((h & 0x7C00) == 0x7C00) continue;
    ASSERT_EQ(Fp32ToFp16(Fp16ToFp32(std::uint16_t(h))), h) << std::hex << h;
  }
}

TEST(QuantizeActs, FollowsGgmlQ8_1Rule) {
  std::vector<float> x(32, 0.0f);
  x[0] = 1.27f;
  x[1] = -0.635f;  // exactly -63.5 quanta: ties to even, -64
  x[2] = 0.004f;   // 0.4 quanta: 0
  x[31] = 0.5f;
  Acts q;
  PrepareActs(ActFormat::kQ8, WeightType::kQ4_1, x.data(), 1, 32, 32, &q);
  ASSERT_EQ(q.blocks.size(), 1u);
  const ActBlock& b = q.blocks[0];
  EXPECT_EQ(b.q[0], 127);
  EXPECT_EQ(b.q[2], 0);
  EXPECT_EQ(b.q[31], 50);
  EXPECT_EQ(b.d, Fp16ToFp32(Fp32ToFp16(0.01f)));
  int sum = 0;
  for (int j = 0; j < 32; ++j) sum += b.q[j];
  EXPECT_EQ(b.s, Fp16ToFp32(Fp32ToFp16(1.27f / 127.0f * float(sum))));
}

TEST(QuantizeActs, ZeroBlockHasZeroScale) {
  std::vector<float> x(64, 0.0f);
  Acts q;
  PrepareActs(ActFormat::kQ8, WeightType::kQ8_0, x.data(), 1, 64, 64, &q);
  for (const ActBlock& b : q.blocks) {
    EXPECT_EQ(b.d, 0.0f);
    for (int j = 0; j < 32; ++j) EXPECT_EQ(b.q[j], 0);
  }
}

struct RandomMatrix {
  std::vector<std::uint8_t> bytes;
  QuantMatrix m;
};

RandomMatrix MakeMatrix(WeightType type, int rows, int cols, std::mt19937& rng) {
  RandomMatrix r;
  const std::size_t row_bytes = cols / 32 * BlockBytes(type);
  r.bytes.resize(row_bytes * rows);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  for (int row = 0; row < rows; ++row) {
    for (int b = 0; b < cols / 32; ++b) {
      std::uint8_t* blk = r.bytes.data() + row * row_bytes + b * BlockBytes(type);
      const std::uint16_t d = Fp32ToFp16(scale(rng));
      std::memcpy(blk, &d, 2);
      std::size_t first = 2;
      if (type == WeightType::kQ4_1) {
        const std::uint16_t m = Fp32ToFp16(-8.0f * scale(rng));
        std::memcpy(blk + 2, &m, 2);
        first = 4;
      }
      for (std::size_t j = first; j < BlockBytes(type); ++j) {
        int v = byte(rng);
        if (type == WeightType::kQ8_0 && v == 128) v = 129;  // ggml's Q8_0 never holds -128
        blk[j] = std::uint8_t(v);
      }
    }
  }
  r.m = QuantMatrix{type, r.bytes.data(), rows, cols, row_bytes};
  return r;
}

// float64 y = x W^T, over the dequantized weights and (exact) dequantized activations.
std::vector<double> Reference(const QuantMatrix& w, const Acts& x, int col_begin) {
  std::vector<double> y(std::size_t(x.n) * w.rows);
  std::vector<float> wrow(w.cols);
  for (int r = 0; r < w.rows; ++r) {
    DequantizeRow(w, r, wrow.data());
    for (int t = 0; t < x.n; ++t) {
      double acc = 0.0;
      const ActBlock* xa = x.Row(t) + col_begin / 32;
      for (int c = 0; c < w.cols; ++c) {
        acc += double(wrow[c]) * double(xa[c / 32].d) * double(xa[c / 32].q[c % 32]);
      }
      if (w.type == WeightType::kQ4_1) {
        // Q4_1's offset term uses the stored s = fp16(d * sum q), as ggml does.
        acc = 0.0;
        for (int b = 0; b < w.cols / 32; ++b) {
          const std::uint8_t* blk = w.data + std::size_t(r) * w.row_stride + b * BlockBytes(w.type);
          std::uint16_t dh, mh;
          std::memcpy(&dh, blk, 2);
          std::memcpy(&mh, blk + 2, 2);
          double sumi = 0.0;
          for (int j = 0; j < 16; ++j) {
            sumi +=
                double(blk[4 + j] & 0xF) * xa[b].q[j] + double(blk[4 + j] >> 4) * xa[b].q[j + 16];
          }
          acc += double(Fp16ToFp32(dh)) * xa[b].d * sumi + double(Fp16ToFp32(mh)) * xa[b].s;
        }
      }
      y[std::size_t(t) * w.rows + r] = acc;
    }
  }
  return y;
}

void CheckMatMul(WeightType type, int rows, int cols, int n, int threads) {
  std::mt19937 rng(1234 + rows + cols + n);
  RandomMatrix w = MakeMatrix(type, rows, cols, rng);
  std::vector<float> x(std::size_t(n) * cols);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) v = normal(rng);
  Acts q;
  PrepareActs(ActFormat::kQ8, type, x.data(), n, cols, cols, &q);
  Expected<std::unique_ptr<ThreadPool>> pool = ThreadPool::Create(threads);
  ASSERT_TRUE(pool.ok()) << pool.status().message();
  std::vector<float> y(std::size_t(n) * rows);
  MatMul(w.m, q, 0, y.data(), rows, pool->get());
  const std::vector<double> ref = Reference(w.m, q, 0);
  double norm = 0.0;
  for (double v : ref) norm = std::max(norm, std::fabs(v));
  for (std::size_t i = 0; i < y.size(); ++i) {
    ASSERT_NEAR(y[i], ref[i], 1e-5 * norm + 1e-6) << MatMulIsa() << " element " << i;
    const int t = int(i) / rows, r = int(i) % rows;
    const float s =
        DotScalar(type, w.m.data + std::size_t(r) * w.m.row_stride, q.Row(t), cols / 32);
    ASSERT_NEAR(s, ref[i], 1e-5 * norm + 1e-6) << "scalar element " << i;
  }
}

// fp32 activations: y against the float64 product of the dequantized weights and x, for token
// counts on both sides of the switch to the widened-tile GEMM; the bits do not depend on the
// thread count, and the dispatched decode kernel equals the scalar one to rounding.
void CheckMatMulF32(WeightType type, int rows, int cols) {
  std::mt19937 rng(99 + rows + cols);
  RandomMatrix w = MakeMatrix(type, rows, cols, rng);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int max_n = 11;
  std::vector<float> x(std::size_t(max_n) * cols);
  for (float& v : x) v = normal(rng);
  std::vector<float> wrow(cols);
  std::vector<double> ref(std::size_t(max_n) * rows);
  for (int r = 0; r < rows; ++r) {
    DequantizeRow(w.m, r, wrow.data());
    for (int t = 0; t < max_n; ++t) {
      double acc = 0.0;
      for (int c = 0; c < cols; ++c) acc += double(wrow[c]) * x[std::size_t(t) * cols + c];
      ref[std::size_t(t) * rows + r] = acc;
    }
  }
  Expected<std::unique_ptr<ThreadPool>> one = ThreadPool::Create(1), three = ThreadPool::Create(3);
  ASSERT_TRUE(one.ok() && three.ok());
  for (int n : {1, 3, 4, 7, 8, 11}) {
    Acts a;
    PrepareActs(ActFormat::kF32, type, x.data(), n, cols, cols, &a);
    std::vector<float> y(std::size_t(n) * rows), y3(y.size());
    MatMul(w.m, a, 0, y.data(), rows, one->get());
    MatMul(w.m, a, 0, y3.data(), rows, three->get());
    EXPECT_EQ(y, y3) << "n " << n;
    for (int i = 0; i < n * rows; ++i) {
      ASSERT_NEAR(y[i], ref[i], 1e-4 * (1.0 + std::fabs(ref[i]))) << "n " << n << " i " << i;
      const int t = i / rows, r = i % rows;
      const float s = DotF32Scalar(type, w.m.data + std::size_t(r) * w.m.row_stride, a.F32Row(t),
                                   a.Sums(t), cols / 32);
      ASSERT_NEAR(s, ref[i], 1e-4 * (1.0 + std::fabs(ref[i])));
    }
  }
}

TEST(MatMulF32, Q4_1) { CheckMatMulF32(WeightType::kQ4_1, 50, 576); }
TEST(MatMulF32, Q8_0) { CheckMatMulF32(WeightType::kQ8_0, 33, 192); }

TEST(MatMul, Q4_1Gemv) { CheckMatMul(WeightType::kQ4_1, 100, 576, 1, 1); }
TEST(MatMul, Q4_1GemmThreads) { CheckMatMul(WeightType::kQ4_1, 37, 1536, 7, 3); }
TEST(MatMul, Q8_0Gemv) { CheckMatMul(WeightType::kQ8_0, 65, 576, 1, 2); }
TEST(MatMul, Q8_0Gemm) { CheckMatMul(WeightType::kQ8_0, 16, 64, 5, 1); }

// A row-sharded view (columns [64, 160)) over the same quantized activations equals the
// reference over that column range, and the full product is the sum of the shards'.
TEST(MatMul, ColumnRangeViews) {
  std::mt19937 rng(7);
  RandomMatrix w = MakeMatrix(WeightType::kQ4_1, 24, 192, rng);
  std::vector<float> x(2 * 192);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) v = normal(rng);
  Acts q;
  PrepareActs(ActFormat::kQ8, WeightType::kQ4_1, x.data(), 2, 192, 192, &q);
  const QuantMatrix view = w.m.ColRange(64, 96);
  std::vector<float> y(2 * 24);
  MatMul(view, q, 64, y.data(), 24, nullptr);
  const std::vector<double> ref = Reference(view, q, 64);
  for (std::size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], ref[i], 1e-4);
  const QuantMatrix rows = w.m.RowRange(8, 4);
  std::vector<float> yr(2 * 4);
  MatMul(rows, q, 0, yr.data(), 4, nullptr);
  const std::vector<double> full = Reference(w.m, q, 0);
  for (int t = 0; t < 2; ++t) {
    for (int r = 0; r < 4; ++r) EXPECT_NEAR(yr[t * 4 + r], full[t * 24 + 8 + r], 1e-4);
  }
}

TEST(RmsNorm, MatchesFloat64) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  const int n = 3, dim = 576;
  std::vector<float> x(n * dim), w(dim), y(n * dim);
  for (float& v : x) v = normal(rng);
  for (float& v : w) v = normal(rng);
  RmsNorm(x.data(), w.data(), n, dim, 1e-5f, y.data());
  for (int t = 0; t < n; ++t) {
    double ss = 0.0;
    for (int i = 0; i < dim; ++i) ss += double(x[t * dim + i]) * x[t * dim + i];
    const double inv = 1.0 / std::sqrt(ss / dim + 1e-5);
    for (int i = 0; i < dim; ++i) {
      const double ref = double(x[t * dim + i]) * inv * w[i];
      EXPECT_NEAR(y[t * dim + i], ref, 1e-5 * (1.0 + std::fabs(ref)));
    }
  }
}

TEST(RopeNormal, RotatesAdjacentPairsByPositionalAngle) {
  const int heads = 2, dim = 64, rope = 64;
  const float base = 100000.0f;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int pos : {0, 1, 17, 300}) {
    std::vector<float> x(heads * dim);
    for (float& v : x) v = normal(rng);
    std::vector<float> y = x;
    RopeNormal(y.data(), heads, dim, rope, base, pos);
    for (int h = 0; h < heads; ++h) {
      for (int i = 0; i < rope / 2; ++i) {
        const double theta = pos * std::pow(double(base), -2.0 * i / rope);
        const double x0 = x[h * dim + 2 * i], x1 = x[h * dim + 2 * i + 1];
        EXPECT_NEAR(y[h * dim + 2 * i], x0 * std::cos(theta) - x1 * std::sin(theta), 2e-4);
        EXPECT_NEAR(y[h * dim + 2 * i + 1], x0 * std::sin(theta) + x1 * std::cos(theta), 2e-4);
      }
    }
  }
}

TEST(RopeNormal, LeavesDimsBeyondRopeDimsAlone) {
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) x[i] = float(i + 1);
  std::vector<float> y = x;
  RopeNormal(y.data(), 1, 64, 32, 10000.0f, 9);
  for (int i = 32; i < 64; ++i) EXPECT_EQ(y[i], x[i]);
}

TEST(SwiGlu, MatchesFloat64) {
  const std::vector<float> g = {-20.0f, -1.5f, 0.0f, 0.3f, 4.0f, 30.0f};
  const std::vector<float> u = {2.0f, -1.0f, 5.0f, 1.5f, -0.25f, 0.5f};
  std::vector<float> out(g.size());
  SwiGlu(g.data(), u.data(), int(g.size()), out.data());
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double ref = double(g[i]) / (1.0 + std::exp(-double(g[i]))) * u[i];
    EXPECT_NEAR(out[i], ref, 1e-6 * (1.0 + std::fabs(ref)));
  }
}

}  // namespace
}  // namespace ctxpar::model
