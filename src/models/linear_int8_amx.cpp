// The AMX kernel of the int8 path (linear_int8.h): per sub-block, one tile multiply (tdpbssd) of
// 16 tokens' activations (A: 16 rows of `sub` bytes) by the 16 weight rows (B: sub / 4 lines of
// 64 bytes, the pack's layout) into 16 x 16 exact int32 sums, stored and scaled into fp32 in
// AVX-512 registers in the sequence's order. Two accumulator tiles alternate so that one
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
// of 64 bytes). Loaded once per thread and per sub-block size.
void Configure(int sub) {
  thread_local int configured = 0;
  if (configured == sub) return;
  TileConfig c;
  for (int i : {0, 1}) {
    c.rows[i] = 16;
    c.colsb[i] = 64;
    c.rows[2 + i] = 16;
    c.colsb[2 + i] = static_cast<std::uint16_t>(sub);
    c.rows[4 + i] = static_cast<std::uint8_t>(sub / 4);
    c.colsb[4 + i] = 64;
  }
  _tile_loadconfig(&c);
  configured = sub;
}

}  // namespace

bool RequestAmxTileState() {
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
  unsigned long mask = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &mask) != 0) return false;
  return (mask >> kXfeatureXtiledata & 1) != 0;
}

void Int8TileAmx(const Int8Tile& t) {
  const Int8Pack& w = *t.w;
  Configure(w.sub);
  const int groups = w.cols / kBlock, per_group = kBlock / w.sub;
  const std::int8_t* xq = t.x->i8.data() + std::size_t(t.t0) * w.cols;
  const float* dx = t.x->i8_d.data() + std::size_t(t.t0) * groups;
  const float* xs = t.x->i8_xs.data() + std::size_t(t.t0) * groups;
  alignas(64) std::int32_t c[2][kTileTokens * 16];
  __m512 acc[kTileTokens];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  // Sub-block s's sums (stored in c[s % 2]) into acc, then the group's min after its last one.
  auto scale = [&](int s) {
    const int g = s / per_group;
    const __m512 sc = _mm512_loadu_ps(w.Scale(t.tile, s));
    const std::int32_t* cs = c[s % 2];
    for (int m = 0; m < kTileTokens; ++m) {
      const __m512 sd = _mm512_mul_ps(sc, _mm512_set1_ps(dx[m * groups + g]));
      acc[m] = _mm512_fmadd_ps(sd, _mm512_cvtepi32_ps(_mm512_load_si512(cs + 16 * m)), acc[m]);
    }
    if (w.has_min) {
      const __m512 mn = _mm512_loadu_ps(w.Min(t.tile, g));
      for (int m = 0; m < kTileTokens; ++m) {
        acc[m] = _mm512_fmadd_ps(mn, _mm512_set1_ps(xs[m * groups + g]), acc[m]);
      }
    }
  };
  const std::size_t ldx = std::size_t(w.cols);
  int s = 0;
  for (; s + 1 < w.subs; s += 2) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_loadd(2, xq + s * w.sub, ldx);
    _tile_loadd(4, w.Q(t.tile, s), 64);
    _tile_loadd(3, xq + (s + 1) * w.sub, ldx);
    _tile_loadd(5, w.Q(t.tile, s + 1), 64);
    _tile_dpbssd(0, 2, 4);
    _tile_dpbssd(1, 3, 5);
    _tile_stored(0, c[s % 2], 64);
    scale(s);
    _tile_stored(1, c[(s + 1) % 2], 64);
    scale(s + 1);
  }
  if (s < w.subs) {
    _tile_zero(0);
    _tile_loadd(2, xq + s * w.sub, ldx);
    _tile_loadd(4, w.Q(t.tile, s), 64);
    _tile_dpbssd(0, 2, 4);
    _tile_stored(0, c[s % 2], 64);
    scale(s);
  }
  const int rows = std::min(kTileRows, w.rows - t.tile * kTileRows);
  const __mmask16 mask = static_cast<__mmask16>((1u << rows) - 1);
  for (int m = 0; m < t.nt; ++m) {
    _mm512_mask_storeu_ps(t.y + std::size_t(t.t0 + m) * t.ldy + t.tile * kTileRows, mask, acc[m]);
  }
}

}  // namespace ctxpar::model::int8_internal
