// What this CPU can run, and which SIMD path the CPU kernels take (the partial attention and the
// model's matmuls, src/compute/linear.h).
//
// The kernels are compiled once per instruction set, each in its own translation unit, and the
// path is chosen at run time, so one binary runs on any x86-64. The environment variable
// CTXPAR_CPU_ISA=scalar|avx2|avx512|avx512_bf16|amx forces a path no higher than the hardware's
// (tests use it to check every path against the reference); unset or empty means the best one.
//
// Thread safety: DetectCpuFeatures caches its result and is safe to call from any thread;
// SelectCpuIsa reads the environment on every call (so do not setenv concurrently).
#pragma once

#include <string_view>

#include "ctxpar/status.h"

namespace ctxpar {

struct CpuFeatures {
  bool avx2 = false;  // the AVX2 path needs avx2, fma and f16c (half conversions: fp8 and fp16)
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;  // the AVX-512 paths need f, bw, vl and the AVX2 path's features
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512_bf16 = false;  // vdpbf16ps
  bool avx512_vbmi = false;  // vpermb: the AVX-512 fp8 KV kernels need it (else the AVX2 ones)
  // The int8 matmuls (linear.h's ActFormat::kInt8): vpdpbusd. The AMX flags are set only where
  // the OS saves the tile state (XCR0 bits 17, 18) and, on Linux, granted this process's request
  // for it (arch_prctl ARCH_REQ_XCOMP_PERM, made once by DetectCpuFeatures): without that grant
  // the first tile instruction faults.
  bool avx512_vnni = false;
  bool avx_vnni = false;
  bool amx_tile = false;
  bool amx_int8 = false;
  bool amx_bf16 = false;
};

// Ordered: each path needs everything the ones before it need. kAmx adds AMX-BF16 tiles: the
// bf16 products of the attention (bf16 KV in kTiles16 pages) and of F16 / BF16 weights.
enum class CpuIsa { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Bf16 = 3, kAmx = 4 };

// cpuid and xgetbv (the OS must save the wider registers), read once.
const CpuFeatures& DetectCpuFeatures();

// The best path the features allow.
CpuIsa BestCpuIsa(const CpuFeatures& features);

// "scalar", "avx2", "avx512", "avx512_bf16", "amx".
std::string_view CpuIsaName(CpuIsa isa);

// The path to use now: CTXPAR_CPU_ISA when set (InvalidArgument for an unknown name,
// FailedPrecondition for a path this CPU lacks), else BestCpuIsa(DetectCpuFeatures()).
Expected<CpuIsa> SelectCpuIsa();

}  // namespace ctxpar
