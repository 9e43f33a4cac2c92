// The AVX-512 BF16 path for bf16 KV: q . k by vdpbf16ps on Q rounded to bf16 once per task
// (attention.h states the accuracy); compiled with -mavx512bf16, run only where cpuid has it.
#include <immintrin.h>

#include "attention/kernel.h"

namespace ctxpar::attention_internal {
namespace {

#include "attention/kernel_impl.h"
#include "attention/simd_avx512.h"

struct Avx512DpBf16Isa : Avx512Isa {
  using QElem = uint16_t;
  static constexpr int kDotStep = 32;
  // Q times scale, rounded to nearest-even bf16, in the element order of the K row (n % 32 == 0).
  static void PrepareQ(const float* q, float scale, QElem* out, int n) {
    const V s = Set1(scale);
    for (int i = 0; i < n; i += 32) {
      const __m512bh h = _mm512_cvtne2ps_pbh(Mul(Load(q + i + 16), s), Mul(Load(q + i), s));
      _mm512_storeu_si512(out + i, reinterpret_cast<const __m512i&>(h));
    }
  }
  static V Dot(V acc, const QElem* q, const uint16_t* k) {
    const __m512i qv = _mm512_loadu_si512(q);
    const __m512i kv = _mm512_loadu_si512(k);
    return _mm512_dpbf16_ps(acc, reinterpret_cast<const __m512bh&>(qv),
                            reinterpret_cast<const __m512bh&>(kv));
  }
};

}  // namespace

void AttendAvx512DpBf16(const KernelArgs& args) { Attend<Avx512DpBf16Isa, uint16_t>(args); }

}  // namespace ctxpar::attention_internal
