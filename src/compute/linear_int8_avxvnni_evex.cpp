// The AVX-VNNI kernel (linear_int8_avxvnni.cpp) with the AVX512-VNNI/VL encoding of the same
// 256-bit vpdpbusd: what CTXPAR_INT8_ISA=avx_vnni runs on CPUs with AVX-512 VNNI but not AVX-VNNI
// (Zen 4, Ice Lake), so that the 256-bit kernel's body is tested there. Compiled with AVX2, FMA,
// F16C, AVX-512 F/BW/VL and VNNI, run only where cpuid has them.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "compute/linear_int8.h"

namespace ctxpar::compute::int8_internal {
namespace {

#include "compute/linear_int8_ymm.h"

}  // namespace

void Int8TileAvxVnniEvex(const Int8Tile& t) { YmmTile<VnniDot<true>>(t); }

}  // namespace ctxpar::compute::int8_internal
