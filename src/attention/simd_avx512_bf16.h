// The bf16 roundings shared by the paths that multiply bf16 pairs (internal): vdpbf16ps
// (kernel_avx512_bf16.cpp) and AMX's tdpbf16ps (kernel_amx_bf16.cpp). Included after
// simd_avx512.h inside each unit's anonymous namespace; both are compiled with -mavx512bf16.

// No include guard on purpose: each ISA's file includes this once inside its own namespace.

struct Avx512Bf16Rounding : Avx512Isa {
  using QElem = uint16_t;
  // Q times scale, rounded to nearest-even bf16, in the element order of the K row (n % 32 == 0).
  static void PrepareQ(const float* q, float scale, QElem* out, int n) {
    const V s = Set1(scale);
    for (int i = 0; i < n; i += 32) {
      const __m512bh h = _mm512_cvtne2ps_pbh(Mul(Load(q + i + 16), s), Mul(Load(q + i), s));
      _mm512_storeu_si512(out + i, reinterpret_cast<const __m512i&>(h));
    }
  }

  // The 16 weights of a head as 8 words of bf16 pairs (keys 2j, 2j + 1).
  static void PackPairs(const float* p, uint32_t* pairs) {
    const __m256bh b = _mm512_cvtneps_pbh(Load(p));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(pairs), reinterpret_cast<const __m256i&>(b));
  }
};
