// The element types of the whole code base (KV pages, wire formats, collectives, weights) and the
// 16-bit float conversions every subsystem uses.
//
// bf16 and fp16 values are stored as uint16_t bit patterns. FloatToBf16 and Fp32ToFp16 round to
// nearest even and keep NaN a (quiet) NaN; Bf16ToFloat and Fp16ToFp32 are exact.
// Thread safety: pure functions. C++17, so that nvcc compiles it too.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace ctxpar {

enum class DataType { kF32, kBF16, kF16, kF64, kI32, kU8 };

// bytes per element: 4, 2, 2, 8, 4, 1.
std::size_t DataTypeSize(DataType dtype);
// "f32", "bf16", "f16", "f64", "i32", "u8".
std::string_view DataTypeName(DataType dtype);

inline float Bf16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// Branch-free so that loops over it vectorise.
inline uint16_t FloatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (bits >> 16) | 0x0040u;
  return static_cast<uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

// Exact IEEE half -> float (subnormals, infinities and NaN included).
inline float Fp16ToFp32(uint16_t h) {
  // Branch-free conversion of Maratyszcza's FP16 library: renormalises through float scaling.
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const uint32_t normalized_bits = (two_w >> 4) + (0xE0u << 23);
  float normalized;
  std::memcpy(&normalized, &normalized_bits, 4);
  normalized *= 0x1.0p-112f;
  const uint32_t denormalized_bits = (two_w >> 17) | (126u << 23);
  float denormalized;
  std::memcpy(&denormalized, &denormalized_bits, 4);
  denormalized -= 0.5f;
  float chosen = two_w < (1u << 27) ? denormalized : normalized;
  uint32_t bits;
  std::memcpy(&bits, &chosen, 4);
  bits |= sign;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

// IEEE half, round to nearest even.
inline uint16_t Fp32ToFp16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  const uint16_t sign = uint16_t((x >> 16) & 0x8000);
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) return sign | (abs > 0x7F800000u ? 0x7E00 : 0x7C00);
  if (abs >= 0x477FF000u) return sign | 0x7C00;  // rounds past the largest half
  if (abs < 0x38800000u) {
    // Subnormal half: the value in units of 2^-24, rounded to nearest even by the FPU.
    float magnitude;
    std::memcpy(&magnitude, &abs, sizeof(magnitude));
    const float scaled = magnitude * 16777216.0f;
    return sign | uint16_t(std::nearbyint(scaled));
  }
  const uint32_t mant_odd = (abs >> 13) & 1;
  const uint32_t rounded = abs + 0xFFF + mant_odd;
  return sign | uint16_t((rounded - 0x38000000u) >> 13);
}

}  // namespace ctxpar
