// The elementwise kernels against float64 references: fp16 conversion, activation
// quantization (ggml's rule), RMSNorm, RoPE and SwiGLU (the matmul: linear_test.cpp).
#include "compute/elementwise.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "compute/linear.h"
#include "ctxpar/cpu_features.h"

namespace ctxpar::compute {
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

// The mean of squares is summed by elementwise.h's fixed sequence (element i into partial sum
// i % 16, the sums added pairwise), whatever the ISA: the output's bits are those of that
// sequence written out here, for rows with and without a remainder past the last 16.
TEST(RmsNorm, BitsFollowTheFixedSequence) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int dim : {7, 16, 100, 256, 576, 640, 2049}) {
    const int n = 5;
    std::vector<float> x(n * dim), w(dim), y(n * dim);
    for (float& v : x) v = normal(rng);
    for (float& v : w) v = normal(rng);
    RmsNorm(x.data(), w.data(), n, dim, 1e-6f, y.data());
    for (int t = 0; t < n; ++t) {
      double s[16] = {};
      for (int i = 0; i < dim; ++i) s[i % 16] += double(x[t * dim + i]) * x[t * dim + i];
      for (int width = 8; width > 0; width /= 2) {
        for (int j = 0; j < width; ++j) s[j] += s[j + width];
      }
      const float scale = 1.0f / std::sqrt(float(s[0] / dim) + 1e-6f);
      for (int i = 0; i < dim; ++i) {
        ASSERT_EQ(y[t * dim + i], x[t * dim + i] * scale * w[i]) << dim << " " << t << " " << i;
      }
    }
  }
}

TEST(GeGlu, MatchesFloat64TanhApproximation) {
  const std::vector<float> g = {-20.0f, -3.0f, -0.7f, 0.0f, 0.3f, 1.0f, 4.0f, 30.0f};
  const std::vector<float> u = {2.0f, -1.0f, 5.0f, 1.5f, -0.25f, 0.5f, 3.0f, -2.0f};
  std::vector<float> out(g.size());
  GeGlu(g.data(), u.data(), int(g.size()), out.data());
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double x = g[i];
    const double gelu =
        0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    const double ref = gelu * u[i];
    EXPECT_NEAR(out[i], ref, 2e-6 * (1.0 + std::fabs(ref))) << "gate " << g[i];
  }
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

// gpt-oss's clamped SwiGLU against HF GptOssExperts._apply_gate in float64: the gate capped at 7
// from above only, up clamped to [-7, 7], alpha 1.702 in the sigmoid, up + 1. Gates and ups on
// both sides of the limits (the tiny golden's stay inside them).
TEST(SwiGluOai, MatchesFloat64WithItsClampsAndAlpha) {
  const std::vector<float> g = {-30.0f, -7.5f, -1.5f, 0.0f, 0.3f, 6.99f, 7.0f, 9.0f, 40.0f};
  const std::vector<float> u = {2.0f, -9.0f, 5.0f, 1.5f, -0.25f, 8.0f, -7.0f, 0.5f, -40.0f};
  std::vector<float> out(g.size());
  SwiGluOai(g.data(), u.data(), int(g.size()), out.data());
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double gate = std::min(double(g[i]), 7.0);
    const double up = std::clamp(double(u[i]), -7.0, 7.0);
    const double ref = gate / (1.0 + std::exp(-1.702 * gate)) * (up + 1.0);
    EXPECT_NEAR(out[i], ref, 1e-6 * (1.0 + std::fabs(ref))) << "gate " << g[i] << " up " << u[i];
  }
  // Gated() dispatches to the same function.
  std::vector<float> via(g.size());
  Gated(GatedActivation::kSwiGluOai, g.data(), u.data(), int(g.size()), via.data());
  EXPECT_EQ(std::memcmp(via.data(), out.data(), out.size() * sizeof(float)), 0);
}

// The gated activations' paths this CPU has: its best, and AVX2 below AVX-512 (CTXPAR_CPU_ISA
// lowers the path per call).
class GatedIsa : public testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (*GetParam() == '\0') {
      unsetenv("CTXPAR_CPU_ISA");
      return;
    }
    setenv("CTXPAR_CPU_ISA", GetParam(), 1);
    if (!SelectCpuIsa().ok()) GTEST_SKIP() << GetParam() << " is above this CPU";
  }
  void TearDown() override { unsetenv("CTXPAR_CPU_ISA"); }
};
INSTANTIATE_TEST_SUITE_P(Paths, GatedIsa, testing::Values("", "avx2"),
                         [](const auto& info) { return *info.param ? info.param : "best"; });

// SwiGlu's vector path computes expf as glibc does on an FMA CPU; the scalar formula with
// std::exp is the reference, bit for bit: first on values at the edges of glibc's fast range and
// beyond it (lanes that fall back to the scalar path), then over every 61st float (both signs,
// every exponent, NaNs) at every offset of an 8- and 16-lane group.
int CountSwiGluMismatches(const std::vector<float>& g) {
  const int n = static_cast<int>(g.size());
  std::vector<float> u(n), out(n);
  for (int i = 0; i < n; ++i) u[i] = 1.0f + float(i % 7) / 8.0f;
  SwiGlu(g.data(), u.data(), n, out.data());
  int mismatches = 0;
  for (int i = 0; i < n; ++i) {
    const float ref = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    if (std::memcmp(&ref, &out[i], sizeof ref) != 0 && ++mismatches <= 5) {
      ADD_FAILURE() << "gate " << g[i] << ": " << out[i] << " against " << ref;
    }
  }
  return mismatches;
}

TEST_P(GatedIsa, SwiGluEqualsTheScalarExpBitForBit) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> edges = {0.0f,
                              -0.0f,
                              inf,
                              -inf,
                              88.0f,
                              -88.0f,
                              87.9999f,
                              -87.9999f,
                              88.7229f,
                              -88.7229f,
                              103.97f,
                              -103.97f,
                              1e-45f,
                              -1e-45f,
                              1e-38f,
                              -1e-38f,
                              0.5f,
                              -0.5f,
                              std::numeric_limits<float>::quiet_NaN()};
  for (const float x : std::vector<float>(edges)) {
    for (const float y : {std::nextafter(x, inf), std::nextafter(x, -inf)}) edges.push_back(y);
  }
  EXPECT_EQ(CountSwiGluMismatches(edges), 0);

  constexpr int kChunk = 4099;  // odd, so each value class lands in every lane of a group
  std::int64_t mismatches = 0;
  for (std::uint64_t bits = 0; bits <= 0xffffffffu;) {
    std::vector<float> g;
    for (; g.size() < kChunk && bits <= 0xffffffffu; bits += 61) {
      const auto b = static_cast<std::uint32_t>(bits);
      g.push_back(std::bit_cast<float>(b));
    }
    mismatches += CountSwiGluMismatches(g);
  }
  EXPECT_EQ(mismatches, 0);
}

// GeGlu's vector path against its scalar formula with std::exp, bit for bit, over every 61st
// float (the cube overflows, the exponential under- and overflows, NaNs).
TEST_P(GatedIsa, GeGluEqualsTheScalarExpBitForBit) {
  constexpr int kChunk = 4099;
  std::int64_t mismatches = 0;
  for (std::uint64_t bits = 0; bits <= 0xffffffffu;) {
    std::vector<float> g;
    for (; g.size() < kChunk && bits <= 0xffffffffu; bits += 61) {
      g.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(bits)));
    }
    const int n = static_cast<int>(g.size());
    std::vector<float> u(n), out(n);
    for (int i = 0; i < n; ++i) u[i] = 1.0f + float(i % 7) / 8.0f;
    GeGlu(g.data(), u.data(), n, out.data());
    for (int i = 0; i < n; ++i) {
      const float x = g[i];
      const volatile float cube = 0.044715f * x * x * x;
      const float arg = -2.0f * (0.7978845608028654f * (x + cube));
      const float ref = x / (1.0f + std::exp(arg)) * u[i];
      if (std::memcmp(&ref, &out[i], sizeof ref) != 0 && ++mismatches <= 5) {
        ADD_FAILURE() << "gate " << x << ": " << out[i] << " against " << ref;
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

}  // namespace
}  // namespace ctxpar::compute
