// The CPU implementation of the compute seam: each operation on strided views, split over a pool,
// against a float64 reference within its bound, and bitwise equal to the same operation on one
// thread and to its rows computed one at a time (what batch invariance needs of the seam).
#include "compute/cpu_compute.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "ctxpar/quant.h"

namespace ctxpar::compute {
namespace {

constexpr int kRows = 41;  // above the pool's split threshold, not a multiple of its chunks
constexpr int kCols = 96;
constexpr int kLd = 101;  // rows apart in memory: strided views

std::vector<float> Random(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

class CpuComputeTest : public testing::Test {
 protected:
  void SetUp() override {
    auto pool = ThreadPool::Create(2);
    ASSERT_TRUE(pool.ok());
    pool_ = std::move(*pool);
  }
  std::unique_ptr<ThreadPool> pool_;
};

TEST_F(CpuComputeTest, RmsNormOfStridedRowsIsFloat64sAndTheSameBitsAloneAndSplit) {
  const std::vector<float> x = Random(std::size_t(kRows) * kLd, 1), w = Random(kCols, 2);
  std::vector<float> split(x.size(), -7.0f), alone(x.size(), -7.0f);
  CpuCompute threads(pool_.get(), ActFormat::kF32), one(nullptr, ActFormat::kF32);
  threads.RmsNorm(F32(x.data(), kRows, kCols, kLd), w.data(), 1e-6f,
                  F32(split.data(), kRows, kCols, kLd));
  for (int r = 0; r < kRows; ++r) {
    one.RmsNorm(F32(x.data() + r * kLd, 1, kCols), w.data(), 1e-6f,
                F32(alone.data() + r * kLd, 1, kCols));
    double ss = 0.0;
    for (int c = 0; c < kCols; ++c) ss += double(x[r * kLd + c]) * x[r * kLd + c];
    const double scale = 1.0 / std::sqrt(ss / kCols + 1e-6);
    for (int c = 0; c < kCols; ++c) {
      const std::size_t i = std::size_t(r) * kLd + c;
      ASSERT_EQ(split[i], alone[i]) << r << "," << c;
      EXPECT_NEAR(split[i], double(x[i]) * scale * w[c], 4e-7 * std::fabs(x[i] * scale * w[c]));
    }
    // Nothing written between the rows.
    for (int c = kCols; c < kLd && r + 1 < kRows; ++c) ASSERT_EQ(split[r * kLd + c], -7.0f);
  }
}

TEST_F(CpuComputeTest, AddRmsNormAddsTheNormOfEachRow) {
  const std::vector<float> y = Random(std::size_t(kRows) * kCols, 3), w = Random(kCols, 4);
  std::vector<float> x = Random(y.size(), 5);
  const std::vector<float> x0 = x;
  CpuCompute(pool_.get(), ActFormat::kF32)
      .AddRmsNorm(F32(y.data(), kRows, kCols), w.data(), 1e-5f, F32(x.data(), kRows, kCols));
  std::vector<float> normed(kCols);
  for (int r = 0; r < kRows; ++r) {
    RmsNorm(y.data() + r * kCols, w.data(), 1, kCols, 1e-5f, normed.data());
    for (int c = 0; c < kCols; ++c) {
      ASSERT_EQ(x[r * kCols + c], x0[r * kCols + c] + normed[c]);
    }
  }
}

TEST_F(CpuComputeTest, SumsOfSquaresAreFloat64sPerGroup) {
  const int group = 32, groups = kCols / group;
  const std::vector<float> x = Random(std::size_t(kRows) * kLd, 6);
  std::vector<double> out(std::size_t(kRows) * (groups + 1), -1.0);
  CpuCompute(pool_.get(), ActFormat::kF32)
      .SumsOfSquares(F32(x.data(), kRows, kCols, kLd), group, out.data(), groups + 1);
  for (int r = 0; r < kRows; ++r) {
    for (int g = 0; g < groups; ++g) {
      double want = 0.0;
      for (int c = 0; c < group; ++c)
        want += double(x[r * kLd + g * group + c]) * x[r * kLd + g * group + c];
      EXPECT_NEAR(out[r * (groups + 1) + g], want, 1e-12 * want);
    }
    EXPECT_EQ(out[r * (groups + 1) + groups], -1.0);
  }
}

TEST_F(CpuComputeTest, ScaleRowsAddBiasAndAddAreTheirFormulas) {
  const std::vector<float> s = Random(kRows, 7), w = Random(kCols, 8), b = Random(kCols, 9);
  const std::vector<float> x0 = Random(std::size_t(kRows) * kLd, 10), y = Random(x0.size(), 11);
  std::vector<float> scaled = x0, weighted = x0, biased = x0, added = x0;
  CpuCompute c(pool_.get(), ActFormat::kF32);
  c.ScaleRows(F32(scaled.data(), kRows, kCols, kLd), s.data(), nullptr);
  c.ScaleRows(F32(weighted.data(), kRows, kCols, kLd), s.data(), w.data());
  c.AddBias(F32(biased.data(), kRows, kCols, kLd), b.data());
  c.Add(F32(added.data(), kRows, kCols, kLd), F32(y.data(), kRows, kCols, kLd));
  for (int r = 0; r < kRows; ++r) {
    for (int col = 0; col < kLd; ++col) {
      const std::size_t i = std::size_t(r) * kLd + col;
      const bool in = col < kCols;
      ASSERT_EQ(scaled[i], in ? x0[i] * s[r] : x0[i]);
      ASSERT_EQ(weighted[i], in ? x0[i] * s[r] * w[col] : x0[i]);
      ASSERT_EQ(biased[i], in ? x0[i] + b[col] : x0[i]);
      ASSERT_EQ(added[i], in ? x0[i] + y[i] : x0[i]);
    }
  }
}

TEST_F(CpuComputeTest, RopeRotatesEveryTargetByItsRowsPosition) {
  const int heads_q = 3, heads_k = 1, hd = 32;
  const RopeAngles angles = RopeAngles::Ggml(hd, 10000.0f);
  std::vector<int> positions(kRows);
  for (int r = 0; r < kRows; ++r) positions[r] = 7 * r + 3;
  std::vector<float> q = Random(std::size_t(kRows) * heads_q * hd, 12),
                     k = Random(std::size_t(kRows) * heads_k * hd, 13);
  const std::vector<float> q0 = q, k0 = k;
  const RopeTarget targets[] = {{F32(q.data(), kRows, heads_q * hd), heads_q, hd},
                                {F32(k.data(), kRows, heads_k * hd), heads_k, hd}};
  CpuCompute(pool_.get(), ActFormat::kF32).Rope(RopeStyle::kNeox, angles, positions, targets);
  for (int r = 0; r < kRows; ++r) {
    for (int h = 0; h < heads_q; ++h) {
      for (int i = 0; i < hd / 2; ++i) {
        // float64 angle of pair (i, i + hd/2): pos * base^(-2i/hd).
        const double a = positions[r] * std::pow(10000.0, -2.0 * i / hd);
        const float* x = q0.data() + (std::size_t(r) * heads_q + h) * hd;
        const float* got = q.data() + (std::size_t(r) * heads_q + h) * hd;
        const double x0 = x[i], x1 = x[i + hd / 2];
        const double tol = 2e-4 * (std::fabs(x0) + std::fabs(x1)) + 1e-6;
        EXPECT_NEAR(got[i], x0 * std::cos(a) - x1 * std::sin(a), tol) << r << "," << h << "," << i;
        EXPECT_NEAR(got[i + hd / 2], x0 * std::sin(a) + x1 * std::cos(a), tol);
      }
    }
    // The key row: the same bits as the kernel on that row alone.
    std::vector<float> alone(k0.begin() + std::size_t(r) * hd,
                             k0.begin() + std::size_t(r + 1) * hd);
    Rope(RopeStyle::kNeox, alone.data(), 1, hd, angles, positions[r]);
    for (int d = 0; d < hd; ++d) ASSERT_EQ(k[std::size_t(r) * hd + d], alone[d]);
  }
}

TEST_F(CpuComputeTest, GatedOfStridedRowsIsSwiGlu) {
  const std::vector<float> gate = Random(std::size_t(kRows) * kLd, 14),
                           up = Random(gate.size(), 15);
  std::vector<float> out(gate.size(), -3.0f);
  CpuCompute(pool_.get(), ActFormat::kF32)
      .Gated(GatedActivation::kSwiGlu, F32(gate.data(), kRows, kCols, kLd),
             F32(up.data(), kRows, kCols, kLd), F32(out.data(), kRows, kCols, kLd));
  for (int r = 0; r < kRows; ++r) {
    for (int c = 0; c < kLd; ++c) {
      const std::size_t i = std::size_t(r) * kLd + c;
      if (c >= kCols) {
        ASSERT_EQ(out[i], -3.0f);
        continue;
      }
      const double g = gate[i], want = g / (1.0 + std::exp(-g)) * up[i];
      EXPECT_NEAR(out[i], want, 1e-6 * std::fabs(want) + 1e-7);
    }
  }
}

TEST_F(CpuComputeTest, MatMulOfOneActivationFeedsEveryOutput) {
  // Two Q8_0 products and one F32 product of the same x: the seam prepares x once per format.
  const int n = 5, cols = 64, rows = 7;
  const std::vector<float> x = Random(std::size_t(n) * cols, 16), wf = Random(rows * cols, 17);
  std::vector<BlockQ8_0> blocks(std::size_t(rows) * cols / 32);
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    blocks[b].d = Fp32ToFp16(0.01f * (b + 1));
    for (int i = 0; i < 32; ++i)
      blocks[b].qs[i] = static_cast<std::int8_t>((b * 7 + i * 13) % 255 - 127);
  }
  const QuantMatrix q8{.type = WeightType::kQ8_0,
                       .data = reinterpret_cast<const std::uint8_t*>(blocks.data()),
                       .rows = rows,
                       .cols = cols,
                       .row_stride = cols / 32 * sizeof(BlockQ8_0)};
  const QuantMatrix f32{.type = WeightType::kF32,
                        .data = reinterpret_cast<const std::uint8_t*>(wf.data()),
                        .rows = rows,
                        .cols = cols,
                        .row_stride = cols * sizeof(float)};
  std::vector<float> a(n * rows), b(n * rows), c(n * rows);
  const MatMulOut outs[] = {{q8, a.data(), rows}, {q8, b.data(), rows}, {f32, c.data(), rows}};
  CpuCompute(pool_.get(), ActFormat::kF32).MatMul(outs, F32(x.data(), n, cols));
  std::vector<float> w(cols);
  for (int t = 0; t < n; ++t) {
    for (int r = 0; r < rows; ++r) {
      DequantizeRow(q8, r, w.data());
      double want = 0.0, mag = 0.0, want_f = 0.0;
      for (int k = 0; k < cols; ++k) {
        want += double(w[k]) * x[t * cols + k];
        want_f += double(wf[r * cols + k]) * x[t * cols + k];
        mag += std::fabs(double(w[k]) * x[t * cols + k]);
      }
      EXPECT_NEAR(a[t * rows + r], want, 1e-6 * mag);
      ASSERT_EQ(a[t * rows + r], b[t * rows + r]);
      EXPECT_NEAR(c[t * rows + r], want_f, 1e-5);
    }
  }
}

}  // namespace
}  // namespace ctxpar::compute
