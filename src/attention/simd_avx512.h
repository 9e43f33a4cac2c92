// SIMD traits for the AVX-512 paths (internal; see kernel_impl.h for the interface). Included
// inside an anonymous namespace by kernel_avx512.cpp and kernel_avx512_bf16.cpp, both compiled
// with -mavx512f -mavx512bw -mavx512vl.

// No include guard on purpose: each ISA's file includes this once inside its own namespace.

struct Avx512Isa {
  using V = __m512;
  using QElem = float;
  static constexpr int kLanes = 16;
  static constexpr int kDotStep = 16;
  // 32 zmm registers: 6 x 4 accumulators, 4 operands of the shared side and one broadcast.
  static constexpr int kQkHeads = 6;
  static constexpr bool kPairedPv = false;
  static constexpr int kPvHeads = 6;
  // kTiles16 (kernel_tiles.h): 4 heads x 4 partial sums, and 4 heads x 4 vectors of d for P V.
  static constexpr int kTileHeads = 4;
  static constexpr int kTileSplit = 4;
  static constexpr int kTilePvVecs = 4;
  static constexpr bool kDpTiles = false;
  template <class KElem>
  static __m512i LoadWords(const KElem* p) {
    return _mm512_loadu_si512(p);
  }
  // bf16 element x of each word (fp8 is Avx512Fp8Isa's, kernel_avx512_fp8.cpp).
  template <class KElem, int x>
  static V Part(__m512i w) {
    static_assert(std::is_same_v<KElem, uint16_t>);
    return _mm512_castsi512_ps(x == 0 ? _mm512_slli_epi32(w, 16)
                                      : _mm512_and_si512(w, _mm512_set1_epi32(-65536)));
  }
  static V Zero() { return _mm512_setzero_ps(); }
  static V Set1(float x) { return _mm512_set1_ps(x); }
  static V Load(const float* p) { return _mm512_loadu_ps(p); }
  static V Load(const uint16_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static void Store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V Add(V a, V b) { return _mm512_add_ps(a, b); }
  static V Mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V Max(V a, V b) { return _mm512_max_ps(a, b); }
  static V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static float ReduceMax(V v) { return _mm512_reduce_max_ps(v); }
  static float ReduceAdd(V v) { return _mm512_reduce_add_ps(v); }
  // 2^x as in the AVX2 path, with vscalefps doing the exponent.
  static V Exp2(V x) {
    const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-126.0f), _CMP_GE_OQ);
    const V n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const V f = _mm512_sub_ps(x, n);
    V p = _mm512_set1_ps(1.5252734e-5f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.5403530e-4f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291e-3f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504109e-2f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022651e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718e-1f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps(keep, p, n);
  }
  static void Reduce4(V a, V b, V c, V d, float* out) {
    // Per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3] and the same for c, d; then pairs of
    // doubles line up [a, b, c, d]; then the four lanes are summed.
    const V ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    const V cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
    const __m512d abd = _mm512_castps_pd(ab);
    const __m512d cdd = _mm512_castps_pd(cd);
    const V t = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(abd, cdd)),
                              _mm512_castpd_ps(_mm512_unpackhi_pd(abd, cdd)));
    const __m256 y =
        _mm256_add_ps(_mm512_castps512_ps256(t),
                      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(t), 1)));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(y), _mm256_extractf128_ps(y, 1)));
  }
  static void PrepareQ(const float* q, float scale, QElem* out, int n) {
    for (int i = 0; i < n; i += kLanes) Store(out + i, Mul(Load(q + i), Set1(scale)));
  }
  template <class KElem>
  static V Dot(V acc, const QElem* q, const KElem* k) {
    return Fma(Load(q), Load(k), acc);
  }
};
