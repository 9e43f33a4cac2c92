// The matrix-unit path of MatMul (ActFormat::kInt8, internal): weights repacked once into int8
// tiles with per-group scales, activations quantized per 32-element group to int8, exact int32
// products per group (AMX tiles, AVX512-VNNI, AVX2 or scalar code) and one fixed fp32 sequence over
// the groups.
//
// The sequence (every ISA, bit for bit). A weight row is stored as integers q with one scale per
// sub-block of `sub` elements (32; 16 for Q6_K, whose scales are per 16) and, for the types with
// a minimum (Q4_1, Q4_K, Q5_K: q unsigned, 0..31), one min per 32-group: w = scale * q + min
// exactly as the type's dequantization gives it. Activations of group g of token t: xq = nearest
// even of x * (1 / dx) in [-127, 127], dx = amax / 127, xs = dx * float(sum xq). Output (t, r):
//   acc = +0; for each group g in order: for each sub-block s of g in order:
//     acc = fma(scale[r, s] * dx[t, g], float(sum_j q[r, j] * xq[t, j]), acc)
//   then, with a min: acc = fma(min[r, g], xs[t, g], acc).
// The int32 sums are exact (|sum| <= 32 * 128 * 127), so their order is free; the products
// scale * dx round once. No operation depends on n, the token's place, the thread count or the
// ISA: a row's bits are the same alone or in any batch, and equal on every ISA.
//
// Layout of the repacked weights (Int8Pack): rows in tiles of 16 (the last padded with zero
// rows); tile i, sub-block s holds sub / 4 lines of 64 bytes, line k holding bytes 4k..4k+3 of
// the sub-block for each of the 16 rows: the B operand of an AMX tile multiply and the operand of
// VNNI's vpdpbusd over 16 rows at once. The kernels that take the weights as the unsigned operand
// of vpdpbusd or vpmaddubsw take u = q + bias (`bias`: 0 for the types with a min, whose q is
// unsigned; 128 for Q8_0, 16 for Q5_0, 32 for Q6_K) and subtract bias * sum(xq) of the
// sub-block, which the activations carry (Acts::i8_sums): exact, and no sum of q in the pack.
// The 4- and 5-bit types (Q4_1, Q4_K, Q5_0) hold u in two lines per line instead (`nibbles`):
// line j's low nibbles are line j's low 4 bits, its high ones line j + sub / 8's; Q5_0 (`high`)
// then has one more line, whose byte b holds bit 4 of u of byte b of line k at bit k. They are
// widened in registers for a decode step, or once per tile and call into a scratch copy for a
// prefill chunk (VNNI, AVX2) and for AMX's tiles (WidenNibbles). Memory: per weight 1 byte, 0.5
// (nibbles) or 0.625 (high), plus, per sub-block and row, the scale and, per 32-group, the min
// (Q4_1, Q4_K, Q5_K). The types whose scale and min are the file's fp16 values (Q4_1, Q8_0, Q5_0:
// `half`) keep them in fp16, 2 bytes each, exactly; the K-quants' products of two scales take 4
// bytes of fp32. So 0.625 bytes per weight for Q4_1, 1.0625 for Q8_0 and 0.6875 for Q5_0 (each as
// its file), 0.75 for Q4_K (0.5625), 1.25 for Q5_K and Q6_K (0.6875, 0.8203). A decode step reads
// all of it, so fewer bytes are a faster memory-bound decode.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "compute/linear.h"
#include "ctxpar/dtype.h"

namespace ctxpar::compute {

struct Int8Pack {
  int rows = 0;
  int cols = 0;
  int tiles = 0;  // ceil(rows / 16)
  int sub = 32;   // elements per scale: 32, or 16 (Q6_K)
  int subs = 0;   // cols / sub
  bool has_min = false;
  bool nibbles = false;  // u in 4 bits (Q4_1, Q4_K), or 5 with `high` (Q5_0)
  bool high = false;     // a line of u's fifth bits after the nibbles' lines (Q5_0)
  bool half = false;     // scale and min in fp16 (scale16, min16), else fp32
  int qmax = 0;          // the largest q as the products take it: q (types with a min), else |q|
  int bias = 0;          // q + bias >= 0 for every q of the type: the unsigned operand; 0 or 2^k
  PackVector<std::int8_t> q;                 // [tiles][subs][SubBytes()]
  PackVector<float> scale;                   // [tiles][subs][16]
  PackVector<float> min;                     // [tiles][cols / 32][16] (has_min)
  PackVector<std::uint16_t> scale16, min16;  // the same, with half

  // Sub: index of tile `tile`'s sub-block s, the unit of q (SubBytes) and scale (16 each);
  // Group: of its 32-group g, the unit of min (16).
  std::size_t Sub(int tile, int s) const { return std::size_t(tile) * subs + s; }
  std::size_t Group(int tile, int g) const { return std::size_t(tile) * (cols / kBlock) + g; }
  int SubBytes() const { return nibbles ? sub * 8 + (high ? 64 : 0) : sub * 16; }
  const std::int8_t* Q(int tile, int s) const { return q.data() + Sub(tile, s) * SubBytes(); }
  // q of byte b of line k (b = 4 * row + j, j < 4) of a sub-block at sub_q, widened.
  std::int8_t QAt(const std::int8_t* sub_q, int k, int b) const {
    if (!nibbles) return sub_q[k * 64 + b];
    const int lines = sub / 8;
    const auto byte = static_cast<std::uint8_t>(sub_q[(k % lines) * 64 + b]);
    int u = k < lines ? byte & 15 : byte >> 4;
    if (high) u |= (static_cast<std::uint8_t>(sub_q[sub * 8 + b]) >> k & 1) << 4;
    return static_cast<std::int8_t>(u - bias);
  }
  // bias = 1 << BiasShift() (types without a min).
  int BiasShift() const { return std::countr_zero(static_cast<unsigned>(bias)); }
  // The largest u = q + bias (at most 2 * bias - 1 with a bias).
  int UMax() const { return bias == 0 ? qmax : bias + std::min(qmax, bias - 1); }
  const float* Scale(int tile, int s) const { return scale.data() + Sub(tile, s) * 16; }
  const float* Min(int tile, int g) const { return min.data() + Group(tile, g) * 16; }
  const std::uint16_t* Scale16(int tile, int s) const { return scale16.data() + Sub(tile, s) * 16; }
  const std::uint16_t* Min16(int tile, int g) const { return min16.data() + Group(tile, g) * 16; }
  // Row r's scale of sub-block s and min of group g, whichever way they are held.
  float ScaleOf(int tile, int s, int r) const {
    return half ? Fp16ToFp32(Scale16(tile, s)[r]) : Scale(tile, s)[r];
  }
  float MinOf(int tile, int g, int r) const {
    return half ? Fp16ToFp32(Min16(tile, g)[r]) : Min(tile, g)[r];
  }
};

namespace int8_internal {

inline constexpr int kTileRows = 16;
// Tokens of an AMX tile: the activations are padded to a multiple of it.
inline constexpr int kTileTokens = 16;
// Where token t's group g is in Acts::i8_d and i8_xs: the 16 tokens of a tile are adjacent, so
// that a kernel reaches each of them at a constant offset.
inline std::size_t ScaleAt(int t, int g, int groups) {
  return (std::size_t(t / kTileTokens) * groups + g) * kTileTokens + t % kTileTokens;
}
// Where token t's sum(xq) of group g (k = 0) or of its half k - 1 (k = 1, 2) is in Acts::i8_sums.
inline std::size_t SumAt(int t, int g, int k, int groups) {
  return ScaleAt(t, 3 * g + k, 3 * groups);
}
// sum(xq) of sub-block s (of kSub elements: 16 or 32) of the token whose sums start at `sums`
// (SumAt(t, 0, 0, groups)).
template <int kSub>
std::int32_t SubSum(const std::int32_t* sums, int s) {
  if constexpr (kSub == 16) {
    return sums[(3 * (s / 2) + 1 + s % 2) * kTileTokens];
  } else {
    return sums[3 * s * kTileTokens];
  }
}
// Fewer tokens than this the AMX kernel leaves to VNNI (same bits): below it VNNI's products cost
// less than AMX's padded tile and the widening of 4-bit weights (docs/perf-model.md).
inline constexpr int kAmxMinTokens = 6;

// Calls of at least this many tokens are prefill chunks, which re-read each row tile's lines from
// cache once per group of tokens: the VNNI kernel multiplies them two row tiles at a time (one
// broadcast of a token's bytes feeds both), and they are scheduled in pairs of tiles so that no
// thread's share ends in a lone tile. Calls of fewer tokens (decode, batched decode) stream the
// pack once, with too little work between its lines for the hardware prefetcher to hide them
// (at 16 tokens as at 1): the kernels prefetch each sub-block kPackPrefetchBytes ahead
// (docs/perf-model.md).
inline constexpr int kPrefillMinTokens = 32;
inline constexpr int kPackPrefetchBytes = 2048;
inline void PrefetchAhead(const Int8Pack& w, const std::int8_t* sub_q) {
  // prefetcht0 is baseline x86-64, so every ISA's unit may share this; past the end it is a no-op.
  for (int b = 0; b < w.SubBytes(); b += 64) __builtin_prefetch(sub_q + kPackPrefetchBytes + b);
}

// Rows [tile * 16, (tile + tiles) * 16) of w times tokens [t0, t0 + nt) of x: y[t * ldy + r]
// for the rows below w.rows (y points at row 0, token 0). A call covers many row tiles so that a
// kernel's set-up (AMX's tile configuration) is paid once per call.
struct Int8Tile {
  const Int8Pack* w = nullptr;
  int tile = 0;
  int tiles = 1;
  const Acts* x = nullptr;
  int t0 = 0;
  int nt = 0;
  float* y = nullptr;
  std::size_t ldy = 0;
};
using Int8TileFn = void (*)(const Int8Tile& t);

// f(one) for each row tile of t, `one` being t for that tile alone.
template <class F>
void ForEachTile(const Int8Tile& t, const F& f) {
  Int8Tile one = t;
  one.tiles = 1;
  for (one.tile = t.tile; one.tile < t.tile + t.tiles; ++one.tile) f(one);
}

// w's rows repacked (any WeightType).
std::shared_ptr<const Int8Pack> PackInt8(const QuantMatrix& w);
// Acts of format kInt8 from x [n, cols] (row stride ldx): the sequence's xq, dx and xs.
void PrepareInt8Acts(const float* x, int n, int cols, int ldx, Acts* out, ThreadPool* pool);
// MatMulMany with kInt8 activations (MatMul is the case of one output).
void MatMulInt8(std::span<const MatMulOut> outs, const Acts& x, ThreadPool* pool);

void Int8TileScalar(const Int8Tile& t);
#if defined(CTXPAR_X86_KERNELS)
// One token's activations quantized as PrepareInt8Acts does, bit for bit, with AVX-512 or AVX2;
// group g's scales go to d[g * kTileTokens] and xs[g * kTileTokens], its sums to
// sums[(3 * g + k) * kTileTokens] (SumAt).
void QuantizeRowAvx512(const float* x, int groups, std::int8_t* q, float* d, float* xs,
                       std::int32_t* sums);
void QuantizeRowAvx2(const float* x, int groups, std::int8_t* q, float* d, float* xs,
                     std::int32_t* sums);
void Int8TileAvx2(const Int8Tile& t);     // AVX2 + FMA
void Int8TileAvxVnni(const Int8Tile& t);  // AVX2 + FMA + AVX-VNNI
// The same with the EVEX encoding: AVX2 + FMA + AVX-512 F/BW/VL + VNNI.
void Int8TileAvxVnniEvex(const Int8Tile& t);
void Int8TileVnni(const Int8Tile& t);  // AVX-512 F/BW/VL + VNNI
void Int8TileAmx(const Int8Tile& t);   // AMX-TILE + AMX-INT8 (+ VNNI); t0 a multiple of 16
#endif
// Row tiles [tile, tile + tiles) of a pack with nibbles as the byte form's lines of q (u - bias),
// the B tiles of AMX's tdpbssd and the VNNI prefill's operand, into `out`, tile after tile;
// returns out.data(). With AVX-512 F/BW; defined in the x86 kernels' build only.
const std::int8_t* WidenNibbles(const Int8Pack& w, int tile, int tiles,
                                LineVector<std::int8_t>& out);

}  // namespace int8_internal
}  // namespace ctxpar::compute
