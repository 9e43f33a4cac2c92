// RoPE (layers/elementwise.h): both angle conventions and the rotation in both pair styles,
// against float64 references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "compute/elementwise.h"

namespace ctxpar::compute {
namespace {

constexpr double kFloatEps = 1.0 / (1 << 24);  // half an ulp of 1, relative

// The nominal angle of pair i: pos * base^(-2i / rope_dims).
double Angle(int64_t pos, double base, int i, int rope_dims) {
  return double(pos) * std::pow(base, -2.0 * i / rope_dims);
}

// x rounded to nearest even with `bits` significant bits (bf16: 8, f16: 11; normal range only).
double RoundToBits(double x, int bits) {
  int e = 0;
  const double m = std::frexp(x, &e);
  return std::ldexp(std::nearbyint(std::ldexp(m, bits)), e - bits);
}

std::vector<float> CosSin(const RopeAngles& a, int64_t pos) {
  std::vector<float> cs(a.rope_dims());
  a.CosSin(pos, cs.data());
  return cs;
}

// ggml's recurrence multiplies i times in float: each product rounds by half an ulp and repeats
// the factor's error (powf, within an ulp), so angle i is off by under 3 (i + 1) half ulps of
// itself; cos and sin add an ulp.
TEST(RopeAngles, GgmlRecurrenceMatchesFloat64) {
  struct Case {
    int rope_dims;
    float base;
  };
  for (const Case c : {Case{64, 1e4f}, Case{32, 1e5f}, Case{256, 1e6f}}) {
    const RopeAngles a = RopeAngles::Ggml(c.rope_dims, c.base);
    ASSERT_EQ(a.rope_dims(), c.rope_dims);
    for (int64_t pos : {0, 1, 17, 300, 4095, 32767}) {
      const std::vector<float> cs = CosSin(a, pos);
      for (int i = 0; i < c.rope_dims / 2; ++i) {
        const double angle = Angle(pos, c.base, i, c.rope_dims);
        const double tol = 3.0 * (i + 1) * kFloatEps * angle + 1.2e-7;
        EXPECT_NEAR(cs[2 * i], std::cos(angle), tol) << c.rope_dims << " " << pos << " " << i;
        EXPECT_NEAR(cs[2 * i + 1], std::sin(angle), tol) << c.rope_dims << " " << pos << " " << i;
      }
    }
  }
}

// With frequency divisors (Llama 3's rope_freqs, LongRoPE's tables) and LongRoPE's attn_factor,
// which multiplies cos and sin: angle i is theta_i / factor_i (one more rounding).
TEST(RopeAngles, GgmlFactorsAndAttnFactorMatchFloat64) {
  const int dims = 32;
  const double base = 1e4, attn = 1.2909944487358056;
  std::vector<float> factors;
  for (int i = 0; i < dims / 2; ++i) factors.push_back(1.0f + 0.5f * float(i));
  const RopeAngles a =
      RopeAngles::Ggml(dims, float(base), {.freq_factors = factors, .attn_factor = float(attn)});
  for (int64_t pos : {0, 1, 63, 64, 700, 4095}) {
    const std::vector<float> cs = CosSin(a, pos);
    for (int i = 0; i < dims / 2; ++i) {
      const double angle = Angle(pos, base, i, dims) / factors[i];
      const double tol = attn * (3.0 * (i + 2) * kFloatEps * angle + 2.4e-7);
      EXPECT_NEAR(cs[2 * i], attn * std::cos(angle), tol) << pos << " " << i;
      EXPECT_NEAR(cs[2 * i + 1], attn * std::sin(angle), tol) << pos << " " << i;
    }
  }
}

// YaRN as transformers defines it (_compute_yarn_parameters): pair i's frequency mixes the
// interpolated base^(-2i/d) / factor and the extrapolated base^(-2i/d) by a ramp over the
// correction dims [floor(c(beta_fast)), ceil(c(beta_slow))], c(b) = d ln(n_orig / (2 pi b)) /
// (2 ln base), or [c(beta_fast), c(beta_slow)] itself with "truncate": false (gpt-oss); cos and
// sin scale by 1 + 0.1 ln factor.
void ExpectYarnMatchesFloat64(bool truncate) {
  const int dims = 64;
  const double base = 1e4, factor = 4.0;
  const int orig = 256;
  const RopeAngles a = RopeAngles::Ggml(dims, float(base),
                                        {.freq_scale = float(1.0 / factor),
                                         .ext_factor = 1.0f,
                                         .orig_ctx = orig,
                                         .truncate = truncate});
  auto corr = [&](double beta) {
    return dims * std::log(orig / (2.0 * M_PI * beta)) / (2.0 * std::log(base));
  };
  const double low = std::max(0.0, truncate ? std::floor(corr(32.0)) : corr(32.0));
  const double high = std::min(dims - 1.0, truncate ? std::ceil(corr(1.0)) : corr(1.0));
  const double mscale = 1.0 + 0.1 * std::log(factor);
  for (int64_t pos : {0, 1, 100, 700, 4095}) {
    const std::vector<float> cs = CosSin(a, pos);
    for (int i = 0; i < dims / 2; ++i) {
      const double extrapolated = Angle(pos, base, i, dims);
      const double keep = 1.0 - std::clamp((i - low) / std::max(0.001, high - low), 0.0, 1.0);
      const double angle = extrapolated / factor * (1.0 - keep) + extrapolated * keep;
      const double tol = mscale * (3.0 * (i + 3) * kFloatEps * extrapolated + 3.6e-7);
      EXPECT_NEAR(cs[2 * i], mscale * std::cos(angle), tol) << pos << " " << i;
      EXPECT_NEAR(cs[2 * i + 1], mscale * std::sin(angle), tol) << pos << " " << i;
    }
  }
}

TEST(RopeAngles, GgmlYarnMatchesFloat64) { ExpectYarnMatchesFloat64(/*truncate=*/true); }

TEST(RopeAngles, GgmlYarnWithAnExactRangeMatchesFloat64) {
  ExpectYarnMatchesFloat64(/*truncate=*/false);
}

TEST(RopeAngles, HfTableMatchesFloat64) {
  const int rope_dims = 64;
  const float base = 1e4f;
  const RopeAngles a = RopeAngles::HfTable(rope_dims, base, DataType::kF32);
  for (int64_t pos : {0, 1, 17, 300, 4095, 32767}) {
    const std::vector<float> cs = CosSin(a, pos);
    for (int i = 0; i < rope_dims / 2; ++i) {
      const double angle = Angle(pos, base, i, rope_dims);
      const double tol = 6.0 * kFloatEps * angle + 1.2e-7;
      EXPECT_NEAR(cs[2 * i], std::cos(angle), tol) << pos << " " << i;
      EXPECT_NEAR(cs[2 * i + 1], std::sin(angle), tol) << pos << " " << i;
    }
  }
}

// DeepSeek-V3's YaRN (factor 40 over 4096 positions, 64 rope dims): the frequencies equal
// transformers' _compute_yarn_parameters (5.25, float32, printed to 9 digits), and cos / sin
// follow from them at position 1 (attention_factor 1, as mscale equals mscale_all_dim).
TEST(RopeAngles, HfYarnTableIsTransformers) {
  const float want[32] = {1.0f,
                          0.749894202f,
                          0.562341332f,
                          0.421696514f,
                          0.316227764f,
                          0.237137362f,
                          0.177827939f,
                          0.133352146f,
                          0.100000001f,
                          0.0749894157f,
                          0.0562341288f,
                          0.0390069261f,
                          0.0268793609f,
                          0.0183781441f,
                          0.012447956f,
                          0.0083345091f,
                          0.00550000044f,
                          0.00356199732f,
                          0.00224936521f,
                          0.00137051346f,
                          0.000790569407f,
                          0.000414990413f,
                          0.00017782794f,
                          3.3338034e-05f,
                          2.49999994e-05f,
                          1.87473543e-05f,
                          1.40585325e-05f,
                          1.05424124e-05f,
                          7.90569447e-06f,
                          5.92843435e-06f,
                          4.44569832e-06f,
                          3.33380353e-06f};
  const compute::HfYarn yarn{.factor = 40.0, .original_context = 4096};
  const RopeAngles a = RopeAngles::HfTable(64, 1e4f, DataType::kF32, yarn);
  const std::vector<float> cs = CosSin(a, 1);
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(cs[2 * i], std::cos(want[i])) << i;
    EXPECT_EQ(cs[2 * i + 1], std::sin(want[i])) << i;
  }
  // attention_factor scales cos and sin.
  const RopeAngles scaled =
      RopeAngles::HfTable(64, 1e4f, DataType::kF32,
                          {.factor = 40.0, .original_context = 4096, .attention_factor = 2.0});
  EXPECT_EQ(CosSin(scaled, 1)[1], 2.0f * std::sin(want[0]));
}

// With a bf16 or f16 checkpoint the frequencies are rounded to its dtype (transformers' buffer):
// the reference rounds the float64 frequencies the same way, and the rounding is large enough
// that the unrounded angles are far off at long positions.
TEST(RopeAngles, HfTableRoundsFrequenciesToTheCheckpointDtype) {
  const int rope_dims = 64;
  const float base = 1e4f;  // every frequency in f16's normal range
  for (auto [dtype, bits] : {std::pair{DataType::kBF16, 8}, std::pair{DataType::kF16, 11}}) {
    const RopeAngles a = RopeAngles::HfTable(rope_dims, base, dtype);
    double most_off = 0.0;
    for (int64_t pos : {1, 300, 4095, 32767}) {
      const std::vector<float> cs = CosSin(a, pos);
      for (int i = 0; i < rope_dims / 2; ++i) {
        const double inv_freq = RoundToBits(std::pow(double(base), -2.0 * i / rope_dims), bits);
        const double angle = double(pos) * inv_freq;
        const double tol = 2.0 * kFloatEps * angle + 1.2e-7;
        EXPECT_NEAR(cs[2 * i], std::cos(angle), tol) << bits << " " << pos << " " << i;
        EXPECT_NEAR(cs[2 * i + 1], std::sin(angle), tol) << bits << " " << pos << " " << i;
        most_off =
            std::max(most_off, std::fabs(cs[2 * i + 1] - std::sin(Angle(pos, base, i, rope_dims))));
      }
    }
    EXPECT_GT(most_off, 0.1) << bits;
  }
}

// The rotation alone, for both pair styles, against float64 with the angles' own cos and sin:
// each output is a float difference of two float products, within 2 ulps of |x0| + |x1|. Heads
// lie head_stride apart past a prefix that is not rotated (DeepSeek's [q_nope | q_pe]); the
// dims around the rotated ones keep their bits.
TEST(Rope, RotatesBothPairStylesByTheAngles) {
  const int heads = 3, offset = 16, rope_dims = 64, head_stride = 96;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const RopeAngles angles[] = {RopeAngles::Ggml(rope_dims, 1e4f),
                               RopeAngles::HfTable(rope_dims, 1e4f, DataType::kBF16)};
  for (const RopeAngles& a : angles) {
    for (RopeStyle style : {RopeStyle::kNormal, RopeStyle::kNeox}) {
      for (int64_t pos : {0, 1, 300, 32767}) {
        std::vector<float> x(heads * head_stride);
        for (float& v : x) v = normal(rng);
        std::vector<float> y = x;
        Rope(style, y.data() + offset, heads, head_stride, a, pos);
        const std::vector<float> cs = CosSin(a, pos);
        std::vector<bool> rotated(x.size(), false);
        for (int h = 0; h < heads; ++h) {
          for (int i = 0; i < rope_dims / 2; ++i) {
            const int base = offset + h * head_stride;
            const int j0 = style == RopeStyle::kNormal ? base + 2 * i : base + i;
            const int j1 = style == RopeStyle::kNormal ? j0 + 1 : j0 + rope_dims / 2;
            rotated[j0] = rotated[j1] = true;
            const double c = cs[2 * i], s = cs[2 * i + 1], x0 = x[j0], x1 = x[j1];
            const double tol = 4.0 * kFloatEps * (std::fabs(x0) + std::fabs(x1));
            EXPECT_NEAR(y[j0], x0 * c - x1 * s, tol) << pos << " " << h << " " << i;
            EXPECT_NEAR(y[j1], x0 * s + x1 * c, tol) << pos << " " << h << " " << i;
          }
        }
        for (std::size_t j = 0; j < x.size(); ++j) {
          if (!rotated[j]) EXPECT_EQ(y[j], x[j]) << j;
        }
      }
    }
  }
}

// End to end against float64 angles, as llama.cpp's and HF's rotations define it.
TEST(Rope, MatchesFloat64RotationForBothStyles) {
  const int heads = 2, dim = 128;
  std::mt19937 rng(6);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (RopeStyle style : {RopeStyle::kNormal, RopeStyle::kNeox}) {
    for (float base : {1e4f, 1e6f}) {
      const RopeAngles a = RopeAngles::Ggml(dim, base);
      for (int64_t pos : {0, 1, 511, 700}) {
        std::vector<float> x(heads * dim);
        for (float& v : x) v = normal(rng);
        std::vector<float> y = x;
        Rope(style, y.data(), heads, dim, a, pos);
        for (int h = 0; h < heads; ++h) {
          for (int i = 0; i < dim / 2; ++i) {
            const double theta = Angle(pos, base, i, dim);
            const int j0 = h * dim + (style == RopeStyle::kNormal ? 2 * i : i);
            const int j1 = style == RopeStyle::kNormal ? j0 + 1 : j0 + dim / 2;
            const double x0 = x[j0], x1 = x[j1];
            // The angle's error (GgmlRecurrenceMatchesFloat64) times |x|, plus the rotation's.
            const double tol =
                (3.0 * (i + 1) * kFloatEps * theta + 1e-6) * (std::fabs(x0) + std::fabs(x1) + 1.0);
            EXPECT_NEAR(y[j0], x0 * std::cos(theta) - x1 * std::sin(theta), tol);
            EXPECT_NEAR(y[j1], x0 * std::sin(theta) + x1 * std::cos(theta), tol);
          }
        }
      }
    }
  }
}

TEST(Rope, DefaultAnglesLeaveXAlone) {
  std::vector<float> x = {1.0f, 2.0f, 3.0f, 4.0f};
  Rope(RopeStyle::kNormal, x.data(), 2, 2, RopeAngles(), 9);
  EXPECT_EQ(x, (std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f}));
}

}  // namespace
}  // namespace ctxpar::compute
