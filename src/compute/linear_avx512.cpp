// The AVX-512 kernels (16 lanes: one register is one output's 16 canonical lanes, taking
// elements 0-15 then 16-31 of each block) and the AVX512-VNNI int8 dot products; compiled with
// AVX-512 F/BW/VL flags, run only where cpuid has them (VNNI: where it also has avx512vnni).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "compute/linear_kernels.h"

namespace ctxpar::compute::linear_internal {
namespace {

#include "compute/linear_x86.h"

__m512 HalfAt(const std::uint8_t* p) { return _mm512_cvtph_ps(_mm256_set1_epi16(HalfBits(p))); }

struct Avx512Isa {
  static constexpr int kParts = 2;
  using V = __m512;
  using Acc = __m512;
  struct Block {
    __m512 v[kParts];
  };
  // 32 registers: the widened path's 4 x 6 outputs, four weight parts and one activation part.
  static constexpr int kDirectGroup = 8;
  static constexpr int kDirectRows[kDirectGroup] = {8, 6, 6, 4, 4, 3, 3, 2};
  static constexpr bool kDirectWeightsFirst = true;
  static constexpr int kDirectMaxTokens = 8;
  static constexpr int kWideRows = 4;
  static constexpr int kWideTokens = 6;
  // Gemma 3's o rows (32 blocks) whole: in pieces of 24 and 8 they ran 10-19 % slower.
  static constexpr int kWideRunBlocks = 32;
  static constexpr int kChains = 1;

  static void Prefetch(const std::uint8_t* p) {
    _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
  }
  static Acc Zero() { return _mm512_setzero_ps(); }
  static V Load(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static Block DequantQ41(const std::uint8_t* blk) {
    const __m512 d = HalfAt(blk);
    const __m512 m = HalfAt(blk + 2);
    // One byte per 32-bit lane: its low nibble is element j, its high nibble element 16 + j.
    const __m512i a =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 4)));
    return {{_mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(a, _mm512_set1_epi32(0xF))), d, m),
             _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(a, 4)), d, m)}};
  }
  static Block DequantQ80(const std::uint8_t* blk) {
    const __m512 d = HalfAt(blk);
    Block w;
    for (int p = 0; p < kParts; ++p) {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2 + 16 * p));
      w.v[p] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), d);
    }
    return w;
  }
  // The block's 32 values q - 16 as int8 in element order (nibbles of bytes 0-15 low, then high;
  // 16 subtracted where qh's bit is clear), then widened 16 at a time.
  static Block DequantQ50(const std::uint8_t* blk) {
    const __m512 d = HalfAt(blk);
    std::uint32_t qh;
    std::memcpy(&qh, blk + 2, 4);
    const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 6));
    const __m256i nib = _mm256_and_si256(
        _mm256_inserti128_si256(_mm256_castsi128_si256(qs), _mm_srli_epi16(qs, 4), 1),
        _mm256_set1_epi8(0xF));
    const __m256i q = _mm256_mask_sub_epi8(nib, _cvtu32_mask32(~qh), nib, _mm256_set1_epi8(16));
    return {{_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q))), d),
             _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1))),
                           d)}};
  }
  static Block LoadGroup(const float* f) { return {{_mm512_loadu_ps(f), _mm512_loadu_ps(f + 16)}}; }
  static Block DequantQ40(const std::uint8_t* blk) {
    const __m512 d = HalfAt(blk);
    // One byte per 32-bit lane: its low nibble is element j, its high nibble element 16 + j.
    const __m512i a =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2)));
    const __m512i eight = _mm512_set1_epi32(8);
    const __m512i lo = _mm512_sub_epi32(_mm512_and_si512(a, _mm512_set1_epi32(0xF)), eight);
    const __m512i hi = _mm512_sub_epi32(_mm512_srli_epi32(a, 4), eight);
    return {{_mm512_mul_ps(_mm512_cvtepi32_ps(lo), d), _mm512_mul_ps(_mm512_cvtepi32_ps(hi), d)}};
  }
  // The block's 32 values q (0..31) as bytes in element order (16 added where qh's bit is set).
  static Block DequantQ51(const std::uint8_t* blk) {
    const __m512 d = HalfAt(blk);
    const __m512 m = HalfAt(blk + 2);
    std::uint32_t qh;
    std::memcpy(&qh, blk + 4, 4);
    const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 8));
    const __m256i nib = _mm256_and_si256(
        _mm256_inserti128_si256(_mm256_castsi128_si256(qs), _mm_srli_epi16(qs, 4), 1),
        _mm256_set1_epi8(0xF));
    const __m256i q = _mm256_mask_add_epi8(nib, _cvtu32_mask32(qh), nib, _mm256_set1_epi8(16));
    return {
        {_mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(q))), d, m),
         _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(q, 1))),
                         d, m)}};
  }
  // Unquantized groups: part p is elements [16p, 16p + 16).
  static Block DequantF32(const std::uint8_t* blk) {
    const auto* f = reinterpret_cast<const float*>(blk);
    return {{_mm512_loadu_ps(f), _mm512_loadu_ps(f + 16)}};
  }
  static Block DequantF16(const std::uint8_t* blk) {
    Block w;
    for (int p = 0; p < kParts; ++p) {
      w.v[p] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32 * p)));
    }
    return w;
  }
  static Block DequantBF16(const std::uint8_t* blk) {
    Block w;
    for (int p = 0; p < kParts; ++p) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32 * p));
      w.v[p] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
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
      const __mmask32 set = _mm256_test_epi8_mask(h, _mm256_set1_epi8(1 << kBit));
      q = _mm256_mask_add_epi8(q, set, q, _mm256_set1_epi8(16));
    }
    const __m512 vd = _mm512_set1_ps(d), vm = _mm512_set1_ps(m);
    return {
        {_mm512_fmsub_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(q))), vd,
                         vm),
         _mm512_fmsub_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(q, 1))),
                         vd, vm)}};
  }
  template <int kShiftL, int kShiftH>
  static Block DequantQ6K(const std::uint8_t* ql, const std::uint8_t* qh, float d0, float d1) {
    const __m256i l = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh));
    const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(l, kShiftL), _mm256_set1_epi8(0xF));
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(h, kShiftH), _mm256_set1_epi8(3));
    const __m256i q =
        _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), _mm256_set1_epi8(32));
    return {{_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q))),
                           _mm512_set1_ps(d0)),
             _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1))),
                           _mm512_set1_ps(d1))}};
  }
  static V ZeroV() { return Zero(); }
  static void FmaV(V& a, V w, V x) { a = _mm512_fmadd_ps(w, x, a); }
  static void Fma(Acc& a, int, V w, V x) { FmaV(a, w, x); }
  static void SetChain(Acc& a, int, V v) { a = v; }
  // linear.h's first step, lanes l + 8 onto l: the two halves added.
  static __m256 Halves(const Acc& a) {
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
    return _mm256_add_ps(_mm512_castps512_ps256(a), hi);
  }
  static float Reduce(const Acc& a) { return Sum8(Halves(a)); }
  static void Reduce4(const Acc& a, const Acc& b, const Acc& c, const Acc& d, float* out) {
    Tree4(Halves(a), Halves(b), Halves(c), Halves(d), out);
  }
  // Sixteen outputs by linear.h's tree at once, each add with the same operands as Reduce's:
  // in[4 * k + r] is token k's row r; y + k * ldy receives that token's four rows. Each step
  // pairs registers so that one add serves two, four, eight and then sixteen outputs (46
  // instructions where four Reduce4 take about 90, most of them on the FMA ports' shuffle unit).
  static void Reduce16(const Acc (&in)[16], float* y, std::size_t ldy) {
    // Fed transposed (slot 4j + c takes output 4c + j), the last step leaves output i in lane i.
    __m512 a[16];
    for (int j = 0; j < 4; ++j) {
      for (int c = 0; c < 4; ++c) a[4 * j + c] = in[4 * c + j];
    }
    // Lanes l + 8 onto l: register k holds slot 2k's 8 sums, then slot 2k + 1's.
    __m512 s1[8];
    for (int k = 0; k < 8; ++k) {
      s1[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0x44),
                            _mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0xEE));
    }
    // Lanes l + 4 onto l: quarter c of register m holds slot 4m + c's 4 sums.
    __m512 s2[4];
    for (int m = 0; m < 4; ++m) {
      s2[m] = _mm512_add_ps(_mm512_shuffle_f32x4(s1[2 * m], s1[2 * m + 1], 0x88),
                            _mm512_shuffle_f32x4(s1[2 * m], s1[2 * m + 1], 0xDD));
    }
    // Lanes l + 2 onto l: quarter c of register n holds slots 8n + c and 8n + 4 + c, 2 sums each.
    __m512 s3[2];
    for (int n = 0; n < 2; ++n) {
      s3[n] = _mm512_add_ps(_mm512_shuffle_ps(s2[2 * n], s2[2 * n + 1], 0x44),
                            _mm512_shuffle_ps(s2[2 * n], s2[2 * n + 1], 0xEE));
    }
    // Lane 1 onto 0: lane 4c + j holds slot 4j + c, which is output 4c + j.
    const __m512 s4 =
        _mm512_add_ps(_mm512_shuffle_ps(s3[0], s3[1], 0x88), _mm512_shuffle_ps(s3[0], s3[1], 0xDD));
    _mm_storeu_ps(y, _mm512_castps512_ps128(s4));
    _mm_storeu_ps(y + ldy, _mm512_extractf32x4_ps(s4, 1));
    _mm_storeu_ps(y + 2 * ldy, _mm512_extractf32x4_ps(s4, 2));
    _mm_storeu_ps(y + 3 * ldy, _mm512_extractf32x4_ps(s4, 3));
  }
};

#include "compute/linear_impl.h"

#define CTXPAR_VNNI __attribute__((target("avx512vnni")))

CTXPAR_VNNI float DotQ41Vnni(const std::uint8_t* w, const ActBlock* x, int nb) {
  __m256 acc = _mm256_setzero_ps();
  float msum = 0.0f;
  for (int b = 0; b < nb; ++b) {
    const std::uint8_t* blk = w + b * 20;
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].q));
    const __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), Nibbles(blk + 4), a);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(Scale(blk) * x[b].d), acc);
    msum += Scale(blk + 2) * x[b].s;
  }
  return Sum8(acc) + msum;
}

CTXPAR_VNNI float DotQ80Vnni(const std::uint8_t* w, const ActBlock* x, int nb) {
  __m256 acc = _mm256_setzero_ps();
  for (int b = 0; b < nb; ++b) {
    const std::uint8_t* blk = w + b * 34;
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].q));
    // dpbusd multiplies unsigned by signed: move w's sign onto a.
    const __m256i p =
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(q), _mm256_sign_epi8(a, q));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(Scale(blk) * x[b].d), acc);
  }
  return Sum8(acc);
}

}  // namespace

const F32Kernel kF32Avx512 = {&F32TileImpl<Avx512Isa>, Avx512Isa::kDirectMaxTokens,
                              Avx512Isa::kWideTokens};
const Q8Dots kQ8DotsVnni = {&DotQ41Vnni, &DotQ80Vnni};

}  // namespace ctxpar::compute::linear_internal
