// The AVX512-BF16 kernel of the bf16 products (linear_bf16.h): one register holds the 16 rows of
// a tile, and each vdpbf16ps adds one pair of columns for all of them, the pair's odd product
// first, in the sequence's order. Compiled with AVX-512 F/BW/VL and BF16, run only where cpuid
// has them.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "compute/linear_bf16.h"

namespace ctxpar::compute::bf16_internal {
namespace {

// Tokens per register tile (with two row tiles: 16 accumulators).
constexpr int kTokens = 8;
// With fewer tokens the kernel streams the pack faster than the hardware prefetcher runs ahead,
// and prefetches this far ahead (as the int8 kernels do).
constexpr int kPrefetchTokens = 4;
constexpr int kPrefetchElements = 1024;  // 2 KiB

// Tokens [t0, t0 + NT) times KT row tiles from t.tile: each token's pair, broadcast once,
// meets the KT tiles' lines.
template <int NT, int KT>
void Tokens(const Bf16Tile& t, int t0) {
  const Bf16Pack& w = *t.w;
  const int pairs = w.cols / 2;
  // Token t0 + i's columns of pair p are at x[i] + ActAt(cols, 0, 2p), its block's stride.
  const std::uint16_t* x[NT];
  for (int i = 0; i < NT; ++i) x[i] = t.x + ActAt(w.cols, t0 + i, 0);
  __m512 acc[KT][NT];
  for (int k = 0; k < KT; ++k) {
    for (int i = 0; i < NT; ++i) acc[k][i] = _mm512_setzero_ps();
  }
  const std::uint16_t* lines[KT];
  for (int k = 0; k < KT; ++k) lines[k] = w.Line(t.tile + k, 0);
  for (int p = 0; p < pairs; ++p) {
    __m512bh wv[KT];
    for (int k = 0; k < KT; ++k) {
      if constexpr (NT < kPrefetchTokens) __builtin_prefetch(lines[k] + p * 32 + kPrefetchElements);
      wv[k] = reinterpret_cast<__m512bh>(_mm512_load_si512(lines[k] + p * 32));
    }
    const std::size_t at = ActAt(w.cols, 0, 2 * p);
    for (int i = 0; i < NT; ++i) {
      std::int32_t pair;
      std::memcpy(&pair, x[i] + at, 4);
      const __m512bh xv = reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair));
      for (int k = 0; k < KT; ++k) acc[k][i] = _mm512_dpbf16_ps(acc[k][i], wv[k], xv);
    }
  }
  for (int k = 0; k < KT; ++k) {
    const int rows = std::min(16, w.rows - (t.tile + k) * 16);
    const __mmask16 mask = static_cast<__mmask16>((1u << rows) - 1);
    for (int i = 0; i < NT; ++i) {
      _mm512_mask_storeu_ps(t.y + std::size_t(t0 + i) * t.ldy + (t.tile + k) * 16, mask, acc[k][i]);
    }
  }
}

template <int KT, int... NT>
void Dispatch(const Bf16Tile& t, int t0, int nt, std::integer_sequence<int, NT...>) {
  ((nt == NT + 1 ? Tokens<NT + 1, KT>(t, t0) : void()), ...);
}

}  // namespace

// FloatToBf16's integer rounding, 16 floats at a time.
void RoundToBf16Avx512(const float* in, int n, std::uint16_t* out) {
  const __m512i one = _mm512_set1_epi32(1), half = _mm512_set1_epi32(0x7fff);
  const __m512i abs = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  const __m512i quiet = _mm512_set1_epi32(0x0040);
  for (int i = 0; i < n; i += 16) {
    const __mmask16 live = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
    const __m512i bits = _mm512_maskz_loadu_epi32(live, in + i);
    const __m512i top = _mm512_srli_epi32(bits, 16);
    const __m512i odd = _mm512_and_si512(top, one);
    const __m512i rounded =
        _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(bits, half), odd), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, abs), inf);
    const __m512i r = _mm512_mask_or_epi32(rounded, nan, top, quiet);
    _mm512_mask_cvtepi32_storeu_epi16(out + i, live, r);
  }
}

void Bf16TileAvx512(const Bf16Tile& tiles) {
  Bf16Tile t = tiles;
  for (t.tile = tiles.tile; t.tile < tiles.tile + tiles.tiles; t.tile += 2) {
    const bool two = t.tile + 1 < tiles.tile + tiles.tiles;
    for (int t0 = t.t0; t0 < t.t0 + t.nt; t0 += kTokens) {
      const int nt = std::min(kTokens, t.t0 + t.nt - t0);
      if (two) {
        Dispatch<2>(t, t0, nt, std::make_integer_sequence<int, kTokens>());
      } else {
        Dispatch<1>(t, t0, nt, std::make_integer_sequence<int, kTokens>());
      }
    }
  }
}

}  // namespace ctxpar::compute::bf16_internal
