// The element types of the whole code base (KV pages, wire formats, collectives, weights) and the
// 16-bit float conversions every subsystem uses.
//
// bf16 and fp16 values are stored as uint16_t bit patterns. FloatToBf16 and Fp32ToFp16 round to
// nearest even and keep NaN a (quiet) NaN; Bf16ToFloat and Fp16ToFp32 are exact. fp8 values (OCP
// FP8: e4m3fn, bias 7, max 448, no infinities, S.1111.111 NaN; e5m2, bias 15, IEEE half's top
// byte) are uint8_t bit patterns: FloatToFp8* round to nearest even and saturate, Fp8*ToFloat are
// exact.
// Thread safety: pure functions. C++17, so that nvcc compiles it too.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace ctxpar {

enum class DataType { kF32, kBF16, kF16, kF64, kI32, kU8, kF8E4M3, kF8E5M2 };

// bytes per element: 4, 2, 2, 8, 4, 1, 1, 1.
std::size_t DataTypeSize(DataType dtype);
// "f32", "bf16", "f16", "f64", "i32", "u8", "f8_e4m3", "f8_e5m2".
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

// fp8 -> float, exact. Written without denormal floats or branches so that the SIMD kernels'
// copies (one vector operation per step) give the same bits for all 256 codes.
inline float Fp8E4M3ToFloat(uint8_t b) {
  const uint32_t mag = b & 0x7fu;
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  // Normal: exponent e + 120 (bias 127 - 7). Subnormal (e = 0): 2^-6 * (1 + m / 8) - 2^-6.
  const uint32_t normal_bits = (mag << 20) + (120u << 23);
  const uint32_t sub_bits = (mag << 20) + (121u << 23);
  float normal, sub;
  std::memcpy(&normal, &normal_bits, 4);
  std::memcpy(&sub, &sub_bits, 4);
  sub -= 0x1.0p-6f;
  float chosen = mag < 8 ? sub : normal;
  uint32_t bits;
  std::memcpy(&bits, &chosen, 4);
  bits = mag == 0x7fu ? 0x7fc00000u : bits;
  bits |= sign;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

// e5m2 is the top byte of an IEEE half (infinities and NaN included).
inline float Fp8E5M2ToFloat(uint8_t b) { return Fp16ToFp32(static_cast<uint16_t>(b << 8)); }

// float -> fp8, round to nearest even. Values beyond the largest finite one (infinities included)
// saturate to it: a K or V element out of range must not become NaN or inf, which would poison
// every softmax that reads it; only NaN gives NaN.
inline uint8_t FloatToFp8E4M3(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  const uint8_t sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7f;
  if (abs >= 0x43e00000u) return sign | 0x7e;  // >= 448
  if (abs < 0x3c800000u) {
    // Below 2^-6: subnormal, in units of 2^-9, rounded to nearest even by the FPU (8 is 2^-6).
    float magnitude;
    std::memcpy(&magnitude, &abs, sizeof(magnitude));
    return sign | static_cast<uint8_t>(std::nearbyint(magnitude * 512.0f));
  }
  const uint32_t rounded = abs + 0x7ffffu + ((abs >> 20) & 1u);
  return sign | static_cast<uint8_t>((rounded - (120u << 23)) >> 20);
}

inline uint8_t FloatToFp8E5M2(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  const uint8_t sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e;
  if (abs >= 0x47600000u) return sign | 0x7b;  // >= 57344
  if (abs < 0x38800000u) {
    // Below 2^-14: subnormal, in units of 2^-16 (4 is 2^-14).
    float magnitude;
    std::memcpy(&magnitude, &abs, sizeof(magnitude));
    return sign | static_cast<uint8_t>(std::nearbyint(magnitude * 65536.0f));
  }
  const uint32_t rounded = abs + 0xfffffu + ((abs >> 21) & 1u);
  return sign | static_cast<uint8_t>((rounded - (112u << 23)) >> 21);
}

}  // namespace ctxpar
