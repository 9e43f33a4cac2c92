// The AVX2 + FMA path (8 lanes); compiled with -mavx2 -mfma, run only where cpuid has both.
#include <immintrin.h>

#include "attention/kernel.h"

namespace ctxpar::attention_internal {
namespace {

#include "attention/kernel_impl.h"
#include "attention/kernel_tiles.h"

struct Avx2Isa {
  using V = __m256;
  using QElem = float;
  static constexpr int kLanes = 8;
  static constexpr int kDotStep = 8;
  // 16 ymm registers: 2 x 4 score accumulators, 2 x 4 output accumulators plus the operands.
  static constexpr int kQkHeads = 2;
  static constexpr bool kPairedPv = false;
  static constexpr int kPvHeads = 2;
  // kTiles16 (kernel_tiles.h): 16 keys are two vectors, so 4 heads x 2 vectors of scores, and 4
  // heads x 2 vectors of d for P V, leave room in 16 registers for the operands.
  static constexpr int kTileHeads = 4;
  static constexpr int kTileSplit = 1;
  static constexpr int kTilePvVecs = 2;
  static constexpr bool kDpTiles = false;
  template <class KElem>
  static __m256i LoadWords(const KElem* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  template <class KElem, int x>
  static V Part(__m256i w) {
    if constexpr (std::is_same_v<KElem, uint16_t>) {
      return _mm256_castsi256_ps(x == 0 ? _mm256_slli_epi32(w, 16)
                                        : _mm256_and_si256(w, I(static_cast<int>(0xffff0000u))));
    } else {
      return Widen(KElem{}, _mm256_srli_epi32(w, 8 * x));
    }
  }
  static __m256i I(int x) { return _mm256_set1_epi32(x); }
  // fp8 codes in the low byte of each 32-bit lane (bits above ignored) to fp32: dtype.h's
  // Fp8E4M3ToFloat and Fp8E5M2ToFloat step for step, so the same bits for every code.
  static V Widen(Fp8E4M3, __m256i c) {
    const __m256i mag = _mm256_and_si256(c, I(0x7f));
    const __m256i m20 = _mm256_slli_epi32(mag, 20);
    const V normal = _mm256_castsi256_ps(_mm256_add_epi32(m20, I(120 << 23)));
    const V sub = _mm256_sub_ps(_mm256_castsi256_ps(_mm256_add_epi32(m20, I(121 << 23))),
                                _mm256_set1_ps(0x1.0p-6f));
    V r = _mm256_blendv_ps(normal, sub, _mm256_castsi256_ps(_mm256_cmpgt_epi32(I(8), mag)));
    r = _mm256_blendv_ps(r, _mm256_castsi256_ps(I(0x7fc00000)),
                         _mm256_castsi256_ps(_mm256_cmpeq_epi32(mag, I(0x7f))));
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, I(0x80)), 24);
    return _mm256_or_ps(r, _mm256_castsi256_ps(sign));
  }
  static V Widen(Fp8E5M2, __m256i c) {
    const __m256i w = _mm256_slli_epi32(c, 24);
    const __m256i sign = _mm256_and_si256(w, I(static_cast<int>(0x80000000u)));
    const __m256i two_w = _mm256_add_epi32(w, w);
    const V normal =
        _mm256_mul_ps(_mm256_castsi256_ps(_mm256_add_epi32(_mm256_srli_epi32(two_w, 4),
                                                           I(static_cast<int>(0xE0u << 23)))),
                      _mm256_set1_ps(0x1.0p-112f));
    const V denormal = _mm256_sub_ps(
        _mm256_castsi256_ps(_mm256_or_si256(_mm256_srli_epi32(two_w, 17), I(126 << 23))),
        _mm256_set1_ps(0.5f));
    const __m256i small = _mm256_cmpeq_epi32(_mm256_srli_epi32(two_w, 27), I(0));
    const V r = _mm256_blendv_ps(normal, denormal, _mm256_castsi256_ps(small));
    return _mm256_or_ps(r, _mm256_castsi256_ps(sign));
  }
  template <class F8>
  requires kIsFp8<F8>
  static V Load(const F8* p) {
    return Widen(F8{}, _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static V Zero() { return _mm256_setzero_ps(); }
  static V Set1(float x) { return _mm256_set1_ps(x); }
  static V Load(const float* p) { return _mm256_loadu_ps(p); }
  static V Load(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static void Store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V Add(V a, V b) { return _mm256_add_ps(a, b); }
  static V Mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V Max(V a, V b) { return _mm256_max_ps(a, b); }
  static V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static float ReduceMax(V v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
  }
  static float ReduceAdd(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
  // 2^x by x = n + f, |f| <= 1/2, 2^f by its degree-7 Taylor polynomial (relative error below
  // 2e-7); exponents below -126 give 0 (-inf included), where the scaling would leave the normal
  // range.
  static V Exp2(V x) {
    const V keep = _mm256_cmp_ps(x, _mm256_set1_ps(-126.0f), _CMP_GE_OQ);
    x = _mm256_max_ps(x, _mm256_set1_ps(-126.0f));
    const V n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const V f = _mm256_sub_ps(x, n);
    V p = _mm256_set1_ps(1.5252734e-5f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.5403530e-4f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.3333558e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.6181291e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.5504109e-2f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.4022651e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.9314718e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
    const V r = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e));
    return _mm256_and_ps(r, keep);
  }
  static void Reduce4(V a, V b, V c, V d, float* out) {
    const V t = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1)));
  }
  static void PrepareQ(const float* q, float scale, QElem* out, int n) {
    for (int i = 0; i < n; i += kLanes) Store(out + i, Mul(Load(q + i), Set1(scale)));
  }
  template <class KElem>
  static V Dot(V acc, const QElem* q, const KElem* k) {
    return Fma(Load(q), Load(k), acc);
  }
};

}  // namespace

void AttendAvx2F32(const KernelArgs& args) {
  args.tiles ? AttendTiles<Avx2Isa, float>(args) : Attend<Avx2Isa, float>(args);
}
void AttendAvx2Bf16(const KernelArgs& args) {
  args.tiles ? AttendTiles<Avx2Isa, uint16_t>(args) : Attend<Avx2Isa, uint16_t>(args);
}
void AttendAvx2Fp8E4M3(const KernelArgs& args) {
  args.tiles ? AttendTiles<Avx2Isa, Fp8E4M3>(args) : Attend<Avx2Isa, Fp8E4M3>(args);
}
void AttendAvx2Fp8E5M2(const KernelArgs& args) {
  args.tiles ? AttendTiles<Avx2Isa, Fp8E5M2>(args) : Attend<Avx2Isa, Fp8E5M2>(args);
}

}  // namespace ctxpar::attention_internal
