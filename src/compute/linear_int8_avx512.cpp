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

// Tokens per register tile of one row tile (kTokens int32 and kTokens fp32 accumulators), and of
// two row tiles (2 x kPairTokens each), which the prefill's chunks of at least kPrefillMinTokens
// take: one broadcast of a token's bytes then feeds two vpdpbusd. A decode row is slower over
// two tiles' streams at once, so it keeps one (docs/perf-model.md).
constexpr int kTokens = 8;
constexpr int kPairTokens = 4;

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
// 128 * sum(q) of the 16 rows of sub-block s (a signed type's correction for x + 128).
__attribute__((always_inline)) inline __m512i Sum128Line(const Int8Pack& w, int tile, int s) {
  const __m256i sums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.QSum(tile, s)));
  return _mm512_slli_epi32(_mm512_cvtepi16_epi32(sums), 7);
}

// R row tiles (16 * R rows) times NT tokens: each broadcast of a token's 4 bytes serves R
// vpdpbusd. Every row keeps the sequence of linear_int8.h whatever R and NT, so the bits do not
// depend on them. kSub: w.sub, known to the compiler so that it unrolls a sub-block's lines. kNib:
// q packed two lines per line (Int8Pack::nibbles; the 4-bit types, which have a min).
template <int R, int NT, int kSub, bool kMin, bool kNib>
void Tokens(const Int8Tile& t, int tile, int t0) {
  const Int8Pack& w = *t.w;
  const int groups = w.cols / kBlock, per_group = kBlock / kSub;
  const std::int8_t* xq[NT];
  const float* dx[NT];
  const float* xs[NT];
  for (int i = 0; i < NT; ++i) {
    xq[i] = t.x->i8.data() + std::size_t(t0 + i) * w.cols;
    dx[i] = t.x->i8_d.data() + ScaleAt(t0 + i, 0, groups);
    xs[i] = t.x->i8_xs.data() + ScaleAt(t0 + i, 0, groups);
  }
  const __m512i flip = _mm512_set1_epi32(int(0x80808080u));
  __m512 acc[R][NT];
  for (int r = 0; r < R; ++r) {
    for (int i = 0; i < NT; ++i) acc[r][i] = _mm512_setzero_ps();
  }
  for (int g = 0; g < groups; ++g) {
    for (int h = 0; h < per_group; ++h) {
      const int s = g * per_group + h;
      const std::int8_t* q[R];
      for (int r = 0; r < R; ++r) q[r] = w.Q(tile + r, s);
      if (t.nt < kPrefillMinTokens) {
        for (int r = 0; r < R; ++r) PrefetchAhead(w, q[r]);
      }
      __m512i isum[R][NT];
      for (int r = 0; r < R; ++r) {
        for (int i = 0; i < NT; ++i) isum[r][i] = _mm512_setzero_si512();
      }
      auto line = [&](int k, const __m512i(&wv)[R]) {
        for (int i = 0; i < NT; ++i) {
          std::int32_t bytes;
          std::memcpy(&bytes, xq[i] + s * kSub + 4 * k, 4);
          __m512i xv = _mm512_set1_epi32(bytes);
          if (!kMin) xv = _mm512_xor_si512(xv, flip);
          for (int r = 0; r < R; ++r) {
            isum[r][i] = kMin ? _mm512_dpbusd_epi32(isum[r][i], wv[r], xv)
                              : _mm512_dpbusd_epi32(isum[r][i], xv, wv[r]);
          }
        }
      };
      if constexpr (kNib) {
        const __m512i low = _mm512_set1_epi8(15);
#pragma GCC unroll 4
        for (int j = 0; j < kSub / 8; ++j) {
          __m512i lo[R], hi[R];
          for (int r = 0; r < R; ++r) {
            const __m512i packed = _mm512_load_si512(q[r] + j * 64);
            lo[r] = _mm512_and_si512(packed, low);
            hi[r] = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low);
          }
          line(j, lo);
          line(j + kSub / 8, hi);
        }
      } else {
#pragma GCC unroll 8
        for (int k = 0; k < kSub / 4; ++k) {
          __m512i wv[R];
          for (int r = 0; r < R; ++r) wv[r] = _mm512_load_si512(q[r] + k * 64);
          line(k, wv);
        }
      }
      for (int r = 0; r < R; ++r) {
        const __m512 scale = ScaleLine(w, tile + r, s);
        const __m512i corr = kMin ? _mm512_setzero_si512() : Sum128Line(w, tile + r, s);
        for (int i = 0; i < NT; ++i) {
          const __m512i exact = kMin ? isum[r][i] : _mm512_sub_epi32(isum[r][i], corr);
          const __m512 sd = _mm512_mul_ps(scale, _mm512_set1_ps(dx[i][g * kTileTokens]));
          acc[r][i] = _mm512_fmadd_ps(sd, _mm512_cvtepi32_ps(exact), acc[r][i]);
        }
      }
    }
    if (kMin) {
      for (int r = 0; r < R; ++r) {
        const __m512 mn = MinLine(w, tile + r, g);
        for (int i = 0; i < NT; ++i)
          acc[r][i] = _mm512_fmadd_ps(mn, _mm512_set1_ps(xs[i][g * kTileTokens]), acc[r][i]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    const int rows = std::min(kTileRows, w.rows - (tile + r) * kTileRows);
    const __mmask16 mask = static_cast<__mmask16>((1u << rows) - 1);
    for (int i = 0; i < NT; ++i) {
      _mm512_mask_storeu_ps(t.y + std::size_t(t0 + i) * t.ldy + (tile + r) * kTileRows, mask,
                            acc[r][i]);
    }
  }
}

template <int R, int kSub, bool kMin, bool kNib, int... NT>
void Dispatch(const Int8Tile& t, int tile, int t0, int nt, std::integer_sequence<int, NT...>) {
  ((nt == NT + 1 ? Tokens<R, NT + 1, kSub, kMin, kNib>(t, tile, t0) : void()), ...);
}

// Every token of t over row tiles [tile, tile + R), kMaxNT tokens at a time.
template <int R, int kMaxNT>
void RowTiles(const Int8Tile& t, int tile) {
  for (int t0 = t.t0; t0 < t.t0 + t.nt; t0 += kMaxNT) {
    const int nt = std::min(kMaxNT, t.t0 + t.nt - t0);
    const auto seq = std::make_integer_sequence<int, kMaxNT>();
    if (t.w->nibbles) {
      Dispatch<R, 32, true, true>(t, tile, t0, nt, seq);
    } else if (t.w->has_min) {
      Dispatch<R, 32, true, false>(t, tile, t0, nt, seq);
    } else if (t.w->sub == 16) {
      Dispatch<R, 16, false, false>(t, tile, t0, nt, seq);
    } else {
      Dispatch<R, 32, false, false>(t, tile, t0, nt, seq);
    }
  }
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

void Int8TileVnni(const Int8Tile& t) {
  int tile = t.tile;
  if (t.nt >= kPrefillMinTokens) {
    for (; tile + 2 <= t.tile + t.tiles; tile += 2) RowTiles<2, kPairTokens>(t, tile);
  }
  for (; tile < t.tile + t.tiles; ++tile) RowTiles<1, kTokens>(t, tile);
}

}  // namespace ctxpar::compute::int8_internal
