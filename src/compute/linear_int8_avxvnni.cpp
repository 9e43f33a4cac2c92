// The AVX-VNNI kernel of the int8 path (linear_int8.h), for CPUs with the VEX-encoded vpdpbusd
// but no AVX-512: each instruction adds 4 bytes of 8 rows. As in the AVX512-VNNI kernel, the
// types with a min take q (0..31) as the unsigned operand; the signed types take the activations
// plus 128 (x ^ 0x80) and subtract 128 * sum(q) after, exactly. Compiled with AVX2, FMA, F16C
// (fp16 scales) and AVX-VNNI, run only where cpuid has them.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "compute/linear_int8.h"

namespace ctxpar::compute::int8_internal {
namespace {

#include "compute/linear_int8_ymm.h"

struct VnniDot {
  static __m256i Weights(__m256i q) { return q; }
  template <bool kMin>
  static void Add(__m256i& isum, __m256i w, __m256i, __m256i x) {
    isum = kMin ? _mm256_dpbusd_avx_epi32(isum, w, x)
                : _mm256_dpbusd_avx_epi32(isum, _mm256_xor_si256(x, _mm256_set1_epi8(-128)), w);
  }
  static __m256i Widen(__m256i part) { return part; }
  static int PartLines(const Int8Pack& w) { return w.sub / 4; }
  static __m256i Exact(__m256i isum, __m256i sum128) { return _mm256_sub_epi32(isum, sum128); }
};

}  // namespace

void Int8TileAvxVnni(const Int8Tile& t) { YmmTile<VnniDot>(t); }

}  // namespace ctxpar::compute::int8_internal
