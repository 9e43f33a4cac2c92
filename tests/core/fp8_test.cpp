// The fp8 conversions of dtype.h against references written from the OCP FP8 definitions: every
// one of the 256 codes decoded, and float inputs (every code, the ties between neighbours and
// the floats either side of them, subnormals, overflow, infinities, NaN, random floats) encoded.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ctxpar/dtype.h"

namespace ctxpar {
namespace {

struct Format {
  const char* name;
  int exp_bits;
  int man_bits;
  int bias;
  bool ieee;  // e5m2: the top exponent is inf / NaN; e4m3fn: only S.1111.111 is NaN
  float (*decode)(uint8_t);
  uint8_t (*encode)(float);
};

const Format kE4M3{"e4m3fn", 4, 3, 7, false, &Fp8E4M3ToFloat, &FloatToFp8E4M3};
const Format kE5M2{"e5m2", 5, 2, 15, true, &Fp8E5M2ToFloat, &FloatToFp8E5M2};

// The value of a code from the definition: (-1)^s 2^(e - bias) (1 + m / 2^M), subnormal
// (-1)^s 2^(1 - bias) (m / 2^M) when e = 0.
double Reference(const Format& f, uint8_t code) {
  const int man_mask = (1 << f.man_bits) - 1;
  const int exp_max = (1 << f.exp_bits) - 1;
  const bool neg = (code & 0x80) != 0;
  const int e = (code >> f.man_bits) & exp_max;
  const int m = code & man_mask;
  if (f.ieee && e == exp_max) {
    if (m != 0) return std::numeric_limits<double>::quiet_NaN();
    return neg ? -INFINITY : INFINITY;
  }
  if (!f.ieee && e == exp_max && m == man_mask) return std::numeric_limits<double>::quiet_NaN();
  const double mag = e == 0 ? std::ldexp(m, 1 - f.bias - f.man_bits)
                            : std::ldexp(1.0 + std::ldexp(m, -f.man_bits), e - f.bias);
  return neg ? -mag : mag;
}

bool IsFinite(const Format& f, uint8_t code) { return std::isfinite(Reference(f, code)); }

// The code of the nearest finite value to x (ties to the even code: mantissa LSB 0); beyond the
// largest finite magnitude (inf included): that magnitude; NaN: NaN.
bool ReferenceEncode(const Format& f, float x, uint8_t* out) {
  if (std::isnan(x)) return false;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs(static_cast<double>(x));
  uint8_t best = 0;
  double best_err = INFINITY;
  for (int c = 0; c < 128; ++c) {
    if (!IsFinite(f, static_cast<uint8_t>(c))) continue;
    const double err = std::fabs(Reference(f, static_cast<uint8_t>(c)) - a);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = static_cast<uint8_t>(c);
      best_err = err;
    }
  }
  const uint8_t max_code = f.ieee ? 0x7b : 0x7e;
  if (a >= Reference(f, max_code)) best = max_code;
  *out = sign | best;
  return true;
}

uint32_t Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

class Fp8 : public ::testing::TestWithParam<const Format*> {};

TEST_P(Fp8, EveryCodeDecodesExactly) {
  const Format& f = *GetParam();
  for (int c = 0; c < 256; ++c) {
    const double want = Reference(f, static_cast<uint8_t>(c));
    const float got = f.decode(static_cast<uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << f.name << " code " << c;
      continue;
    }
    EXPECT_EQ(static_cast<double>(got), want) << f.name << " code " << c;
    EXPECT_EQ(std::signbit(got), (c & 0x80) != 0) << f.name << " code " << c;
  }
}

void CheckEncode(const Format& f, float x) {
  uint8_t want;
  const uint8_t got = f.encode(x);
  if (!ReferenceEncode(f, x, &want)) {
    EXPECT_TRUE(std::isnan(f.decode(got))) << f.name << " NaN gave code " << int{got};
    return;
  }
  EXPECT_EQ(int{got}, int{want}) << f.name << " x " << x << " bits " << std::hex << Bits(x);
}

TEST_P(Fp8, CodesTiesAndTheirNeighboursEncodeToTheNearestEven) {
  const Format& f = *GetParam();
  std::vector<double> values;
  for (int c = 0; c < 128; ++c) {
    if (IsFinite(f, static_cast<uint8_t>(c)))
      values.push_back(Reference(f, static_cast<uint8_t>(c)));
  }
  const double max = values.back();
  values.push_back(2 * max);  // the overflow side of the largest value
  for (size_t i = 0; i + 1 < values.size(); ++i) {
    const double mid = (values[i] + values[i + 1]) / 2;  // exact in float for both formats
    for (double v : {values[i], mid}) {
      for (float s : {1.0f, -1.0f}) {
        const float x = s * static_cast<float>(v);
        CheckEncode(f, x);
        CheckEncode(f, std::nextafter(x, INFINITY));
        CheckEncode(f, std::nextafter(x, -INFINITY));
      }
    }
  }
}

TEST_P(Fp8, OverflowSaturatesAndOnlyNaNGivesNaN) {
  const Format& f = *GetParam();
  const uint8_t max_code = f.ieee ? 0x7b : 0x7e;
  const float max = f.ieee ? 57344.0f : 448.0f;
  EXPECT_EQ(Reference(f, max_code), max);
  for (float x : {max, std::nextafter(max, INFINITY), 1.1f * max, 1e30f,
                  std::numeric_limits<float>::max(), INFINITY}) {
    EXPECT_EQ(int{f.encode(x)}, int{max_code}) << f.name << " " << x;
    EXPECT_EQ(int{f.encode(-x)}, int{max_code | 0x80}) << f.name << " " << -x;
  }
  for (float x : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::signaling_NaN()}) {
    EXPECT_TRUE(std::isnan(f.decode(f.encode(x)))) << f.name;
  }
  for (int c = 0; c < 256; ++c) {
    if (IsFinite(f, static_cast<uint8_t>(c))) {
      const float x = f.decode(static_cast<uint8_t>(c));
      EXPECT_FALSE(std::isnan(f.decode(f.encode(x * 1e6f)))) << f.name << " code " << c;
    }
  }
}

TEST_P(Fp8, SubnormalsZerosAndRandomFloats) {
  const Format& f = *GetParam();
  for (float x : {0.0f, -0.0f, std::numeric_limits<float>::denorm_min(), 1e-30f, -1e-30f}) {
    CheckEncode(f, x);
  }
  EXPECT_EQ(int{f.encode(-0.0f)}, 0x80);
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  std::uniform_real_distribution<float> small(-4.0f, 4.0f);
  for (int i = 0; i < 200000; ++i) {
    // Random bit patterns cover every exponent; scaled uniform values the ones a KV cache holds.
    uint32_t u = bits(rng);
    float x;
    std::memcpy(&x, &u, 4);
    CheckEncode(f, x);
    CheckEncode(f, small(rng) * (f.ieee ? 1.0f : 1.0f / 64));
    if (HasFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, Fp8, ::testing::Values(&kE4M3, &kE5M2),
                         [](const ::testing::TestParamInfo<const Format*>& info) {
                           return std::string(info.param->ieee ? "E5M2" : "E4M3");
                         });

}  // namespace
}  // namespace ctxpar
