// The AVX2 + FMA + F16C kernels (8 lanes); compiled with those flags, run only where cpuid has
// them. One output's 16 canonical lanes are two registers: lanes 0-7 take elements 0-7 then
// 16-23 of each block, lanes 8-15 elements 8-15 then 24-31.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "compute/linear_kernels.h"

namespace ctxpar::compute::linear_internal {
namespace {

#include "compute/linear_x86.h"

__m256 HalfAt(const std::uint8_t* p) { return _mm256_cvtph_ps(_mm_set1_epi16(HalfBits(p))); }

struct Avx2Isa {
  static constexpr int kParts = 4;
  using V = __m256;
  struct Acc {
    __m256 v[2];
  };
  struct Block {
    __m256 v[kParts];
  };
  // 16 registers. Direct: a tile's accumulators (two per output), a block's four parts, its
  // scale and offset. Widened: 4 x 3 chains, three activation parts and one weight part. On Zen 3
  // (`ctxpar bench matmul --threads 1`, every matmul of a token, tokens/s, runs alternating) the
  // direct path led at 8 rows (133-155 against 107-122), the widened one from 12 (n = 12:
  // 126-132 against 115-126; n = 16: 134-141 against 126-137; n = 64: 179-184 against 150-153).
  static constexpr int kDirectGroup = 5;
  static constexpr int kDirectRows[kDirectGroup] = {4, 2, 1, 1, 1};
  static constexpr bool kDirectWeightsFirst = false;
  static constexpr int kDirectMaxTokens = 8;
  static constexpr int kWideRows = 4;
  static constexpr int kWideTokens = 3;
  // 4 rows and 3 tokens of 24 blocks are 21 KB, in L1 (ffn_down's whole rows, 4 x 6 KB, and
  // three tokens' did not fit).
  static constexpr int kWideRunBlocks = 24;
  static constexpr int kChains = 2;

  static void Prefetch(const std::uint8_t* p) {
    _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
  }
  static Acc Zero() { return {{_mm256_setzero_ps(), _mm256_setzero_ps()}}; }
  static V Load(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static Block DequantQ41(const std::uint8_t* blk) {
    const __m256 d = HalfAt(blk);
    const __m256 m = HalfAt(blk + 2);
    // One byte per 32-bit lane: its low nibble is element j, its high nibble element 16 + j.
    const __m256i a =
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 4)));
    const __m256i b =
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 12)));
    const __m256i lo = _mm256_set1_epi32(0xF);
    return {{_mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(a, lo)), d, m),
             _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(b, lo)), d, m),
             _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(a, 4)), d, m),
             _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(b, 4)), d, m)}};
  }
  static Block DequantQ80(const std::uint8_t* blk) {
    const __m256 d = HalfAt(blk);
    Block w;
    for (int p = 0; p < kParts; ++p) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 2 + 8 * p));
      w.v[p] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d);
    }
    return w;
  }
  // The block's 32 values q - 16 as int8 in element order, then widened 8 at a time.
  static Block DequantQ50(const std::uint8_t* blk) {
    const __m256 d = HalfAt(blk);
    std::uint32_t qh;
    std::memcpy(&qh, blk + 2, 4);
    const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 6));
    const __m256i nib = _mm256_and_si256(
        _mm256_inserti128_si256(_mm256_castsi128_si256(qs), _mm_srli_epi16(qs, 4), 1),
        _mm256_set1_epi8(0xF));
    // Byte j all ones where bit j of qh is set: byte j / 8 of qh in byte j, then its bit j % 8.
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(static_cast<int>(qh)),
        _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
    const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    // nibble | 0xF0 is nibble - 16 as int8, where bit 4 is clear.
    const __m256i q = _mm256_or_si256(nib, _mm256_andnot_si256(set, _mm256_set1_epi8(-16)));
    const __m128i halves[2] = {_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1)};
    Block w;
    for (int p = 0; p < kParts; ++p) {
      const __m128i b = (p & 1) ? _mm_srli_si128(halves[p >> 1], 8) : halves[p >> 1];
      w.v[p] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), d);
    }
    return w;
  }
  static Block LoadGroup(const float* f) {
    return {{_mm256_loadu_ps(f), _mm256_loadu_ps(f + 8), _mm256_loadu_ps(f + 16),
             _mm256_loadu_ps(f + 24)}};
  }
  static Block DequantQ40(const std::uint8_t* blk) {
    const __m256 d = HalfAt(blk);
    // One byte per 32-bit lane: its low nibble is element j, its high nibble element 16 + j.
    const __m256i a =
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 2)));
    const __m256i b =
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 10)));
    const __m256i lo = _mm256_set1_epi32(0xF), eight = _mm256_set1_epi32(8);
    auto scaled = [&](__m256i q) {
      return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q, eight)), d);
    };
    return {{scaled(_mm256_and_si256(a, lo)), scaled(_mm256_and_si256(b, lo)),
             scaled(_mm256_srli_epi32(a, 4)), scaled(_mm256_srli_epi32(b, 4))}};
  }
  // The block's 32 values q (0..31) as bytes in element order, then widened 8 at a time.
  static Block DequantQ51(const std::uint8_t* blk) {
    const __m256 d = HalfAt(blk);
    const __m256 m = HalfAt(blk + 2);
    std::uint32_t qh;
    std::memcpy(&qh, blk + 4, 4);
    const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 8));
    const __m256i nib = _mm256_and_si256(
        _mm256_inserti128_si256(_mm256_castsi128_si256(qs), _mm_srli_epi16(qs, 4), 1),
        _mm256_set1_epi8(0xF));
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(static_cast<int>(qh)),
        _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
    const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    const __m256i q = _mm256_or_si256(nib, _mm256_and_si256(set, _mm256_set1_epi8(16)));
    const __m128i halves[2] = {_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1)};
    Block w;
    for (int p = 0; p < kParts; ++p) {
      const __m128i b = (p & 1) ? _mm_srli_si128(halves[p >> 1], 8) : halves[p >> 1];
      w.v[p] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b)), d, m);
    }
    return w;
  }
  // Unquantized groups: part p is elements [8p, 8p + 8).
  static Block DequantF32(const std::uint8_t* blk) {
    const auto* f = reinterpret_cast<const float*>(blk);
    return {{_mm256_loadu_ps(f), _mm256_loadu_ps(f + 8), _mm256_loadu_ps(f + 16),
             _mm256_loadu_ps(f + 24)}};
  }
  static Block DequantF16(const std::uint8_t* blk) {
    Block w;
    for (int p = 0; p < kParts; ++p) {
      w.v[p] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 * p)));
    }
    return w;
  }
  static Block DequantBF16(const std::uint8_t* blk) {
    Block w;
    for (int p = 0; p < kParts; ++p) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 * p));
      w.v[p] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    return w;
  }
  // One fused rounding is DequantizeRow's two: d (fp16) times sc (6 bits) times q (5 bits) has
  // at most 22 significant bits, so the product is exact.
  template <int kShift, int kBit>
  static Block DequantK45(const std::uint8_t* qs, const std::uint8_t* qh, float d, float m) {
    const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs));
    __m256i q = _mm256_and_si256(_mm256_srli_epi16(bytes, kShift), _mm256_set1_epi8(0xF));
    if constexpr (kBit >= 0) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh));
      const __m256i sel = _mm256_set1_epi8(1 << kBit);
      const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(h, sel), sel);
      q = _mm256_or_si256(q, _mm256_and_si256(set, _mm256_set1_epi8(16)));
    }
    const __m256 vd = _mm256_set1_ps(d), vm = _mm256_set1_ps(m);
    const __m128i halves[2] = {_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1)};
    Block w;
    for (int p = 0; p < kParts; ++p) {
      const __m128i b = (p & 1) ? _mm_srli_si128(halves[p >> 1], 8) : halves[p >> 1];
      w.v[p] = _mm256_fmsub_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b)), vd, vm);
    }
    return w;
  }
  template <int kShiftL, int kShiftH>
  static Block DequantQ6K(const std::uint8_t* ql, const std::uint8_t* qh, float d0, float d1) {
    const __m256i l = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh));
    const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(l, kShiftL), _mm256_set1_epi8(0xF));
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(h, kShiftH), _mm256_set1_epi8(3));
    const __m256i q =
        _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), _mm256_set1_epi8(32));
    const __m256 vd[2] = {_mm256_set1_ps(d0), _mm256_set1_ps(d1)};
    const __m128i halves[2] = {_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1)};
    Block w;
    for (int p = 0; p < kParts; ++p) {
      const __m128i b = (p & 1) ? _mm_srli_si128(halves[p >> 1], 8) : halves[p >> 1];
      w.v[p] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), vd[p >> 1]);
    }
    return w;
  }
  static V ZeroV() { return _mm256_setzero_ps(); }
  static void FmaV(V& a, V w, V x) { a = _mm256_fmadd_ps(w, x, a); }
  static void Fma(Acc& a, int p, V w, V x) { FmaV(a.v[p & 1], w, x); }
  static void SetChain(Acc& a, int c, V v) { a.v[c] = v; }
  static float Reduce(const Acc& a) { return Sum8(_mm256_add_ps(a.v[0], a.v[1])); }
  static void Reduce4(const Acc& a, const Acc& b, const Acc& c, const Acc& d, float* out) {
    Tree4(_mm256_add_ps(a.v[0], a.v[1]), _mm256_add_ps(b.v[0], b.v[1]),
          _mm256_add_ps(c.v[0], c.v[1]), _mm256_add_ps(d.v[0], d.v[1]), out);
  }
};

#include "compute/linear_impl.h"

__m256i MulSum(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

float DotQ41(const std::uint8_t* w, const ActBlock* x, int nb) {
  __m256 acc = _mm256_setzero_ps();
  float msum = 0.0f;
  for (int b = 0; b < nb; ++b) {
    const std::uint8_t* blk = w + b * 20;
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].q));
    const __m256i p = MulSum(Nibbles(blk + 4), a);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(Scale(blk) * x[b].d), acc);
    msum += Scale(blk + 2) * x[b].s;
  }
  return Sum8(acc) + msum;
}

float DotQ80(const std::uint8_t* w, const ActBlock* x, int nb) {
  __m256 acc = _mm256_setzero_ps();
  for (int b = 0; b < nb; ++b) {
    const std::uint8_t* blk = w + b * 34;
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].q));
    // maddubs multiplies unsigned by signed: move w's sign onto a.
    const __m256i p = MulSum(_mm256_abs_epi8(q), _mm256_sign_epi8(a, q));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(Scale(blk) * x[b].d), acc);
  }
  return Sum8(acc);
}

}  // namespace

const F32Kernel kF32Avx2 = {&F32TileImpl<Avx2Isa>, Avx2Isa::kDirectMaxTokens, Avx2Isa::kWideTokens};
const Q8Dots kQ8DotsAvx2 = {&DotQ41, &DotQ80};

}  // namespace ctxpar::compute::linear_internal
