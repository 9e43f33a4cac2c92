// The AVX-512 path's fp8 KV (e4m3fn, e5m2), widened through the IEEE half conversion
// (vcvtph2ps) instead of dtype.h's bit steps: an e5m2 code is a half's top byte, and e4m3's sign
// and seven bits, placed as a half's sign and bits 13..7, are 2^-8 of its value, subnormals
// included, a power of two that Q's scale and O's 1 / l take back; e4m3's NaN (S.1111.111) is
// set apart where a line holds one. The scores and outputs are those of dtype.h's bits.
// One vpermb turns a kTiles16 line (16 words of four codes) into the halves of two of its
// elements. Compiled with the AVX-512 flags and -mavx512vbmi, run where cpuid reports AVX512_VBMI
// (else the AVX2 kernels take fp8).
#include <immintrin.h>

#include <array>
#include <type_traits>

#include "attention/kernel.h"

namespace ctxpar::attention_internal {
namespace {

#include "attention/kernel_impl.h"
#include "attention/kernel_tiles.h"
#include "attention/simd_avx512.h"

// vpermb indices for the halves of elements 2p (lanes 0-15) and 2p + 1 (lanes 16-31) of 16 words:
// half L takes byte 4 (L % 16) + 2p + L / 16 of the line as its top byte.
constexpr std::array<uint8_t, 64> HalvesIndex(int p) {
  std::array<uint8_t, 64> idx{};
  for (int lane = 0; lane < 32; ++lane) {
    idx[2 * lane + 1] = static_cast<uint8_t>(4 * (lane % 16) + 2 * p + lane / 16);
  }
  return idx;
}
alignas(64) constexpr std::array<uint8_t, 64> kHalves[2] = {HalvesIndex(0), HalvesIndex(1)};
// The top bytes of the 32 halves; their low bytes are zeroed.
constexpr __mmask64 kTopBytes = 0xAAAAAAAAAAAAAAAAull;

// 64 codes of a line and whether any is e4m3's NaN (S.1111.111), tested once per line: the
// widening below sets NaN apart only then.
struct E4M3Words {
  __m512i w;
  bool nan;
};

struct Avx512Fp8Isa : Avx512Isa {
  // e4m3 widens to 2^-8 of its values (kernel_impl.h's WidenShortfall).
  static constexpr float Shortfall(Fp8E4M3) { return 256.0f; }
  // 16 halves holding a code in their top byte each.
  static V FromHalves(Fp8E5M2, __m256i h, bool) { return _mm512_cvtph_ps(h); }
  // Arithmetic shift by one, bit 14 cleared: the sign stays, the seven bits move to 13..7 (32
  // halves at once: both elements of a vpermb).
  static __m512i E4M3Halves(__m512i h) {
    return _mm512_and_si512(_mm512_srai_epi16(h, 1), _mm512_set1_epi16(static_cast<short>(0xbfff)));
  }
  // `h`: codes in the halves' top bytes; `half`: E4M3Halves of them.
  static V FromHalves(Fp8E4M3, __m256i h, __m256i half, bool nan) {
    const V r = _mm512_cvtph_ps(half);
    if (__builtin_expect(!nan, 1)) return r;
    const __mmask16 nans = _mm256_cmpeq_epi16_mask(_mm256_and_si256(h, _mm256_set1_epi16(0x7f00)),
                                                   _mm256_set1_epi16(0x7f00));
    return _mm512_mask_mov_ps(r, nans, _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000)));
  }
  static V FromHalves(Fp8E4M3, __m256i h, bool nan) {
    return FromHalves(Fp8E4M3{}, h, _mm512_castsi512_si256(E4M3Halves(_mm512_castsi256_si512(h))),
                      nan);
  }
  template <class KElem>
  static auto LoadWords(const KElem* p) {
    const __m512i w = _mm512_loadu_si512(p);
    if constexpr (std::is_same_v<KElem, Fp8E4M3>) {
      const __m512i seven = _mm512_set1_epi8(0x7f);
      return E4M3Words{w, _mm512_cmpeq_epi8_mask(_mm512_and_si512(w, seven), seven) != 0};
    } else {
      return w;
    }
  }
  // Element x of each of 16 words of four codes.
  template <class KElem, int x>
  static V Part(__m512i w, bool nan = false) {
    const __m512i idx = _mm512_load_si512(kHalves[x / 2].data());
    const __m512i halves = _mm512_maskz_permutexvar_epi8(kTopBytes, idx, w);
    auto pick = [](__m512i v) {
      return x % 2 == 0 ? _mm512_castsi512_si256(v) : _mm512_extracti64x4_epi64(v, 1);
    };
    if constexpr (std::is_same_v<KElem, Fp8E4M3>) {
      return FromHalves(KElem{}, pick(halves), pick(E4M3Halves(halves)), nan);
    } else {
      return FromHalves(KElem{}, pick(halves), nan);
    }
  }
  template <class KElem, int x>
  static V Part(const E4M3Words& w) {
    return Part<KElem, x>(w.w, w.nan);
  }
  template <class F8>
  requires kIsFp8<F8>
  static V Load(const F8* p) {
    const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return FromHalves(F8{}, _mm256_slli_epi16(_mm256_cvtepu8_epi16(codes), 8), true);
  }
  using Avx512Isa::Load;
  template <class KElem>
  static V Dot(V acc, const QElem* q, const KElem* k) {
    return Fma(Load(q), Load(k), acc);
  }
};

}  // namespace

void AttendAvx512Fp8E4M3(const KernelArgs& args) {
  args.tiles ? AttendTiles<Avx512Fp8Isa, Fp8E4M3>(args) : Attend<Avx512Fp8Isa, Fp8E4M3>(args);
}
void AttendAvx512Fp8E5M2(const KernelArgs& args) {
  args.tiles ? AttendTiles<Avx512Fp8Isa, Fp8E5M2>(args) : Attend<Avx512Fp8Isa, Fp8E5M2>(args);
}

}  // namespace ctxpar::attention_internal
