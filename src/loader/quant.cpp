#include "ctxpar/quant.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <cstring>
#include <limits>

namespace ctxpar {
namespace {

constexpr std::array<GgmlTypeTraits, 32> kTypes = {{
    {GgmlType::kF32, "F32", 1, 4, true},
    {GgmlType::kF16, "F16", 1, 2, true},
    {GgmlType::kQ4_0, "Q4_0", 32, 18, true},
    {GgmlType::kQ4_1, "Q4_1", 32, 20, true},
    {GgmlType::kQ5_0, "Q5_0", 32, 22, true},
    {GgmlType::kQ5_1, "Q5_1", 32, 24, true},
    {GgmlType::kQ8_0, "Q8_0", 32, 34, true},
    {GgmlType::kQ8_1, "Q8_1", 32, 36, true},
    {GgmlType::kQ2_K, "Q2_K", 256, 84, true},
    {GgmlType::kQ3_K, "Q3_K", 256, 110, true},
    {GgmlType::kQ4_K, "Q4_K", 256, 144, true},
    {GgmlType::kQ5_K, "Q5_K", 256, 176, true},
    {GgmlType::kQ6_K, "Q6_K", 256, 210, true},
    {GgmlType::kQ8_K, "Q8_K", 256, 292, true},
    {GgmlType::kIQ2_XXS, "IQ2_XXS", 256, 66, false},
    {GgmlType::kIQ2_XS, "IQ2_XS", 256, 74, false},
    {GgmlType::kIQ3_XXS, "IQ3_XXS", 256, 98, false},
    {GgmlType::kIQ1_S, "IQ1_S", 256, 50, false},
    {GgmlType::kIQ4_NL, "IQ4_NL", 32, 18, true},
    {GgmlType::kIQ3_S, "IQ3_S", 256, 110, false},
    {GgmlType::kIQ2_S, "IQ2_S", 256, 82, false},
    {GgmlType::kIQ4_XS, "IQ4_XS", 256, 136, true},
    {GgmlType::kI8, "I8", 1, 1, false},
    {GgmlType::kI16, "I16", 1, 2, false},
    {GgmlType::kI32, "I32", 1, 4, false},
    {GgmlType::kI64, "I64", 1, 8, false},
    {GgmlType::kF64, "F64", 1, 8, false},
    {GgmlType::kIQ1_M, "IQ1_M", 256, 56, false},
    {GgmlType::kBF16, "BF16", 1, 2, true},
    {GgmlType::kTQ1_0, "TQ1_0", 256, 54, false},
    {GgmlType::kTQ2_0, "TQ2_0", 256, 66, false},
    {GgmlType::kMXFP4, "MXFP4", 32, 17, true},
}};

// Reads block i of a row whose blocks need not be aligned.
template <typename Block>
Block LoadBlock(const uint8_t* src, int64_t i) {
  Block b;
  std::memcpy(&b, src + i * static_cast<int64_t>(sizeof(Block)), sizeof(Block));
  return b;
}

void RowF16(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    y[i] = Fp16ToFp32(h);
  }
}

void RowBf16(const uint8_t* src, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    y[i] = Bf16ToFloat(h);
  }
}

void RowQ4_0(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK4_0) {
    const auto b = LoadBlock<BlockQ4_0>(src, i);
    const float d = Fp16ToFp32(b.d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      y[j] = static_cast<float>((b.qs[j] & 0x0F) - 8) * d;
      y[j + kQK4_0 / 2] = static_cast<float>((b.qs[j] >> 4) - 8) * d;
    }
  }
}

void RowQ4_1(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK4_1) {
    const auto b = LoadBlock<BlockQ4_1>(src, i);
    const float d = Fp16ToFp32(b.d);
    const float m = Fp16ToFp32(b.m);
    for (int j = 0; j < kQK4_1 / 2; ++j) {
      y[j] = static_cast<float>(b.qs[j] & 0x0F) * d + m;
      y[j + kQK4_1 / 2] = static_cast<float>(b.qs[j] >> 4) * d + m;
    }
  }
}

void RowQ5_0(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK5_0) {
    const auto b = LoadBlock<BlockQ5_0>(src, i);
    const float d = Fp16ToFp32(b.d);
    uint32_t qh;
    std::memcpy(&qh, b.qh, 4);
    for (int j = 0; j < kQK5_0 / 2; ++j) {
      const int hi0 = static_cast<int>(((qh >> j) << 4) & 0x10);
      const int hi1 = static_cast<int>((qh >> (j + 12)) & 0x10);
      y[j] = static_cast<float>(((b.qs[j] & 0x0F) | hi0) - 16) * d;
      y[j + kQK5_0 / 2] = static_cast<float>(((b.qs[j] >> 4) | hi1) - 16) * d;
    }
  }
}

void RowQ5_1(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK5_1) {
    const auto b = LoadBlock<BlockQ5_1>(src, i);
    const float d = Fp16ToFp32(b.d);
    const float m = Fp16ToFp32(b.m);
    uint32_t qh;
    std::memcpy(&qh, b.qh, 4);
    for (int j = 0; j < kQK5_1 / 2; ++j) {
      const int hi0 = static_cast<int>(((qh >> j) << 4) & 0x10);
      const int hi1 = static_cast<int>((qh >> (j + 12)) & 0x10);
      y[j] = static_cast<float>((b.qs[j] & 0x0F) | hi0) * d + m;
      y[j + kQK5_1 / 2] = static_cast<float>((b.qs[j] >> 4) | hi1) * d + m;
    }
  }
}

void RowQ8_0(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK8_0) {
    const auto b = LoadBlock<BlockQ8_0>(src, i);
    const float d = Fp16ToFp32(b.d);
    for (int j = 0; j < kQK8_0; ++j) y[j] = static_cast<float>(b.qs[j]) * d;
  }
}

void RowQ8_1(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK8_1) {
    const auto b = LoadBlock<BlockQ8_1>(src, i);
    const float d = Fp16ToFp32(b.d);
    for (int j = 0; j < kQK8_1; ++j) y[j] = static_cast<float>(b.qs[j]) * d;
  }
}

// gguf-py's order of roundings: d * q, and (d * scale) * q.
void RowIQ4NL(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const auto b = LoadBlock<BlockIQ4NL>(src, i);
    const float d = Fp16ToFp32(b.d);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * static_cast<float>(kIq4Values[b.qs[j] & 0x0F]);
      y[j + 16] = d * static_cast<float>(kIq4Values[b.qs[j] >> 4]);
    }
  }
}

// gguf-py's MXFP4: d * q in float, d a power of two (exact unless it overflows or underflows).
void RowMXFP4(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const auto b = LoadBlock<BlockMXFP4>(src, i);
    const float d = Mxfp4Scale(b.e);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * static_cast<float>(kMxfp4Values[b.qs[j] & 0x0F]);
      y[j + 16] = d * static_cast<float>(kMxfp4Values[b.qs[j] >> 4]);
    }
  }
}

void RowIQ4XS(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = LoadBlock<BlockIQ4XS>(src, i);
    const float d = Fp16ToFp32(b.d);
    for (int ib = 0; ib < kQK_K / 32; ++ib, y += 32) {
      const int low = (b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0F;
      const int high = (b.scales_h >> (2 * ib)) & 0x03;
      const float dl = d * static_cast<float>((low | (high << 4)) - 32);
      const uint8_t* q = b.qs + 16 * ib;
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * static_cast<float>(kIq4Values[q[j] & 0x0F]);
        y[j + 16] = dl * static_cast<float>(kIq4Values[q[j] >> 4]);
      }
    }
  }
}

void RowQ2K(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = LoadBlock<BlockQ2K>(src, i);
    const float d = Fp16ToFp32(b.d);
    const float min = Fp16ToFp32(b.dmin);
    const uint8_t* q = b.qs;
    int is = 0;
    for (int n = 0; n < kQK_K; n += 128) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int half = 0; half < 2; ++half) {
          const uint8_t sc = b.scales[is++];
          const float dl = d * static_cast<float>(sc & 0xF);
          const float ml = min * static_cast<float>(sc >> 4);
          for (int l = 0; l < 16; ++l) {
            *y++ = dl * static_cast<float>((q[l + 16 * half] >> shift) & 3) - ml;
          }
        }
      }
      q += 32;
    }
  }
}

void RowQ3K(const uint8_t* src, float* y, int64_t nb) {
  constexpr uint32_t kMask1 = 0x03030303;
  constexpr uint32_t kMask2 = 0x0f0f0f0f;
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = LoadBlock<BlockQ3K>(src, i);
    const float d_all = Fp16ToFp32(b.d);
    uint32_t aux[4];
    std::memcpy(aux, b.scales, 12);
    const uint32_t tmp = aux[2];
    aux[2] = ((aux[0] >> 4) & kMask2) | (((tmp >> 4) & kMask1) << 4);
    aux[3] = ((aux[1] >> 4) & kMask2) | (((tmp >> 6) & kMask1) << 4);
    aux[0] = (aux[0] & kMask2) | (((tmp >> 0) & kMask1) << 4);
    aux[1] = (aux[1] & kMask2) | (((tmp >> 2) & kMask1) << 4);
    int8_t scales[16];
    std::memcpy(scales, aux, 16);
    const uint8_t* q = b.qs;
    uint8_t m = 1;
    int is = 0;
    for (int n = 0; n < kQK_K; n += 128) {
      for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
        for (int half = 0; half < 2; ++half) {
          const float dl = d_all * static_cast<float>(scales[is++] - 32);
          for (int l = 16 * half; l < 16 * half + 16; ++l) {
            const int lo = (q[l] >> shift) & 3;
            *y++ = dl * static_cast<float>(lo - ((b.hmask[l] & m) ? 0 : 4));
          }
        }
      }
      q += 32;
    }
  }
}

void RowQ4K(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = LoadBlock<BlockQ4K>(src, i);
    const float d = Fp16ToFp32(b.d);
    const float min = Fp16ToFp32(b.dmin);
    const uint8_t* q = b.qs;
    for (int j = 0; j < 8; j += 2, q += 32) {
      uint8_t sc;
      uint8_t m;
      UnpackScaleMinK4(j, b.scales, &sc, &m);
      const float d1 = d * sc;
      const float m1 = min * m;
      UnpackScaleMinK4(j + 1, b.scales, &sc, &m);
      const float d2 = d * sc;
      const float m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

void RowQ5K(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = LoadBlock<BlockQ5K>(src, i);
    const float d = Fp16ToFp32(b.d);
    const float min = Fp16ToFp32(b.dmin);
    const uint8_t* ql = b.qs;
    uint8_t u1 = 1;
    uint8_t u2 = 2;
    for (int j = 0; j < 8; j += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
      uint8_t sc;
      uint8_t m;
      UnpackScaleMinK4(j, b.scales, &sc, &m);
      const float d1 = d * sc;
      const float m1 = min * m;
      UnpackScaleMinK4(j + 1, b.scales, &sc, &m);
      const float d2 = d * sc;
      const float m2 = min * m;
      for (int l = 0; l < 32; ++l) {
        *y++ = d1 * static_cast<float>((ql[l] & 0xF) + ((b.qh[l] & u1) ? 16 : 0)) - m1;
      }
      for (int l = 0; l < 32; ++l) {
        *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((b.qh[l] & u2) ? 16 : 0)) - m2;
      }
    }
  }
}

void RowQ6K(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = LoadBlock<BlockQ6K>(src, i);
    const float d = Fp16ToFp32(b.d);
    const uint8_t* ql = b.ql;
    const uint8_t* qh = b.qh;
    const int8_t* sc = b.scales;
    for (int n = 0; n < kQK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * sc[is] * static_cast<float>(q1);
        y[l + 32] = d * sc[is + 2] * static_cast<float>(q2);
        y[l + 64] = d * sc[is + 4] * static_cast<float>(q3);
        y[l + 96] = d * sc[is + 6] * static_cast<float>(q4);
      }
    }
  }
}

void RowQ8K(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK_K) {
    const auto b = LoadBlock<BlockQ8K>(src, i);
    for (int j = 0; j < kQK_K; ++j) y[j] = b.d * static_cast<float>(b.qs[j]);
  }
}

}  // namespace

const GgmlTypeTraits* FindGgmlType(uint32_t id) {
  for (const auto& t : kTypes) {
    if (static_cast<uint32_t>(t.type) == id) return &t;
  }
  return nullptr;
}

const GgmlTypeTraits& GetGgmlTypeTraits(GgmlType type) {
  const GgmlTypeTraits* t = FindGgmlType(static_cast<uint32_t>(type));
  assert(t != nullptr);
  return *t;
}

std::string_view GgmlTypeName(GgmlType type) {
  const GgmlTypeTraits* t = FindGgmlType(static_cast<uint32_t>(type));
  return t != nullptr ? t->name : std::string_view("unknown");
}

Expected<int64_t> GgmlRowBytes(GgmlType type, int64_t n) {
  const GgmlTypeTraits* t = FindGgmlType(static_cast<uint32_t>(type));
  if (t == nullptr) {
    return InvalidArgument(
        fmt::format("ggml type id {} is not a ggml type", static_cast<uint32_t>(type)));
  }
  if (n < 0 || n % t->block_size != 0) {
    return InvalidArgument(
        fmt::format("row length n={} must be a non-negative multiple of the {} block size {}", n,
                    t->name, t->block_size));
  }
  const int64_t blocks = n / t->block_size;
  if (blocks > std::numeric_limits<int64_t>::max() / t->type_size) {
    return OutOfRange(fmt::format("a {} row of n={} elements overflows int64 bytes", t->name, n));
  }
  return blocks * t->type_size;
}

Status DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n) {
  CTXPAR_ASSIGN_OR_RETURN(const int64_t bytes, GgmlRowBytes(type, n));
  const auto* s = static_cast<const uint8_t*>(src);
  const int64_t nb = n / GetGgmlTypeTraits(type).block_size;
  switch (type) {
    case GgmlType::kF32:
      if (bytes > 0) std::memcpy(dst, s, static_cast<size_t>(bytes));
      return Status::Ok();
    case GgmlType::kF16:
      RowF16(s, dst, n);
      return Status::Ok();
    case GgmlType::kBF16:
      RowBf16(s, dst, n);
      return Status::Ok();
    case GgmlType::kQ4_0:
      RowQ4_0(s, dst, nb);
      return Status::Ok();
    case GgmlType::kQ4_1:
      RowQ4_1(s, dst, nb);
      return Status::Ok();
    case GgmlType::kQ5_0:
      RowQ5_0(s, dst, nb);
      return Status::Ok();
    case GgmlType::kQ5_1:
      RowQ5_1(s, dst, nb);
      return Status::Ok();
    case GgmlType::kQ8_0:
      RowQ8_0(s, dst, nb);
      return Status::Ok();
    case GgmlType::kQ8_1:
      RowQ8_1(s, dst, nb);
      return Status::Ok();
    case GgmlType::kQ2_K:
      RowQ2K(s, dst, nb);
      return Status::Ok();
    case GgmlType::kQ3_K:
      RowQ3K(s, dst, nb);
      return Status::Ok();
    case GgmlType::kQ4_K:
      RowQ4K(s, dst, nb);
      return Status::Ok();
    case GgmlType::kQ5_K:
      RowQ5K(s, dst, nb);
      return Status::Ok();
    case GgmlType::kQ6_K:
      RowQ6K(s, dst, nb);
      return Status::Ok();
    case GgmlType::kQ8_K:
      RowQ8K(s, dst, nb);
      return Status::Ok();
    case GgmlType::kIQ4_NL:
      RowIQ4NL(s, dst, nb);
      return Status::Ok();
    case GgmlType::kIQ4_XS:
      RowIQ4XS(s, dst, nb);
      return Status::Ok();
    case GgmlType::kMXFP4:
      RowMXFP4(s, dst, nb);
      return Status::Ok();
    default:
      return Unimplemented(
          fmt::format("dequantization of ggml type {} is not implemented", GgmlTypeName(type)));
  }
}

Status DequantizeRowBf16(GgmlType type, const void* src, uint16_t* dst, int64_t n) {
  CTXPAR_RETURN_IF_ERROR(GgmlRowBytes(type, n).status());
  if (!GetGgmlTypeTraits(type).dequantizable) {
    return Unimplemented(
        fmt::format("dequantization of ggml type {} is not implemented", GgmlTypeName(type)));
  }
  const int64_t block = GetGgmlTypeTraits(type).block_size;
  const int64_t bytes_per_block = GetGgmlTypeTraits(type).type_size;
  // Dequantize a chunk of whole blocks at a time through a stack buffer.
  constexpr int64_t kChunk = 1024;
  const int64_t step = (kChunk / block) * block;
  float buf[kChunk];
  const auto* s = static_cast<const uint8_t*>(src);
  for (int64_t done = 0; done < n; done += step) {
    const int64_t len = std::min(step, n - done);
    CTXPAR_RETURN_IF_ERROR(DequantizeRow(type, s + done / block * bytes_per_block, buf, len));
    for (int64_t i = 0; i < len; ++i) dst[done + i] = FloatToBf16(buf[i]);
  }
  return Status::Ok();
}

}  // namespace ctxpar
