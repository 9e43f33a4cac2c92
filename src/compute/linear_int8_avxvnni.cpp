// The AVX-VNNI kernel of the int8 path (linear_int8.h), for CPUs with the VEX-encoded vpdpbusd
// but no AVX-512: each instruction adds 4 bytes of 8 rows. As in the AVX512-VNNI kernel, the
// weights are the unsigned operand, u = q + bias (Int8Pack::bias: 0 for the types with a min,
// whose q is 0..31), and bias * sum(xq) is subtracted after, exactly. Compiled with AVX2, FMA, F16C
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
  static constexpr bool kBiased = true;
  static __m256i Weights(__m256i q, __m256i bias) { return _mm256_add_epi8(q, bias); }
  template <bool kSigned>
  static void Add(__m256i& isum, __m256i w, __m256i, __m256i x) {
    isum = _mm256_dpbusd_avx_epi32(isum, w, x);
  }
  static __m256i Widen(__m256i part) { return part; }
  static int PartLines(const Int8Pack& w) { return w.sub / 4; }
};

}  // namespace

void Int8TileAvxVnni(const Int8Tile& t) { YmmTile<VnniDot>(t); }

}  // namespace ctxpar::compute::int8_internal
