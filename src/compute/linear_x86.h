// x86 helpers shared by the AVX2 and AVX-512 kernel translation units (internal). Included
// inside their anonymous namespaces, so each copy is compiled with its unit's flags.

// lanes 0-3 + 4-7, then 0-1 + 2-3, then 0 + 1: linear.h's tree after its first step.
inline float Sum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Sum8 on four outputs at once: lanes l + 4, l + 2 and 1 onto l, each add with the same
// operands as there, two or four outputs a register. out[i] is the sum of ri's lanes.
inline void Tree4(__m256 ra, __m256 rb, __m256 rc, __m256 rd, float* out) {
  const __m256 ab =
      _mm256_add_ps(_mm256_permute2f128_ps(ra, rb, 0x20), _mm256_permute2f128_ps(ra, rb, 0x31));
  const __m256 cd =
      _mm256_add_ps(_mm256_permute2f128_ps(rc, rd, 0x20), _mm256_permute2f128_ps(rc, rd, 0x31));
  // [a0 a1 c0 c1 | b0 b1 d0 d1]
  const __m256 u = _mm256_add_ps(_mm256_shuffle_ps(ab, cd, 0x44), _mm256_shuffle_ps(ab, cd, 0xEE));
  const __m128 lo = _mm256_castps256_ps128(u);
  const __m128 hi = _mm256_extractf128_ps(u, 1);
  const __m128 acbd = _mm_add_ps(_mm_shuffle_ps(lo, hi, 0x88), _mm_shuffle_ps(lo, hi, 0xDD));
  _mm_storeu_ps(out, _mm_shuffle_ps(acbd, acbd, 0xD8));
}

inline std::int16_t HalfBits(const std::uint8_t* p) {
  std::int16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

inline float Scale(const std::uint8_t* p) {
  return _cvtsh_ss(static_cast<std::uint16_t>(HalfBits(p)));
}

// A Q4_1 block's 16 bytes as 32 unsigned bytes: low nibbles (elements 0-15), then high ones.
inline __m256i Nibbles(const std::uint8_t* qs) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(bytes, mask);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
  return _mm256_set_m128i(hi, lo);
}
