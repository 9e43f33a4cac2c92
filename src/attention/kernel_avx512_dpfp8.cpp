// fp8 KV (e4m3fn, e5m2) in kTiles16 pages on the AVX-512 BF16 path: each code becomes the bf16
// of its value by two 128-entry byte lookups (vpermi2b: the high and low bytes), exact for every
// code (subnormals included: each fp8 value is a normal bf16; NaN stays NaN, e5m2's infinities
// stay infinite), and both products then run on vdpbf16ps as in kernel_avx512_bf16.cpp, with Q and
// the softmax weights rounded to bf16 (attention.h states the accuracy). kRows pages take
// kernel_avx512_fp8.cpp's exact-fp32 kernel. Compiled with -mavx512bf16 -mavx512vbmi, run where
// cpuid has both.
#include <immintrin.h>

#include <array>
#include <cstdint>

#include "attention/kernel.h"

namespace ctxpar::attention_internal {
namespace {

#include "attention/kernel_impl.h"
#include "attention/kernel_tiles.h"
#include "attention/simd_avx512.h"
#include "attention/simd_avx512_bf16.h"

// The bf16 bits of the magnitude code m (0..127; the sign is bit 7 of the code, set apart).
constexpr uint16_t Bf16OfMagnitude(Fp8E4M3, int m) {
  const int e = m >> 3, f = m & 7;
  if (e == 15 && f == 7) return 0x7fc0;  // e4m3fn's only NaN
  if (e != 0) return static_cast<uint16_t>((e + 120) << 7 | f << 4);
  if (f == 0) return 0;
  const int p = f >= 4 ? 2 : f >= 2 ? 1 : 0;  // f * 2^-9 = 2^(p - 9) * (1 + (f - 2^p) / 2^p)
  return static_cast<uint16_t>((p - 9 + 127) << 7 | (f - (1 << p)) << (7 - p));
}
constexpr uint16_t Bf16OfMagnitude(Fp8E5M2, int m) {
  const int e = m >> 2, f = m & 3;
  if (e == 31) return f == 0 ? 0x7f80 : 0x7fc0;
  if (e != 0) return static_cast<uint16_t>((e + 112) << 7 | f << 5);
  if (f == 0) return 0;
  const int p = f >= 2 ? 1 : 0;  // f * 2^-16
  return static_cast<uint16_t>((p - 16 + 127) << 7 | (f - (1 << p)) << (7 - p));
}

// [high bytes of codes 0-63, 64-127, low bytes of codes 0-63, 64-127]: vpermi2b's two tables each.
template <class F8>
constexpr std::array<std::array<uint8_t, 64>, 4> Bf16Bytes() {
  std::array<std::array<uint8_t, 64>, 4> t{};
  for (int m = 0; m < 128; ++m) {
    const uint16_t b = Bf16OfMagnitude(F8{}, m);
    t[m / 64][m % 64] = static_cast<uint8_t>(b >> 8);
    t[2 + m / 64][m % 64] = static_cast<uint8_t>(b & 0xff);
  }
  return t;
}
template <class F8>
alignas(64) constexpr auto kBf16Bytes = Bf16Bytes<F8>();

// vpshufb control: in each 16-byte chunk (four words of four codes), elements 0 and 1 of the four
// words, then elements 2 and 3, so that vpunpck{l,h}bw make word-lanes of bf16 pairs in word order.
constexpr std::array<uint8_t, 64> ArrangeIndex() {
  std::array<uint8_t, 64> idx{};
  for (int c = 0; c < 4; ++c) {
    for (int w = 0; w < 4; ++w) {
      for (int b = 0; b < 2; ++b) {
        idx[16 * c + 2 * w + b] = static_cast<uint8_t>(4 * w + b);
        idx[16 * c + 8 + 2 * w + b] = static_cast<uint8_t>(4 * w + 2 + b);
      }
    }
  }
  return idx;
}
alignas(64) constexpr std::array<uint8_t, 64> kArrange = ArrangeIndex();

// A line of 64 codes (16 words of four elements) as two vectors of 16 bf16 pairs: pairs[0] lane l
// holds elements 0 and 1 of word l, pairs[1] elements 2 and 3.
template <class F8>
class Widener {
 public:
  Widener()
      : arrange_(_mm512_load_si512(kArrange.data())),
        hi0_(_mm512_load_si512(kBf16Bytes<F8>[0].data())),
        hi1_(_mm512_load_si512(kBf16Bytes<F8>[1].data())),
        lo0_(_mm512_load_si512(kBf16Bytes<F8>[2].data())),
        lo1_(_mm512_load_si512(kBf16Bytes<F8>[3].data())) {}

  __attribute__((always_inline)) void operator()(const F8* line, __m512i pairs[2]) const {
    const __m512i c = _mm512_shuffle_epi8(_mm512_loadu_si512(line), arrange_);
    const __m512i lo = _mm512_permutex2var_epi8(lo0_, c, lo1_);
    // The high byte with the code's sign: hi | (c & 0x80).
    const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(hi0_, c, hi1_), c,
                                                 _mm512_set1_epi8(static_cast<char>(0x80)), 0xf8);
    pairs[0] = _mm512_unpacklo_epi8(lo, hi);
    pairs[1] = _mm512_unpackhi_epi8(lo, hi);
  }

 private:
  __m512i arrange_, hi0_, hi1_, lo0_, lo1_;
};

__attribute__((always_inline)) inline __m512 Dp(__m512 acc, uint32_t pair, __m512i v) {
  const __m512i b = _mm512_set1_epi32(static_cast<int>(pair));
  return _mm512_dpbf16_ps(acc, reinterpret_cast<const __m512bh&>(b),
                          reinterpret_cast<const __m512bh&>(v));
}

struct Avx512DpFp8Isa : Avx512Bf16Rounding {
  static constexpr bool kDpTiles = true;

  // A K line is 16 keys x four d: its pairs meet Q's pairs of those d, broadcast.
  template <int HB, int kD, class F8>
  static void TileScores(const uint16_t* q, int dqk_arg, const F8* kt, const TilePrefetch* pf,
                         float* s) {
    const int dqk = kD != 0 ? kD : dqk_arg;
    const Widener<F8> widen;
    const auto* qw = reinterpret_cast<const uint32_t*>(q);  // Q's bf16 pairs
    V acc[HB][2];
    for (int i = 0; i < HB; ++i) acc[i][0] = acc[i][1] = Zero();
    for (int line = 0; line < dqk / 4; ++line) {
      if (pf != nullptr) pf->Line(static_cast<int64_t>(line) * 64);
      __m512i k[2];
      widen(kt + line * 64, k);
      for (int i = 0; i < HB; ++i) {
        const uint32_t* qi = qw + i * (dqk / 2) + 2 * line;
        acc[i][0] = Dp(acc[i][0], qi[0], k[0]);
        acc[i][1] = Dp(acc[i][1], qi[1], k[1]);
      }
    }
    for (int i = 0; i < HB; ++i) Store(s + i * kTileKeys, Add(acc[i][0], acc[i][1]));
  }

  // A V line is 16 d x four keys: its pairs meet the weights' pairs of those keys, broadcast.
  template <int HB, int DB, class F8>
  static void TilePvChunk(const uint32_t* pairs, const VRows<F8>& v, int dv, int d0,
                          const TilePrefetch* pf, float* o) {
    const Widener<F8> widen;
    V acc[HB][DB];
    for (int i = 0; i < HB; ++i) {
      for (int b = 0; b < DB; ++b) acc[i][b] = Load(o + i * dv + d0 + b * kLanes);
    }
    for (int w = v.lo; w < v.hi; ++w) {
      const F8* row = v.row[w] + static_cast<int64_t>(d0) * 4;
      for (int b = 0; b < DB; ++b) {
        if (pf != nullptr) pf->Line((static_cast<int64_t>(w) * dv + d0) * 4 + b * 64);
        __m512i vv[2];
        widen(row + b * 64, vv);
        for (int i = 0; i < HB; ++i) {
          const uint32_t* pi = pairs + i * (kTileKeys / 2) + 2 * w;
          acc[i][b] = Dp(Dp(acc[i][b], pi[0], vv[0]), pi[1], vv[1]);
        }
      }
    }
    for (int i = 0; i < HB; ++i) {
      for (int b = 0; b < DB; ++b) Store(o + i * dv + d0 + b * kLanes, acc[i][b]);
    }
  }
};

}  // namespace

void AttendAvx512DpFp8E4M3(const KernelArgs& args) {
  args.tiles ? AttendTiles<Avx512DpFp8Isa, Fp8E4M3>(args) : AttendAvx512Fp8E4M3(args);
}
void AttendAvx512DpFp8E5M2(const KernelArgs& args) {
  args.tiles ? AttendTiles<Avx512DpFp8Isa, Fp8E5M2>(args) : AttendAvx512Fp8E5M2(args);
}

}  // namespace ctxpar::attention_internal
