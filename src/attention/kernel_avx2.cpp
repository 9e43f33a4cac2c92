// The AVX2 + FMA path (8 lanes); compiled with -mavx2 -mfma -mf16c, run only where cpuid has AVX2
// and FMA (every such CPU has F16C, which the fp8 KV widening uses).
#include <immintrin.h>

#include <type_traits>

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
  // e4m3 widens to 2^-8 of its values (kernel_impl.h's WidenShortfall).
  static constexpr float Shortfall(Fp8E4M3) { return 256.0f; }
  // 32 codes of a line and whether any is e4m3's NaN, tested once per line.
  struct E4M3Words {
    __m256i w;
    bool nan;
  };
  template <class KElem>
  static auto LoadWords(const KElem* p) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    if constexpr (std::is_same_v<KElem, Fp8E4M3>) {
      const __m256i seven = _mm256_set1_epi8(0x7f);
      return E4M3Words{
          w, _mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_and_si256(w, seven), seven)) != 0};
    } else {
      return w;
    }
  }
  template <class KElem, int x>
  static V Part(__m256i w, bool nan = false) {
    if constexpr (std::is_same_v<KElem, uint16_t>) {
      return _mm256_castsi256_ps(x == 0 ? _mm256_slli_epi32(w, 16)
                                        : _mm256_and_si256(w, I(static_cast<int>(0xffff0000u))));
    } else {
      // Byte x of each word to the top byte of a half: four halves per 128-bit lane, then the
      // two lanes' low halves side by side.
      const __m256i idx = _mm256_setr_epi8(
          -1, x, -1, 4 + x, -1, 8 + x, -1, 12 + x, -1, -1, -1, -1, -1, -1, -1, -1,  //
          -1, x, -1, 4 + x, -1, 8 + x, -1, 12 + x, -1, -1, -1, -1, -1, -1, -1, -1);
      const __m256i spread = _mm256_shuffle_epi8(w, idx);
      const __m128i halves = _mm256_castsi256_si128(_mm256_permute4x64_epi64(spread, 0x08));
      return FromHalves(KElem{}, halves, nan);
    }
  }
  template <class KElem, int x>
  static V Part(const E4M3Words& w) {
    return Part<KElem, x>(w.w, w.nan);
  }
  static __m256i I(int x) { return _mm256_set1_epi32(x); }
  // 8 halves holding an fp8 code in their top byte each, widened through F16C's vcvtph2ps: an
  // e5m2 code is a half's top byte; e4m3's sign and seven bits, placed as a half's sign and bits
  // 13..7, are 2^-8 of its value (subnormals included), and its NaN (S.1111.111) is set apart
  // where `nan` says the codes may hold one. dtype.h's bits, up to e4m3's 2^-8.
  static V FromHalves(Fp8E5M2, __m128i h, bool) { return _mm256_cvtph_ps(h); }
  static V FromHalves(Fp8E4M3, __m128i h, bool nan) {
    // Arithmetic shift by one, bit 14 cleared: the sign stays, the seven bits move to 13..7.
    const __m128i half =
        _mm_and_si128(_mm_srai_epi16(h, 1), _mm_set1_epi16(static_cast<short>(0xbfff)));
    const V r = _mm256_cvtph_ps(half);
    if (__builtin_expect(!nan, 1)) return r;
    const __m128i is_nan =
        _mm_cmpeq_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7f00)), _mm_set1_epi16(0x7f00));
    return _mm256_blendv_ps(r, _mm256_castsi256_ps(I(0x7fc00000)),
                            _mm256_castsi256_ps(_mm256_cvtepi16_epi32(is_nan)));
  }
  template <class F8>
  requires kIsFp8<F8>
  static V Load(const F8* p) {
    const __m128i codes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return FromHalves(F8{}, _mm_unpacklo_epi8(_mm_setzero_si128(), codes), true);
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
