// The AVX512-VNNI kernel of the int8 path (linear_int8.h): one register holds the 16 rows of a
// tile; each vpdpbusd adds 4 bytes of a sub-block for all of them. vpdpbusd multiplies unsigned
// by signed bytes: the types with a min store q in 0..31 and take it as the unsigned operand;
// the signed types take the activations plus 128 (x ^ 0x80) and subtract 128 * sum(q) after,
// exactly. Compiled with AVX-512 F/BW/VL and VNNI, run only where cpuid has them.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "compute/linear_int8.h"

namespace ctxpar::compute::int8_internal {
namespace {

// Tokens per register tile: kTokens int32 and kTokens fp32 accumulators.
constexpr int kTokens = 8;

// The 16 rows' scales of sub-block s and mins of group g as fp32, held in fp16 or fp32
// (Int8Pack::half).
__m512 Half16(const std::uint16_t* h) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h)));
}
__attribute__((always_inline)) inline __m512 ScaleLine(const Int8Pack& w, int tile, int s) {
  return w.half ? Half16(w.Scale16(tile, s)) : _mm512_loadu_ps(w.Scale(tile, s));
}
__attribute__((always_inline)) inline __m512 MinLine(const Int8Pack& w, int tile, int g) {
  return w.half ? Half16(w.Min16(tile, g)) : _mm512_loadu_ps(w.Min(tile, g));
}

// kNib: q packed two lines per line (Int8Pack::nibbles; the 4-bit types, which have a min).
template <int NT, bool kMin, bool kNib>
void Tokens(const Int8Tile& t, int t0) {
  const Int8Pack& w = *t.w;
  const int groups = w.cols / kBlock, per_group = kBlock / w.sub;
  const std::int8_t* xq[NT];
  const float* dx[NT];
  const float* xs[NT];
  for (int i = 0; i < NT; ++i) {
    xq[i] = t.x->i8.data() + std::size_t(t0 + i) * w.cols;
    dx[i] = t.x->i8_d.data() + ScaleAt(t0 + i, 0, groups);
    xs[i] = t.x->i8_xs.data() + ScaleAt(t0 + i, 0, groups);
  }
  const __m512i flip = _mm512_set1_epi32(int(0x80808080u));
  __m512 acc[NT];
  for (int i = 0; i < NT; ++i) acc[i] = _mm512_setzero_ps();
  for (int g = 0; g < groups; ++g) {
    for (int h = 0; h < per_group; ++h) {
      const int s = g * per_group + h;
      const std::int8_t* q = w.Q(t.tile, s);
      if constexpr (NT < kPrefetchTokens) PrefetchAhead(w, q);
      __m512i isum[NT];
      for (int i = 0; i < NT; ++i) isum[i] = _mm512_setzero_si512();
      auto line = [&](int k, __m512i wv) {
        for (int i = 0; i < NT; ++i) {
          std::int32_t bytes;
          std::memcpy(&bytes, xq[i] + s * w.sub + 4 * k, 4);
          const __m512i xv = _mm512_set1_epi32(bytes);
          isum[i] = kMin ? _mm512_dpbusd_epi32(isum[i], wv, xv)
                         : _mm512_dpbusd_epi32(isum[i], _mm512_xor_si512(xv, flip), wv);
        }
      };
      if constexpr (kNib) {
        const __m512i low = _mm512_set1_epi8(15);
        for (int j = 0; j < w.sub / 8; ++j) {
          const __m512i packed = _mm512_load_si512(q + j * 64);
          line(j, _mm512_and_si512(packed, low));
          line(j + w.sub / 8, _mm512_and_si512(_mm512_srli_epi16(packed, 4), low));
        }
      } else {
        for (int k = 0; k < w.sub / 4; ++k) line(k, _mm512_load_si512(q + k * 64));
      }
      const __m512 scale = ScaleLine(w, t.tile, s);
      __m512i corr = _mm512_setzero_si512();
      if (!kMin) corr = _mm512_loadu_si512(w.Sum128(t.tile, s));
      for (int i = 0; i < NT; ++i) {
        const __m512i exact = kMin ? isum[i] : _mm512_sub_epi32(isum[i], corr);
        const __m512 sd = _mm512_mul_ps(scale, _mm512_set1_ps(dx[i][g * kTileTokens]));
        acc[i] = _mm512_fmadd_ps(sd, _mm512_cvtepi32_ps(exact), acc[i]);
      }
    }
    if (kMin) {
      const __m512 mn = MinLine(w, t.tile, g);
      for (int i = 0; i < NT; ++i)
        acc[i] = _mm512_fmadd_ps(mn, _mm512_set1_ps(xs[i][g * kTileTokens]), acc[i]);
    }
  }
  const int rows = std::min(kTileRows, w.rows - t.tile * kTileRows);
  const __mmask16 mask = static_cast<__mmask16>((1u << rows) - 1);
  for (int i = 0; i < NT; ++i) {
    _mm512_mask_storeu_ps(t.y + std::size_t(t0 + i) * t.ldy + t.tile * kTileRows, mask, acc[i]);
  }
}

template <bool kMin, bool kNib, int... NT>
void Dispatch(const Int8Tile& t, int t0, int nt, std::integer_sequence<int, NT...>) {
  ((nt == NT + 1 ? Tokens<NT + 1, kMin, kNib>(t, t0) : void()), ...);
}

}  // namespace

void QuantizeRowAvx512(const float* x, int groups, std::int8_t* q, float* d, float* xs) {
  for (int g = 0; g < groups; ++g) {
    const __m512 a = _mm512_loadu_ps(x + g * kBlock);
    const __m512 b = _mm512_loadu_ps(x + g * kBlock + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
    const float dg = amax / 127.0f;
    const __m512 id = _mm512_set1_ps(dg != 0.0f ? 1.0f / dg : 0.0f);
    const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
    auto quant = [&](__m512 v) {
      const __m512 r =
          _mm512_roundscale_ps(_mm512_mul_ps(v, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      return _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(r, lo), hi));
    };
    const __m512i qa = quant(a), qb = quant(b);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + g * kBlock), _mm512_cvtepi32_epi8(qa));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + g * kBlock + 16), _mm512_cvtepi32_epi8(qb));
    d[g * kTileTokens] = dg;
    xs[g * kTileTokens] = dg * float(_mm512_reduce_add_epi32(_mm512_add_epi32(qa, qb)));
  }
}

void Int8TileVnni(const Int8Tile& tiles) {
  ForEachTile(tiles, [](const Int8Tile& t) {
    for (int t0 = t.t0; t0 < t.t0 + t.nt; t0 += kTokens) {
      const int nt = std::min(kTokens, t.t0 + t.nt - t0);
      if (t.w->nibbles) {
        Dispatch<true, true>(t, t0, nt, std::make_integer_sequence<int, kTokens>());
      } else if (t.w->has_min) {
        Dispatch<true, false>(t, t0, nt, std::make_integer_sequence<int, kTokens>());
      } else {
        Dispatch<false, false>(t, t0, nt, std::make_integer_sequence<int, kTokens>());
      }
    }
  });
}

}  // namespace ctxpar::compute::int8_internal
