// The AVX-512 path (16 lanes), fp32 and bf16 KV (bf16 widened by a shift; fp8 is
// kernel_avx512_fp8.cpp's); compiled with -mavx512f -mavx512bw -mavx512vl, run only where cpuid
// and the OS allow them.
#include <immintrin.h>

#include "attention/kernel.h"

namespace ctxpar::attention_internal {
namespace {

#include "attention/kernel_impl.h"
#include "attention/kernel_tiles.h"
#include "attention/simd_avx512.h"

}  // namespace

void AttendAvx512F32(const KernelArgs& args) {
  args.tiles ? AttendTiles<Avx512Isa, float>(args) : Attend<Avx512Isa, float>(args);
}
void AttendAvx512Bf16(const KernelArgs& args) {
  args.tiles ? AttendTiles<Avx512Isa, uint16_t>(args) : Attend<Avx512Isa, uint16_t>(args);
}

}  // namespace ctxpar::attention_internal
