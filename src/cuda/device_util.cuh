// Small device helpers shared by the kernels (nvcc only).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ctxpar::cuda {

// bf16 -> fp32 is exact: the bf16 bits are the high half of the fp32 bits.
__device__ __forceinline__ float Bf16Lo(uint32_t pair) { return __uint_as_float(pair << 16); }
__device__ __forceinline__ float Bf16Hi(uint32_t pair) {
  return __uint_as_float(pair & 0xffff0000u);
}

// Eight bf16 (one 16-byte load) to fp32.
__device__ __forceinline__ void Bf16x8ToFloat(const uint4& v, float* out) {
  out[0] = Bf16Lo(v.x);
  out[1] = Bf16Hi(v.x);
  out[2] = Bf16Lo(v.y);
  out[3] = Bf16Hi(v.y);
  out[4] = Bf16Lo(v.z);
  out[5] = Bf16Hi(v.z);
  out[6] = Bf16Lo(v.w);
  out[7] = Bf16Hi(v.w);
}

// fp32 -> bf16 bits, round to nearest even (NaN stays NaN).
__device__ __forceinline__ uint16_t FloatToBf16(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

__device__ __forceinline__ uint32_t PackBf16x2(float lo, float hi) {
  return static_cast<uint32_t>(FloatToBf16(lo)) | (static_cast<uint32_t>(FloatToBf16(hi)) << 16);
}

// The natural-log lse of a base-2 running state (max m2, sum l of 2^(s2 - m2)); -inf when empty.
__device__ __forceinline__ float NaturalLse(float m2, float l) {
  return l > 0.0f ? (m2 + log2f(l)) * 0.69314718055994530942f : -INFINITY;
}

}  // namespace ctxpar::cuda
