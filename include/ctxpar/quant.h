// ggml tensor types, their block layouts, and dequantization to fp32 / bf16.
//
// A ggml row of n elements of a block-quantized type is n / block_size blocks laid out back to
// back; each block stores block_size elements in type_size bytes. The block structs below are
// byte-for-byte the structs of ggml (ggml-common.h), so a pointer into GGUF tensor data can be
// reinterpreted as an array of them: a mapped file aligns tensor data to its alignment (32 by
// default), more than the 2 (4 for BlockQ8K) the structs need. fp16 scales are kept as raw IEEE
// half bits (uint16_t); convert them with Fp16ToFp32 (dtype.h).
//
// Thread safety: pure functions over caller-owned memory; safe from any thread.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

#include "ctxpar/dtype.h"
#include "ctxpar/status.h"

namespace ctxpar {

// The ids are ggml's (ggml.h enum ggml_type); the gaps are types ggml removed.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

struct GgmlTypeTraits {
  GgmlType type;
  std::string_view name;  // ggml's spelling: "Q4_K", "BF16"
  int64_t block_size;     // elements per block
  int64_t type_size;      // bytes per block
  bool dequantizable;     // DequantizeRow supports it
};

// The traits of the ggml type with this id, or nullptr when the id is not a ggml type.
const GgmlTypeTraits* FindGgmlType(uint32_t id);
// The traits of a valid GgmlType (never null for the enumerators above).
const GgmlTypeTraits& GetGgmlTypeTraits(GgmlType type);
std::string_view GgmlTypeName(GgmlType type);

// Bytes of a row of n elements: InvalidArgument when n < 0 or n is not a multiple of the block
// size, OutOfRange when the size overflows int64.
Expected<int64_t> GgmlRowBytes(GgmlType type, int64_t n);

// Dequantizes one row of n elements (n / block_size blocks starting at src) into dst[0, n).
// Supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
// Q8_K. Unimplemented for other types; InvalidArgument when n < 0 or n is not a multiple of the
// block size. src needs no alignment; the arithmetic is ggml's (dequantize_row_* in
// ggml-quants.c), in fp32.
Status DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n);
// As DequantizeRow, then rounds each value to bf16 with FloatToBf16 (ctxpar/dtype.h: nearest
// even, NaN kept quiet, as ggml_compute_fp32_to_bf16); dst holds raw bf16 bits.
Status DequantizeRowBf16(GgmlType type, const void* src, uint16_t* dst, int64_t n);

// Block layouts (ggml-common.h). QK = elements per block.
inline constexpr int kQK4_0 = 32;
inline constexpr int kQK4_1 = 32;
inline constexpr int kQK5_0 = 32;
inline constexpr int kQK5_1 = 32;
inline constexpr int kQK8_0 = 32;
inline constexpr int kQK8_1 = 32;
inline constexpr int kQK_K = 256;
inline constexpr int kKScaleSize = 12;

// x[i] = d * (q[i] - 8); q[i] = qs[i] & 15 for i < 16, qs[i - 16] >> 4 after.
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK4_0 / 2];
};
// x[i] = d * q[i] + m, nibbles as Q4_0.
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK4_1 / 2];
};
// x[i] = d * (q[i] - 16); bit 4 of q[i] is bit i of qh (little-endian u32).
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK5_0 / 2];
};
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK5_1 / 2];
};
// x[i] = d * qs[i].
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK8_0];
};
// s = d * sum(qs), kept for dot products.
struct BlockQ8_1 {
  uint16_t d;
  uint16_t s;
  int8_t qs[kQK8_1];
};
// 16 sub-blocks of 16; 4-bit scale and 4-bit min per sub-block, 2-bit quants.
struct BlockQ2K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d;
  uint16_t dmin;
};
// 16 sub-blocks of 16; 6-bit signed scales (offset 32), 3-bit quants (high bit in hmask).
struct BlockQ3K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  uint16_t d;
};
// 8 sub-blocks of 32; 6-bit scale and min per sub-block (UnpackScaleMinK4), 4-bit quants.
struct BlockQ4K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qs[kQK_K / 2];
};
struct BlockQ5K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
// 16 sub-blocks of 16; int8 scales, 6-bit quants (offset 32): low 4 bits in ql, high 2 in qh.
struct BlockQ6K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
// The non-linear 4-bit grid of IQ4_NL and IQ4_XS: a quant q (0-15) stands for d * kIq4Values[q].
inline constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};
// x[j] = d * kIq4Values[qs[j] & 15], x[16 + j] = d * kIq4Values[qs[j] >> 4].
struct BlockIQ4NL {
  uint16_t d;
  uint8_t qs[16];
};
// 8 sub-blocks of 32 as IQ4_NL's, each with d * (its 6-bit scale - 32): the scale's low 4 bits in
// scales_l (sub-block 2i in the low nibble of byte i), its high 2 in bits 2i..2i+1 of scales_h.
struct BlockIQ4XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[kQK_K / 64];
  uint8_t qs[kQK_K / 2];
};
// MXFP4 (OCP microscaling; gpt-oss's experts): an E8M0 exponent e and 32 e2m1 values, stored
// doubled as ggml stores them: x[j] = d * kMxfp4Values[qs[j] & 15], x[16 + j] =
// d * kMxfp4Values[qs[j] >> 4], with d = Mxfp4Scale(e) = 2^(e - 128) (half of 2^(e - 127)).
inline constexpr int8_t kMxfp4Values[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};
struct BlockMXFP4 {
  uint8_t e;
  uint8_t qs[16];
};
// ggml's ggml_e8m0_to_fp32_half: the bits of 2^(e - 128), a subnormal for e < 2.
inline float Mxfp4Scale(uint8_t e) {
  const uint32_t bits = e < 2 ? uint32_t{0x00200000} << e : uint32_t(e - 1) << 23;
  float d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}
// The activation format of ggml's K-quant dot products: fp32 scale, bsums = sums of 16.
struct BlockQ8K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};

static_assert(sizeof(BlockQ4_0) == 18 && alignof(BlockQ4_0) == 2);
static_assert(sizeof(BlockQ4_1) == 20 && alignof(BlockQ4_1) == 2);
static_assert(sizeof(BlockQ5_0) == 22 && alignof(BlockQ5_0) == 2);
static_assert(sizeof(BlockQ5_1) == 24 && alignof(BlockQ5_1) == 2);
static_assert(sizeof(BlockQ8_0) == 34 && alignof(BlockQ8_0) == 2);
static_assert(sizeof(BlockQ8_1) == 36 && alignof(BlockQ8_1) == 2);
static_assert(sizeof(BlockQ2K) == 84 && alignof(BlockQ2K) == 2);
static_assert(sizeof(BlockQ3K) == 110 && alignof(BlockQ3K) == 2);
static_assert(sizeof(BlockQ4K) == 144 && alignof(BlockQ4K) == 2);
static_assert(sizeof(BlockQ5K) == 176 && alignof(BlockQ5K) == 2);
static_assert(sizeof(BlockIQ4NL) == 18 && alignof(BlockIQ4NL) == 2);
static_assert(sizeof(BlockIQ4XS) == 136 && alignof(BlockIQ4XS) == 2);
static_assert(sizeof(BlockMXFP4) == 17 && alignof(BlockMXFP4) == 1);
static_assert(sizeof(BlockQ6K) == 210 && alignof(BlockQ6K) == 2);
static_assert(sizeof(BlockQ8K) == 292 && alignof(BlockQ8K) == 4);

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K block (ggml's
// get_scale_min_k4).
inline void UnpackScaleMinK4(int j, const uint8_t* scales, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = scales[j] & 63;
    *min = scales[j + 4] & 63;
  } else {
    *scale = (scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4);
    *min = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

}  // namespace ctxpar
