// The AMX kernel of the bf16 products (linear_bf16.h): per 32 columns, one tile multiply
// (tdpbf16ps) of 16 tokens' bf16 activations (A: 16 rows of 64 bytes; the activations are padded
// to a multiple of 16 tokens) by the tile's 16 pair lines (B: the pack's layout) into 16 x 16
// fp32 accumulators that stay in the tile over the whole row. Every block of tokens, a lone
// decode token included, goes through the tiles, so a row's bits do not depend on the batch.
// Compiled with AMX-TILE/BF16 and AVX-512 flags, run only where cpuid, XCR0 and the OS's tile
// permission allow.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "compute/linear_bf16.h"

namespace ctxpar::compute::bf16_internal {
namespace {

constexpr int kPrefetchBytes = 4096;

#include "compute/amx_config.h"

// Tiles 0, 1: C (16 tokens x 16 fp32) of two row tiles; 2: A (16 tokens x 32 bf16); 3, 4: B (16
// pairs x 16 rows x 2) of the two row tiles.
void Configure() {
  TileConfig want;
  for (int i : {0, 1, 2, 3, 4}) {
    want.rows[i] = 16;
    want.colsb[i] = 64;
  }
  LoadTileConfig(want);
}

}  // namespace

// Two row tiles at a time share each A load, and their accumulators are independent chains.
void Bf16TileAmx(const Bf16Tile& tiles) {
  Configure();
  const Bf16Pack& w = *tiles.w;
  alignas(64) float c[2][16][16];
  const int end = tiles.tile + tiles.tiles;
  for (int tile = tiles.tile; tile < end; tile += 2) {
    const bool two = tile + 1 < end;
    for (int t0 = tiles.t0; t0 < tiles.t0 + tiles.nt; t0 += 16) {
      _tile_zero(0);
      _tile_zero(1);
      const std::uint16_t* x = tiles.x + std::size_t(t0) * w.cols;
      for (int k = 0; k < w.cols; k += 32) {
        // A decode block streams the pack faster than the hardware prefetcher runs ahead of it.
        if (tiles.nt - (t0 - tiles.t0) <= 16) {
          const char* ahead = reinterpret_cast<const char*>(w.Line(tile, k / 2)) + kPrefetchBytes;
          for (int b = 0; b < (two ? 2048 : 1024); b += 64) __builtin_prefetch(ahead + b);
        }
        _tile_loadd(2, x + k, w.cols * 2);
        _tile_loadd(3, w.Line(tile, k / 2), 64);
        _tile_dpbf16ps(0, 2, 3);
        if (two) {
          _tile_loadd(4, w.Line(tile + 1, k / 2), 64);
          _tile_dpbf16ps(1, 2, 4);
        }
      }
      _tile_stored(0, c[0], 64);
      if (two) _tile_stored(1, c[1], 64);
      const int tokens = std::min(16, tiles.t0 + tiles.nt - t0);
      for (int j = 0; j < (two ? 2 : 1); ++j) {
        const int rows = std::min(16, w.rows - (tile + j) * 16);
        for (int i = 0; i < tokens; ++i) {
          std::memcpy(tiles.y + std::size_t(t0 + i) * tiles.ldy + (tile + j) * 16, c[j][i],
                      sizeof(float) * rows);
        }
      }
    }
  }
}

}  // namespace ctxpar::compute::bf16_internal
