// The per-ISA matmul kernels behind MatMul (internal). Each ISA's kernels live in their own
// translation unit compiled with that ISA's flags (linear_scalar.cpp, linear_avx2.cpp,
// linear_avx512.cpp); MatMul picks one after checking the CPU, so no wider instruction runs on a
// CPU that lacks it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>  // linear_impl.h's conditional_t
#include <utility>      // linear_impl.h's integer_sequence

#include "compute/linear.h"

namespace ctxpar::compute::linear_internal {

// Rows per tile: the unit MatMul hands to a thread, widened once to fp32 by the prefill path.
inline constexpr int kRowTile = 16;

// One row tile of a MatMul with fp32 activations: rows [0, rows) of the tile times tokens
// [0, n), over the blocks of the rows (linear.h's contract).
struct F32Tile {
  WeightType type = WeightType::kQ4_1;
  const std::uint8_t* w = nullptr;  // block 0 of the tile's row 0
  std::size_t row_stride = 0;
  int rows = 0;              // <= kRowTile
  const float* x = nullptr;  // token t's first column: x + t * ldx
  std::size_t ldx = 0;
  int n = 0;
  float* y = nullptr;  // y[t * ldy + r] for the tile's row r
  std::size_t ldy = 0;
  // Blocks [block0, block1) of the rows: all of them, or a piece of the widened path.
  int block0 = 0;
  int block1 = 0;
  // A piece of a row longer than the widened path's runs: the lanes of its outputs come from
  // `carry` (carry_in) and go back to it (carry_out) instead of starting at 0 and being
  // reduced. carry: [tokens of the chunk][kRowTile rows][16 lanes].
  float* carry = nullptr;
  bool carry_in = false;
  bool carry_out = false;
  float* scratch = nullptr;     // kRowTile * blocks per row * 32 floats (the widened tile)
  std::size_t wide_stride = 0;  // floats between the widened rows: blocks per row * 32
  bool wide = false;            // widen the tile to fp32 (n above the kernel's direct_max_tokens)
  bool widened = false;         // scratch holds this tile widened already (a later token chunk)
};

// One ISA's fp32 kernel: the tile function, the n above which it widens the tile (so that
// MatMul runs each tile's token chunks of a span back to back and widens it once per span), and
// the tokens of its widened register tile (a chunk of whole tiles leaves none short).
struct F32Kernel {
  void (*tile)(const F32Tile& tile);
  int direct_max_tokens;
  int wide_tokens;
};
// One output of the int8-activation path over nb blocks: a fixed sequence for any n.
using DotQ8Fn = float (*)(const std::uint8_t* w, const ActBlock* x, int nb);

struct Q8Dots {
  DotQ8Fn q41;
  DotQ8Fn q80;
};

extern const F32Kernel kF32Scalar;
extern const Q8Dots kQ8DotsScalar;
#if defined(CTXPAR_X86_KERNELS)
extern const F32Kernel kF32Avx2;
extern const F32Kernel kF32Avx512;
extern const Q8Dots kQ8DotsAvx2;
extern const Q8Dots kQ8DotsVnni;  // needs avx512vnni besides the AVX-512 path's features
#endif

}  // namespace ctxpar::compute::linear_internal
