// The AMX kernel of the bf16 products (linear_bf16.h): per 32 columns, tile multiplies
// (tdpbf16ps) of 16 tokens' bf16 activations (A: one contiguous KiB of Acts::bf16's tile-major
// layout; the activations are padded to a multiple of 16 tokens) by a row tile's 16 pair lines
// (B: the pack's layout) into 16 x 16 fp32 accumulators that stay in the tile over the whole row.
// Every block of tokens, a lone decode token included, goes through the tiles, so a row's bits do
// not depend on the batch. Compiled with AMX-TILE/BF16 and AVX-512 flags, run only where cpuid,
// XCR0 and the OS's tile permission allow.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "compute/linear_bf16.h"

namespace ctxpar::compute::bf16_internal {
namespace {

constexpr int kPrefetchBytes = 4096;

#include "core/amx_config.h"

// Tiles 0-3: C (16 tokens x 16 fp32), token block i and row tile j at 2i + j; 4, 5: A (16
// tokens x 32 bf16) of the two token blocks; 6, 7: B (16 pairs x 16 rows x 2) of the two row
// tiles. All 16 rows of 64 bytes.
void Configure() {
  TileConfig want;
  for (int i = 0; i < 8; ++i) {
    want.rows[i] = 16;
    want.colsb[i] = 64;
  }
  LoadTileConfig(want);
}

// GCC's tile intrinsics are macros that paste the tile's number into the instruction.
template <int kC>
void StoreTile(void* to, std::size_t stride) {
  if constexpr (kC == 0) _tile_stored(0, to, stride);
  if constexpr (kC == 1) _tile_stored(1, to, stride);
  if constexpr (kC == 2) _tile_stored(2, to, stride);
  if constexpr (kC == 3) _tile_stored(3, to, stride);
}

// One C tile to y: straight from the tile where it is 16 whole tokens and rows, else through
// `scratch` for the rows and tokens that exist.
template <int kC>
void Store(const Bf16Tile& t, int tile, int t0, float (&scratch)[16][16]) {
  const int rows = std::min(16, t.w->rows - tile * 16);
  const int tokens = std::min(16, t.t0 + t.nt - t0);
  float* y = t.y + std::size_t(t0) * t.ldy + tile * 16;
  if (rows == 16 && tokens == 16) {
    StoreTile<kC>(y, t.ldy * sizeof(float));
    return;
  }
  StoreTile<kC>(scratch, 64);
  for (int i = 0; i < tokens; ++i) std::memcpy(y + i * t.ldy, scratch[i], sizeof(float) * rows);
}

// Token blocks t0 (and t0 + 16 when kTokens is 2) times row tiles `tile` (and tile + 1 when
// kRows is 2): each A and B tile loaded once per 32 columns feeds kRows and kTokens multiplies.
template <int kTokens, int kRows>
void Block(const Bf16Tile& t, int tile, int t0, float (&scratch)[16][16]) {
  const Bf16Pack& w = *t.w;
  // A tiles: 1 KiB each, contiguous (ActAt's layout).
  const std::uint16_t* x = t.x + ActAt(w.cols, t0, 0);
  // A decode block streams the pack faster than the hardware prefetcher runs ahead of it.
  const bool prefetch = t.t0 + t.nt - t0 <= 16;
  _tile_zero(0);
  if constexpr (kRows == 2) _tile_zero(1);
  if constexpr (kTokens == 2) _tile_zero(2);
  if constexpr (kTokens == 2 && kRows == 2) _tile_zero(3);
  for (int k = 0; k < w.cols; k += 32) {
    if (prefetch) {
      const char* ahead = reinterpret_cast<const char*>(w.Line(tile, k / 2)) + kPrefetchBytes;
      for (int b = 0; b < kRows * 1024; b += 64) __builtin_prefetch(ahead + b);
    }
    _tile_loadd(4, x + k * 16, 64);
    _tile_loadd(6, w.Line(tile, k / 2), 64);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (kRows == 2) {
      _tile_loadd(7, w.Line(tile + 1, k / 2), 64);
      _tile_dpbf16ps(1, 4, 7);
    }
    if constexpr (kTokens == 2) {
      _tile_loadd(5, x + 16 * std::size_t(w.cols) + k * 16, 64);
      _tile_dpbf16ps(2, 5, 6);
      if constexpr (kRows == 2) _tile_dpbf16ps(3, 5, 7);
    }
  }
  Store<0>(t, tile, t0, scratch);
  if constexpr (kRows == 2) Store<1>(t, tile + 1, t0, scratch);
  if constexpr (kTokens == 2) Store<2>(t, tile, t0 + 16, scratch);
  if constexpr (kTokens == 2 && kRows == 2) Store<3>(t, tile + 1, t0 + 16, scratch);
}

}  // namespace

// Two row tiles by two token blocks at a time: per 32 columns four multiplies share two A and
// two B loads, half the bytes per multiply of one token block, and the four accumulators are
// independent chains. Every block keeps the one sequence (32 columns at a time from a zeroed
// accumulator), so the blocking changes no bit.
void Bf16TileAmx(const Bf16Tile& t) {
  Configure();
  alignas(64) float scratch[16][16];
  const int end = t.tile + t.tiles, t_end = t.t0 + t.nt;
  for (int tile = t.tile; tile < end; tile += 2) {
    const bool two_rows = tile + 1 < end;
    for (int t0 = t.t0; t0 < t_end; t0 += 32) {
      const bool two_tokens = t0 + 16 < t_end;
      if (two_tokens && two_rows) Block<2, 2>(t, tile, t0, scratch);
      if (two_tokens && !two_rows) Block<2, 1>(t, tile, t0, scratch);
      if (!two_tokens && two_rows) Block<1, 2>(t, tile, t0, scratch);
      if (!two_tokens && !two_rows) Block<1, 1>(t, tile, t0, scratch);
    }
  }
}

}  // namespace ctxpar::compute::bf16_internal
