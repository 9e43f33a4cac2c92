// The bf16 products of `--dtype auto` (ActFormat::kInt8) for F16 and BF16 weights: the weights
// rounded to bf16 and repacked once at load, the activations rounded to bf16 per call, fp32
// accumulation on AMX tiles (tdpbf16ps) or by AVX512-BF16 (vdpbf16ps).
//
// Two sequences, each the same for every n, so a row's result never depends on the batch:
// - AVX512-BF16 (and the scalar code, bit for bit): acc = +0, then for each pair p of columns in
//   order, acc += w[2p + 1] * x[2p + 1], then acc += w[2p] * x[2p], each a fused multiply-add (a
//   product of two bf16 is exact in fp32) rounded to nearest even, bf16 inputs that are subnormal
//   read as zero and subnormal results flushed to zero: what vdpbf16ps does per lane.
// - AMX: tdpbf16ps over 32 columns at a time into the fp32 accumulator, every token through the
//   tiles (a decode token padded to 16). The tile multiply rounds its sums otherwise than
//   vdpbf16ps (on this project's Xeon 87 of 256 outputs of a 576-column product differed from
//   the closest per-pair or per-block model of it), so an AMX machine's bits are its own; the
//   tests hold it to batch invariance and the float64 bound.
//
// F16 weights lose 3 of their 10 mantissa bits to bf16; the error bound of a product is that of
// the two bf16 roundings (2^-8 of sum |w x|, relative) plus fp32 accumulation.
//
// Where AVX512-BF16 does not run (or CTXPAR_CPU_ISA lowers the path below avx512_bf16), F16 and
// BF16 weights take the fp32 sequence instead (Bf16Takes is false). AVX512-BF16 is the path of
// CPUs without AMX (Zen 4 and 5, where a vdpbf16ps is issued at an FMA's rate and does twice its
// products); on this project's Xeon, whose vdpbf16ps has half the FMAs' issue rate, the kernel
// measured slower than the fp32 sequence, and AMX takes F16 / BF16 weights (docs/perf-model.md).
//
// Thread safety: the kernels are pure functions of their inputs and write only their output rows.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "compute/linear.h"
#include "ctxpar/thread_pool.h"

namespace ctxpar::compute {

struct Bf16Pack {
  int rows = 0;
  int cols = 0;
  int tiles = 0;  // ceil(rows / 16)
  // [tiles][cols / 2][16 rows][2]: the 16 rows' pair p of a tile in one 64-byte line, the
  // layout of an AMX B tile and of one vdpbf16ps operand. Rows past `rows` are zero.
  PackVector<std::uint16_t> w;

  const std::uint16_t* Line(int tile, int p) const {
    return w.data() + (std::size_t(tile) * (cols / 2) + p) * 32;
  }
};

namespace bf16_internal {

enum class Bf16Isa { kNone, kScalar, kAvx512Bf16, kAmx };

// The path F16 / BF16 weights take here: kAmx, kAvx512Bf16, or kNone (the fp32 sequence). kScalar
// is for tests.
Bf16Isa SelectBf16();

std::shared_ptr<const Bf16Pack> PackBf16(const QuantMatrix& w);
// out[i] = FloatToBf16(in[i]) for i < n, bit for bit: AVX-512 code where `isa` is kAvx512Bf16 or
// kAmx, else scalar.
void RoundToBf16(const float* in, int n, std::uint16_t* out, Bf16Isa isa);
// The index of token t's column c in Acts::bf16 (`cols` a multiple of 32); the columns after c
// up to the end of its 32-group follow it.
inline std::size_t ActAt(int cols, int t, int c) {
  return (std::size_t(t / 16) * (cols / 32) + c / 32) * 512 + (t % 16) * 32 + c % 32;
}
// Acts::bf16 from x [n, cols] (row stride ldx), in ActAt's layout, tokens past n zero.
void PrepareBf16Acts(const float* x, int n, int cols, int ldx, Acts* out, ThreadPool* pool);
// MatMulMany for F16 / BF16 weights and bf16 activations, on `isa` (not kNone).
void MatMulBf16(std::span<const MatMulOut> outs, const Acts& x, ThreadPool* pool, Bf16Isa isa);

// Row tiles [tile, tile + tiles) of w times tokens [t0, t0 + nt): y[t * ldy + r] for the rows
// below w.rows (y points at row 0, token 0).
struct Bf16Tile {
  const Bf16Pack* w = nullptr;
  int tile = 0;
  int tiles = 1;
  const std::uint16_t* x = nullptr;  // Acts::bf16 (ActAt)
  int t0 = 0;
  int nt = 0;
  float* y = nullptr;
  std::size_t ldy = 0;
};

void Bf16TileScalar(const Bf16Tile& t);
#if defined(CTXPAR_X86_KERNELS)
void RoundToBf16Avx512(const float* in, int n, std::uint16_t* out);
void Bf16TileAvx512(const Bf16Tile& t);  // AVX-512 F/BW/VL + BF16
void Bf16TileAmx(const Bf16Tile& t);     // AMX-TILE + AMX-BF16
#endif

}  // namespace bf16_internal
}  // namespace ctxpar::compute
