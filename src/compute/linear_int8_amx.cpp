// The AMX kernel of the int8 path (linear_int8.h): per sub-block, one tile multiply (tdpbssd) of
// 16 tokens' activations (A: 16 rows of `sub` bytes) by the 16 weight rows (B: sub / 4 lines of
// 64 bytes, the pack's layout) into 16 x 16 exact int32 sums, stored and scaled into fp32 in
// AVX-512 registers in the sequence's order. Two sets of tiles alternate. Compiled with
// AMX-TILE/INT8 and AVX-512 flags, run only where cpuid, XCR0 and the OS's tile permission allow.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "compute/linear_int8.h"

namespace ctxpar::compute::int8_internal {
namespace {

#include "core/amx_config.h"

// Tiles 0, 1: C (16 tokens x 16 int32); 2, 3: A (16 tokens x sub bytes); 4, 5: B (sub / 4 lines
// of 64 bytes).
void Configure(int sub) {
  TileConfig want;
  for (int i : {0, 1}) {
    want.rows[i] = 16;
    want.colsb[i] = 64;
    want.rows[2 + i] = 16;
    want.colsb[2 + i] = static_cast<std::uint16_t>(sub);
    want.rows[4 + i] = static_cast<std::uint8_t>(sub / 4);
    want.colsb[4 + i] = 64;
  }
  LoadTileConfig(want);
}

// One row tile times 16 tokens, every operand reached from a few base pointers at constant
// offsets: the tokens' scales of a group are one line (ScaleAt). kHalf: the weights' scales and
// mins in fp16 (Int8Pack::half), of type Scale.
template <bool kMin, int kSub, bool kHalf>
struct TileOf {
  using Scale = std::conditional_t<kHalf, std::uint16_t, float>;
  static constexpr int kPer = kBlock / kSub;  // sub-blocks per 32-group
  const std::int8_t* xq;                      // A: 16 tokens, row stride ldx
  std::size_t ldx;
  const std::int8_t* wq;  // B: sub-block s at s * kSub * 16
  const Scale* scale;     // [subs][16]
  const Scale* min;       // [groups][16]
  const float* dx;        // [groups][16 tokens]
  const float* xs;        // [groups][16 tokens]
  __m512 acc[kTileTokens];

  // The 16 rows' scales or mins at p as fp32.
  static __m512 Line(const Scale* p) {
    if constexpr (kHalf) {
      return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    } else {
      return _mm512_loadu_ps(p);
    }
  }

  // Sub-block s's sums c [16 tokens][16 rows] into acc, then the group's min after its last
  // sub-block. Inlined with the token loop unrolled, so acc stays in registers.
  __attribute__((always_inline)) void ScaleSums(int s, const std::int32_t* c) {
    const int g = s / kPer;
    const __m512 sc = Line(scale + s * 16);
    const float* d = dx + g * kTileTokens;
#pragma GCC unroll 16
    for (int m = 0; m < kTileTokens; ++m) {
      const __m512 sd = _mm512_mul_ps(sc, _mm512_set1_ps(d[m]));
      acc[m] = _mm512_fmadd_ps(sd, _mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * m)), acc[m]);
    }
    if (kMin) {
      const __m512 mn = Line(min + g * 16);
      const float* x = xs + g * kTileTokens;
#pragma GCC unroll 16
      for (int m = 0; m < kTileTokens; ++m) {
        acc[m] = _mm512_fmadd_ps(mn, _mm512_set1_ps(x[m]), acc[m]);
      }
    }
  }
};

// Sub-block s's tile multiply into accumulator tile C from A and B tiles (tile numbers are
// immediates, hence a macro).
#define CTXPAR_AMX_ISSUE(C, A, B, s)                       \
  do {                                                     \
    _tile_zero(C);                                         \
    _tile_loadd(A, k.xq + std::size_t(s) * kSub, k.ldx);   \
    _tile_loadd(B, k.wq + std::size_t(s) * kSub * 16, 64); \
    _tile_dpbssd(C, A, B);                                 \
  } while (0)

// Tiles 0 / 2 / 4 (C, A, B) take the even sub-blocks, 1 / 3 / 5 the odd ones. wq: the row
// tile's q as bytes, sub-block s at s * kSub * 16.
template <bool kMin, int kSub, bool kHalf>
void Tile16(const Int8Tile& t, const std::int8_t* wq) {
  const Int8Pack& w = *t.w;
  const int groups = w.cols / kBlock, subs = w.subs;
  TileOf<kMin, kSub, kHalf> k;
  k.xq = t.x->i8.data() + std::size_t(t.t0) * w.cols;
  k.ldx = std::size_t(w.cols);
  k.wq = wq;
  if constexpr (kHalf) {
    k.scale = w.Scale16(t.tile, 0);
    k.min = kMin ? w.Min16(t.tile, 0) : nullptr;
  } else {
    k.scale = w.Scale(t.tile, 0);
    k.min = kMin ? w.Min(t.tile, 0) : nullptr;
  }
  k.dx = t.x->i8_d.data() + ScaleAt(t.t0, 0, groups);
  k.xs = t.x->i8_xs.data() + ScaleAt(t.t0, 0, groups);
  alignas(64) std::int32_t c0[kTileTokens * 16], c1[kTileTokens * 16];
#pragma GCC unroll 16
  for (int m = 0; m < kTileTokens; ++m) k.acc[m] = _mm512_setzero_ps();
  // Sub-block s + 1 is multiplied while s is stored and s - 1 scaled. On this Xeon the tile
  // unit and the vector units barely overlap whatever the order (docs/perf-model.md), so the
  // sum of the two bounds the kernel.
  CTXPAR_AMX_ISSUE(0, 2, 4, 0);
  int s = 0;
  for (; s < subs; s += 2) {
    if (s + 1 < subs) CTXPAR_AMX_ISSUE(1, 3, 5, s + 1);
    _tile_stored(0, c0, 64);
    if (s > 0) k.ScaleSums(s - 1, c1);
    if (s + 1 == subs) break;
    if (s + 2 < subs) CTXPAR_AMX_ISSUE(0, 2, 4, s + 2);
    _tile_stored(1, c1, 64);
    k.ScaleSums(s, c0);
  }
  if (s < subs) {
    k.ScaleSums(s, c0);  // an odd count's last
  } else {
    k.ScaleSums(subs - 1, c1);
  }
  const int rows = std::min(kTileRows, w.rows - t.tile * kTileRows);
  const __mmask16 mask = static_cast<__mmask16>((1u << rows) - 1);
  float* y = t.y + std::size_t(t.t0) * t.ldy + t.tile * kTileRows;
  // Unrolled with constant indices: a run-time index would keep acc in memory.
#pragma GCC unroll 16
  for (int m = 0; m < kTileTokens; ++m) {
    if (m < t.nt) _mm512_mask_storeu_ps(y + std::size_t(m) * t.ldy, mask, k.acc[m]);
  }
}

#undef CTXPAR_AMX_ISSUE

}  // namespace

// The tile configuration is checked once per call (its row tiles and their tokens): sttilecfg
// waits for the tile unit to drain.
void Int8TileAmx(const Int8Tile& tiles) {
  // Too few tokens for a tile multiply (decode): VNNI reads the pack as it lies, with no widened
  // copy of the nibbles, which at one token cost as much as the products.
  if (tiles.nt < kAmxMinTokens) return Int8TileVnni(tiles);
  Configure(tiles.w->sub);
  const Int8Pack& w = *tiles.w;
  auto tile16 = w.has_min && w.half ? Tile16<true, 32, true>
                : w.has_min         ? Tile16<true, 32, false>
                : w.half            ? Tile16<false, 32, true>
                : w.sub == 32       ? Tile16<false, 32, false>
                                    : Tile16<false, 16, false>;
  ForEachTile(tiles, [&](const Int8Tile& t) {
    thread_local LineVector<std::int8_t> widened;
    const std::int8_t* wq =
        t.w->nibbles ? WidenNibbles(*t.w, t.tile, 1, widened) : t.w->Q(t.tile, 0);
    Int8Tile part = t;
    for (part.t0 = t.t0; part.t0 < t.t0 + t.nt; part.t0 += kTileTokens) {
      part.nt = std::min(kTileTokens, t.t0 + t.nt - part.t0);
      if (part.nt < kAmxMinTokens) return Int8TileVnni(part);
      tile16(part, wq);
    }
  });
}

}  // namespace ctxpar::compute::int8_internal
