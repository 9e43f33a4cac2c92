// bfloat16 stored as uint16_t (the top half of an IEEE float32): the conversions every subsystem
// uses for bf16 KV, bf16 wire formats and bf16 collectives.
// FloatToBf16 rounds to nearest even and keeps NaN a (quiet) NaN; Bf16ToFloat is exact.
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <cstring>

namespace ctxpar {

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

}  // namespace ctxpar
