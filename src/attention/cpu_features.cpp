#include "ctxpar/cpu_features.h"

#include <cstdlib>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && (defined(__x86_64__) || defined(__i386__))
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace ctxpar {

namespace {

#if defined(__x86_64__) || defined(__i386__)
// Linux asks each process to request the tile data's XSAVE state (feature 18) before its first
// tile instruction (asm/prctl.h's codes). Elsewhere XCR0 is the whole answer.
bool RequestAmxTileState() {
#if defined(__linux__)
  constexpr int kArchGetXcompPerm = 0x1022;
  constexpr int kArchReqXcompPerm = 0x1023;
  constexpr int kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
  unsigned long mask = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &mask) != 0) return false;
  return (mask >> kXfeatureXtiledata & 1) != 0;
#else
  return true;
#endif
}

uint64_t ReadXcr0() {
  uint32_t eax = 0;
  uint32_t edx = 0;
  // xgetbv is encoded by hand so that this file needs no -mxsave.
  __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

CpuFeatures Detect() {
  CpuFeatures f;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  const bool osxsave = (ecx >> 27) & 1;
  const bool fma = (ecx >> 12) & 1;
  const bool f16c = (ecx >> 29) & 1;
  if (!osxsave) return f;
  const uint64_t xcr0 = ReadXcr0();
  // The OS must save XMM and YMM state (bits 1, 2) for AVX, and opmask/ZMM state (5, 6, 7).
  const bool os_avx = (xcr0 & 0x6) == 0x6;
  const bool os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return f;
  f.fma = os_avx && fma;
  f.f16c = os_avx && f16c;
  f.avx2 = os_avx && ((ebx >> 5) & 1);
  f.avx512f = os_avx512 && ((ebx >> 16) & 1);
  f.avx512bw = os_avx512 && ((ebx >> 30) & 1);
  f.avx512vl = os_avx512 && ((ebx >> 31) & 1);
  f.avx512_vnni = f.avx512f && ((ecx >> 11) & 1);
  f.avx512_vbmi = f.avx512f && ((ecx >> 1) & 1);
  const bool os_amx = (xcr0 & 0x60000) == 0x60000 && ((edx >> 24) & 1) && RequestAmxTileState();
  f.amx_bf16 = os_amx && ((edx >> 22) & 1);
  f.amx_tile = os_amx && ((edx >> 24) & 1);
  f.amx_int8 = os_amx && ((edx >> 25) & 1);
  if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) {
    f.avx512_bf16 = f.avx512f && ((eax >> 5) & 1);
    f.avx_vnni = f.avx2 && ((eax >> 4) & 1);
  }
  return f;
}
#else
CpuFeatures Detect() { return {}; }
#endif

}  // namespace

const CpuFeatures& DetectCpuFeatures() {
  static const CpuFeatures features = Detect();
  return features;
}

CpuIsa BestCpuIsa(const CpuFeatures& f) {
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  const bool avx512 = avx2 && f.avx512f && f.avx512bw && f.avx512vl;
  if (avx512 && f.avx512_bf16 && f.amx_tile && f.amx_bf16) return CpuIsa::kAmx;
  if (avx512 && f.avx512_bf16) return CpuIsa::kAvx512Bf16;
  if (avx512) return CpuIsa::kAvx512;
  if (avx2) return CpuIsa::kAvx2;
  return CpuIsa::kScalar;
}

std::string_view CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
      return "scalar";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
    case CpuIsa::kAvx512Bf16:
      return "avx512_bf16";
    case CpuIsa::kAmx:
      return "amx";
  }
  return "unknown";
}

Expected<CpuIsa> SelectCpuIsa() {
  const CpuIsa best = BestCpuIsa(DetectCpuFeatures());
  const char* env = std::getenv("CTXPAR_CPU_ISA");
  if (env == nullptr || *env == '\0') return best;
  const std::string want(env);
  for (CpuIsa isa :
       {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16, CpuIsa::kAmx}) {
    if (want != CpuIsaName(isa)) continue;
    if (isa > best) {
      return FailedPrecondition("CTXPAR_CPU_ISA=" + want + " asks for a path this CPU lacks; " +
                                "the best it has is " + std::string(CpuIsaName(best)));
    }
    return isa;
  }
  return InvalidArgument("CTXPAR_CPU_ISA=" + want +
                         " is not one of scalar, avx2, avx512, avx512_bf16, amx");
}

}  // namespace ctxpar
