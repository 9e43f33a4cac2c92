// The AMX kernel of the int8 path (linear_int8.h): per sub-block, one tile multiply (tdpbssd) of
// 16 tokens' activations (A: 16 rows of `sub` bytes) by the 16 weight rows (B: sub / 4 lines of
// 64 bytes, the pack's layout) into 16 x 16 exact int32 sums, stored and scaled into fp32 in
// AVX-512 registers in the sequence's order. Two sets of tiles alternate so that one
// sub-block's multiply runs while the previous one is scaled. Compiled with AMX-TILE/INT8 and
// AVX-512 flags, run only where cpuid, XCR0 and the OS's tile permission allow.
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "models/linear_int8.h"

namespace ctxpar::model::int8_internal {
namespace {

// Linux's arch_prctl codes and the tile data's XSAVE feature number (asm/prctl.h).
constexpr int kArchGetXcompPerm = 0x1022;
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

struct alignas(64) TileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// Tiles 0, 1: C (16 tokens x 16 int32); 2, 3: A (16 tokens x sub bytes); 4, 5: B (sub / 4 lines
// of 64 bytes). The thread's configuration is read back (sttilecfg) and loaded only when it
// differs: other code on the thread (a benchmark's peak loop, a tilerelease) may have changed it.
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
  TileConfig have;
  _tile_storeconfig(&have);
  if (std::memcmp(&have, &want, sizeof(TileConfig)) != 0) _tile_loadconfig(&want);
}

}  // namespace

bool RequestAmxTileState() {
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
  unsigned long mask = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &mask) != 0) return false;
  return (mask >> kXfeatureXtiledata & 1) != 0;
}

namespace {

// Sub-block s's sums c [16 tokens][16 rows] into acc (one register per token), then the group's
// min after its last sub-block. Inlined with the token loop unrolled, so acc stays in registers.
template <bool kMin, int kSub>
__attribute__((always_inline)) inline void Scale(const Int8Pack& w, int tile, const float* dx,
                                                 const float* xs, int groups, int s,
                                                 const std::int32_t* c, __m512* acc) {
  constexpr int kPer = kBlock / kSub;
  const int g = s / kPer;
  const __m512 sc = _mm512_loadu_ps(w.Scale(tile, s));
#pragma GCC unroll 16
  for (int m = 0; m < kTileTokens; ++m) {
    const __m512 sd = _mm512_mul_ps(sc, _mm512_set1_ps(dx[m * groups + g]));
    acc[m] = _mm512_fmadd_ps(sd, _mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * m)), acc[m]);
  }
  if (kMin) {
    const __m512 mn = _mm512_loadu_ps(w.Min(tile, g));
#pragma GCC unroll 16
    for (int m = 0; m < kTileTokens; ++m) {
      acc[m] = _mm512_fmadd_ps(mn, _mm512_set1_ps(xs[m * groups + g]), acc[m]);
    }
  }
}

// Sub-block s's tile multiply into accumulator tile C from A and B tiles (tile numbers are
// immediates, hence a macro).
#define CTXPAR_AMX_ISSUE(C, A, B, s)                 \
  do {                                               \
    _tile_zero(C);                                   \
    _tile_loadd(A, xq + std::size_t(s) * kSub, ldx); \
    _tile_loadd(B, w.Q(t.tile, s), 64);              \
    _tile_dpbssd(C, A, B);                           \
  } while (0)

// Tiles 0 / 2 / 4 (C, A, B) take the even sub-blocks, 1 / 3 / 5 the odd ones, so that the tile
// unit and the vector units overlap.
template <bool kMin, int kSub>
void TileOf(const Int8Tile& t) {
  const Int8Pack& w = *t.w;
  const int groups = w.cols / kBlock;
  const std::int8_t* xq = t.x->i8.data() + std::size_t(t.t0) * w.cols;
  const float* dx = t.x->i8_d.data() + std::size_t(t.t0) * groups;
  const float* xs = t.x->i8_xs.data() + std::size_t(t.t0) * groups;
  const std::size_t ldx = std::size_t(w.cols);
  alignas(64) std::int32_t c0[kTileTokens * 16], c1[kTileTokens * 16];
  __m512 acc[kTileTokens];
#pragma GCC unroll 16
  for (int m = 0; m < kTileTokens; ++m) acc[m] = _mm512_setzero_ps();
  // Sub-block s is multiplied while s - 1 is stored, and scaled while s + 1 is multiplied and
  // stored: the stores' latency hides behind a scaling too.
  CTXPAR_AMX_ISSUE(0, 2, 4, 0);
  int s = 0;
  for (; s < w.subs; s += 2) {
    if (s + 1 < w.subs) CTXPAR_AMX_ISSUE(1, 3, 5, s + 1);
    _tile_stored(0, c0, 64);
    if (s > 0) Scale<kMin, kSub>(w, t.tile, dx, xs, groups, s - 1, c1, acc);
    if (s + 1 == w.subs) break;
    if (s + 2 < w.subs) CTXPAR_AMX_ISSUE(0, 2, 4, s + 2);
    _tile_stored(1, c1, 64);
    Scale<kMin, kSub>(w, t.tile, dx, xs, groups, s, c0, acc);
  }
  if (s < w.subs) {
    Scale<kMin, kSub>(w, t.tile, dx, xs, groups, s, c0, acc);  // an odd count's last
  } else {
    Scale<kMin, kSub>(w, t.tile, dx, xs, groups, w.subs - 1, c1, acc);
  }
  const int rows = std::min(kTileRows, w.rows - t.tile * kTileRows);
  const __mmask16 mask = static_cast<__mmask16>((1u << rows) - 1);
  // Unrolled with constant indices: a run-time index would keep acc in memory.
#pragma GCC unroll 16
  for (int m = 0; m < kTileTokens; ++m) {
    if (m < t.nt) {
      _mm512_mask_storeu_ps(t.y + std::size_t(t.t0 + m) * t.ldy + t.tile * kTileRows, mask, acc[m]);
    }
  }
}

#undef CTXPAR_AMX_ISSUE

}  // namespace

void Int8TileAmx(const Int8Tile& t) {
  Configure(t.w->sub);
  if (t.w->has_min) return TileOf<true, 32>(t);
  if (t.w->sub == 32) return TileOf<false, 32>(t);
  TileOf<false, 16>(t);
}

}  // namespace ctxpar::model::int8_internal
