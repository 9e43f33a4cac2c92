// The AVX2 kernel of the int8 path (linear_int8.h), for CPUs without VNNI: vpmaddubsw multiplies
// unsigned by signed bytes into int16 pairs, vpmaddwd adds the pairs into int32. No sum
// saturates: the types with a min take q (0..31) as the unsigned operand (|pair| <= 2 * 31 *
// 127), the signed ones |q| (<= 128) and the activation with q's sign (|x| <= 127; |pair| <= 2 *
// 128 * 127 = 32,512). Compiled with AVX2, FMA and F16C (fp16 scales), run only where cpuid has
// them.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "compute/linear_int8.h"

namespace ctxpar::compute::int8_internal {
namespace {

#include "compute/linear_int8_ymm.h"

struct MaddDot {
  static __m256i Weights(__m256i q) { return _mm256_abs_epi8(q); }
  template <bool kMin>
  static void Add(__m256i& isum, __m256i w, __m256i q, __m256i x) {
    const __m256i signed_x = kMin ? x : _mm256_sign_epi8(x, q);
    const __m256i pairs = _mm256_maddubs_epi16(w, signed_x);
    isum = _mm256_add_epi32(isum, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
  static __m256i Exact(__m256i isum, const std::int32_t*) { return isum; }
};

}  // namespace

void Int8TileAvx2(const Int8Tile& t) { YmmTile<MaddDot>(t); }

}  // namespace ctxpar::compute::int8_internal
