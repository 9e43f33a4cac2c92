// The AVX512-VNNI kernel of the int8 path (linear_int8.h): one register holds the 16 rows of a
// tile; each vpdpbusd adds 4 bytes of a sub-block for all of them. vpdpbusd multiplies unsigned
// by signed bytes: the weights are the unsigned operand, u = q + bias (Int8Pack::bias: 0 for the
// types with a min, whose q is 0..31), and the sums start at -bias * sum(xq), exactly. Compiled
// with AVX-512 F/BW/VL and VNNI, run only where cpuid has them.
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
// Line k's low 4 bits of u (nib) with their fifth bits from the pack's `high` line (top).
__attribute__((always_inline)) inline __m512i AddHigh(__m512i nib, __m512i top, int k) {
  const __mmask64 set = _mm512_test_epi8_mask(top, _mm512_set1_epi8(static_cast<char>(1 << k)));
  return _mm512_mask_add_epi8(nib, set, nib, _mm512_set1_epi8(16));
}

// Where a kernel reads row tile `tile + r`'s sub-block s: the pack, or a widened copy of it.
struct QSource {
  const std::int8_t* base;  // sub-block 0 of row tile `tile`
  std::size_t tile_bytes;   // from one row tile to the next
  std::size_t sub_bytes;    // from one sub-block to the next
  const std::int8_t* At(int r, int s) const { return base + r * tile_bytes + s * sub_bytes; }
};
QSource PackSource(const Int8Pack& w, int tile) {
  return {w.Q(tile, 0), std::size_t(w.subs) * w.SubBytes(), std::size_t(w.SubBytes())};
}

// R row tiles (16 * R rows) times NT tokens: each broadcast of a token's 4 bytes serves R
// vpdpbusd. Every row keeps the sequence of linear_int8.h whatever R and NT, so the bits do not
// depend on them. kSub: w.sub, known to the compiler so that it unrolls a sub-block's lines. kNib:
// u packed two lines per line (Int8Pack::nibbles), kHigh: with a line of fifth bits (high).
template <int R, int NT, int kSub, bool kMin, bool kNib, bool kHigh>
void Tokens(const Int8Tile& t, int tile, int t0, const QSource& src) {
  const Int8Pack& w = *t.w;
  const int groups = w.cols / kBlock, per_group = kBlock / kSub;
  const std::int8_t* xq[NT];
  const float* dx[NT];
  const float* xs[NT];
  const std::int32_t* xsum[NT];
  for (int i = 0; i < NT; ++i) {
    xq[i] = t.x->i8.data() + std::size_t(t0 + i) * w.cols;
    dx[i] = t.x->i8_d.data() + ScaleAt(t0 + i, 0, groups);
    xs[i] = t.x->i8_xs.data() + ScaleAt(t0 + i, 0, groups);
    xsum[i] = t.x->i8_sums.data() + SumAt(t0 + i, 0, 0, groups);
  }
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(w.bias));
  const __m128i shift = _mm_cvtsi32_si128(kMin ? 0 : w.BiasShift());
  __m512 acc[R][NT];
  for (int r = 0; r < R; ++r) {
    for (int i = 0; i < NT; ++i) acc[r][i] = _mm512_setzero_ps();
  }
  for (int g = 0; g < groups; ++g) {
    for (int h = 0; h < per_group; ++h) {
      const int s = g * per_group + h;
      const std::int8_t* q[R];
      for (int r = 0; r < R; ++r) q[r] = src.At(r, s);
      if (t.nt < kPrefillMinTokens) {
        for (int r = 0; r < R; ++r) PrefetchAhead(w, q[r]);
      }
      __m512i isum[R][NT];
      for (int i = 0; i < NT; ++i) {
        const __m512i start =
            kMin ? _mm512_setzero_si512()
                 : _mm512_sub_epi32(
                       _mm512_setzero_si512(),
                       _mm512_sll_epi32(_mm512_set1_epi32(SubSum<kSub>(xsum[i], s)), shift));
        for (int r = 0; r < R; ++r) isum[r][i] = start;
      }
      auto line = [&](int k, const __m512i(&wv)[R]) {
        for (int i = 0; i < NT; ++i) {
          std::int32_t bytes;
          std::memcpy(&bytes, xq[i] + s * kSub + 4 * k, 4);
          const __m512i xv = _mm512_set1_epi32(bytes);
          for (int r = 0; r < R; ++r) isum[r][i] = _mm512_dpbusd_epi32(isum[r][i], wv[r], xv);
        }
      };
      if constexpr (kNib) {
        const __m512i low = _mm512_set1_epi8(15);
        __m512i top[R];
        if constexpr (kHigh) {
          for (int r = 0; r < R; ++r) top[r] = _mm512_load_si512(q[r] + kSub * 8);
        }
#pragma GCC unroll 4
        for (int j = 0; j < kSub / 8; ++j) {
          __m512i lo[R], hi[R];
          for (int r = 0; r < R; ++r) {
            const __m512i packed = _mm512_load_si512(q[r] + j * 64);
            lo[r] = _mm512_and_si512(packed, low);
            hi[r] = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low);
            if constexpr (kHigh) {
              lo[r] = AddHigh(lo[r], top[r], j);
              hi[r] = AddHigh(hi[r], top[r], j + kSub / 8);
            }
          }
          line(j, lo);
          line(j + kSub / 8, hi);
        }
      } else {
#pragma GCC unroll 8
        for (int k = 0; k < kSub / 4; ++k) {
          __m512i wv[R];
          for (int r = 0; r < R; ++r) {
            wv[r] = _mm512_load_si512(q[r] + k * 64);
            if (!kMin) wv[r] = _mm512_add_epi8(wv[r], bias);
          }
          line(k, wv);
        }
      }
      for (int r = 0; r < R; ++r) {
        const __m512 scale = ScaleLine(w, tile + r, s);
        for (int i = 0; i < NT; ++i) {
          const __m512 sd = _mm512_mul_ps(scale, _mm512_set1_ps(dx[i][g * kTileTokens]));
          acc[r][i] = _mm512_fmadd_ps(sd, _mm512_cvtepi32_ps(isum[r][i]), acc[r][i]);
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

template <int R, int kSub, bool kMin, bool kNib, bool kHigh, int... NT>
void Dispatch(const Int8Tile& t, int tile, int t0, int nt, const QSource& src,
              std::integer_sequence<int, NT...>) {
  ((nt == NT + 1 ? Tokens<R, NT + 1, kSub, kMin, kNib, kHigh>(t, tile, t0, src) : void()), ...);
}

// Every token of t over row tiles [tile, tile + R), kMaxNT tokens at a time, from the pack
// (kWide: from src, the nibbles widened to the byte form's signed q).
template <int R, int kMaxNT, bool kWide>
void RowTiles(const Int8Tile& t, int tile, const QSource& src) {
  for (int t0 = t.t0; t0 < t.t0 + t.nt; t0 += kMaxNT) {
    const int nt = std::min(kMaxNT, t.t0 + t.nt - t0);
    const auto seq = std::make_integer_sequence<int, kMaxNT>();
    if (!kWide && t.w->high) {
      Dispatch<R, 32, false, true, true>(t, tile, t0, nt, src, seq);
    } else if (!kWide && t.w->nibbles) {
      Dispatch<R, 32, true, true, false>(t, tile, t0, nt, src, seq);
    } else if (t.w->has_min) {
      Dispatch<R, 32, true, false, false>(t, tile, t0, nt, src, seq);
    } else if (t.w->sub == 16) {
      Dispatch<R, 16, false, false, false>(t, tile, t0, nt, src, seq);
    } else {
      Dispatch<R, 32, false, false, false>(t, tile, t0, nt, src, seq);
    }
  }
}

// Row tiles [tile, tile + R) of t; a prefill chunk's nibbles are widened once (WidenNibbles)
// rather than once per kMaxNT tokens.
template <int R, int kMaxNT>
void RowTiles(const Int8Tile& t, int tile) {
  const Int8Pack& w = *t.w;
  if (!w.nibbles || t.nt < kPrefillMinTokens)
    return RowTiles<R, kMaxNT, false>(t, tile, PackSource(w, tile));
  thread_local LineVector<std::int8_t> wide;
  const std::size_t tile_bytes = std::size_t(w.subs) * w.sub * 16;
  const QSource src{WidenNibbles(w, tile, R, wide), tile_bytes, std::size_t(w.sub) * 16};
  RowTiles<R, kMaxNT, true>(t, tile, src);
}

}  // namespace

void QuantizeRowAvx512(const float* x, int groups, std::int8_t* q, float* d, float* xs,
                       std::int32_t* sums) {
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
    const std::int32_t sa = _mm512_reduce_add_epi32(qa), sb = _mm512_reduce_add_epi32(qb);
    d[g * kTileTokens] = dg;
    xs[g * kTileTokens] = dg * float(sa + sb);
    sums[3 * g * kTileTokens] = sa + sb;
    sums[(3 * g + 1) * kTileTokens] = sa;
    sums[(3 * g + 2) * kTileTokens] = sb;
  }
}

const std::int8_t* WidenNibbles(const Int8Pack& w, int tile, int tiles,
                                LineVector<std::int8_t>& out) {
  const int lines = w.sub / 8;
  out.resize(std::size_t(tiles) * w.subs * w.sub * 16);
  const __m512i low = _mm512_set1_epi8(15), bias = _mm512_set1_epi8(static_cast<char>(w.bias));
  for (int ts = 0; ts < tiles * w.subs; ++ts) {
    const std::int8_t* in = w.Q(tile + ts / w.subs, ts % w.subs);
    std::int8_t* dst = out.data() + std::size_t(ts) * w.sub * 16;
    const __m512i top = w.high ? _mm512_load_si512(in + w.sub * 8) : _mm512_setzero_si512();
    for (int j = 0; j < lines; ++j) {
      const __m512i packed = _mm512_load_si512(in + j * 64);
      const __m512i lo = AddHigh(_mm512_and_si512(packed, low), top, j);
      const __m512i hi =
          AddHigh(_mm512_and_si512(_mm512_srli_epi16(packed, 4), low), top, j + lines);
      _mm512_store_si512(dst + j * 64, _mm512_sub_epi8(lo, bias));
      _mm512_store_si512(dst + (j + lines) * 64, _mm512_sub_epi8(hi, bias));
    }
  }
  return out.data();
}

void Int8TileVnni(const Int8Tile& t) {
  int tile = t.tile;
  if (t.nt >= kPrefillMinTokens) {
    for (; tile + 2 <= t.tile + t.tiles; tile += 2) RowTiles<2, kPairTokens>(t, tile);
  }
  for (; tile < t.tile + t.tiles; ++tile) RowTiles<1, kTokens>(t, tile);
}

}  // namespace ctxpar::compute::int8_internal
