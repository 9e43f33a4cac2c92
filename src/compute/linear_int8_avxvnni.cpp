// The AVX-VNNI kernel of the int8 path (linear_int8.h), for CPUs with the VEX-encoded vpdpbusd
// but no AVX-512 (VnniDot in linear_int8_ymm.h). Compiled with AVX2, FMA, F16C (fp16 scales) and
// AVX-VNNI, run only where cpuid has them.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "compute/linear_int8.h"

namespace ctxpar::compute::int8_internal {
namespace {

#include "compute/linear_int8_ymm.h"

}  // namespace

void Int8TileAvxVnni(const Int8Tile& t) { YmmTile<VnniDot<false>>(t); }

}  // namespace ctxpar::compute::int8_internal
