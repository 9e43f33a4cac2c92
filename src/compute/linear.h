// The matmul kernels of the models: ggml-quantized weights (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and the
// K-quants Q4_K, Q5_K, Q6_K) or unquantized ones (F32, F16, BF16), read in their blocks as stored
// in the GGUF file, times fp32 activations or activations quantized per 32-element block to int8
// (the way llama.cpp's CPU backend computes).
//
// Why the weights stay in their quantized blocks rather than dequantized bf16/fp32 copies: decode
// reads every weight once per token, so its speed is bounded by weight bytes over memory
// bandwidth, and Q4_1 is 0.625 byte per weight against 2 for bf16 and 4 for fp32. Prefill is
// compute-bound: a MatMul of more than a few rows (8 on AVX2, 3 on AVX-512) widens each 16-row
// tile to fp32 once per span of about 1 MiB of activations and runs chunks of the span's tokens
// over it; fewer rows dequantize each group of 32 weights in registers once per group of tokens.
// Activations default to fp32 (see ActFormat; docs/perf-model.md has the measurements).
//
// Contract
// - A weight matrix W is [rows, cols] row-major in ggml blocks of BlockSize(type) elements (32,
//   or 256 for the K-quants) along cols: row r, block b starts at data + r * row_stride +
//   b * BlockBytes(type). A group is 32 consecutive elements of a row (a K-quant block holds 8).
// - Activations x [n, cols] fp32 are used as they are, or quantized per row into cols / 32
//   ActBlocks (Q8_1 for Q4_1 weights: d, s = d * sum(q); Q8_0 for Q8_0 weights) with d and s
//   rounded to fp16 as ggml stores them, so the dot products match ggml's up to summation order.
//   The int8 path takes Q4_1 and Q8_0 weights only (CheckActFormat).
// - y[t * ldy + r] = sum_c W[r, c] * x[t, c] for t < n, r < rows.
// - Batch invariance: y[t, r] is computed by one fixed sequence of floating-point operations of
//   W's row r and x's row t alone, whatever n, t, the thread count or the code path (register
//   tiles of 1 to 5 tokens, widened tiles, token chunks); so a row's bits do not change when it
//   runs alone, among 63 others or in a prefill chunk.
// - The fp32 sequence (ActFormat::kF32), the same on every ISA (scalar, AVX2, AVX-512): weights
//   are dequantized exactly as DequantizeRow does: Q4_1 and Q5_1 fma(q, d, m) rounded once (q * d
//   is exact, so this is gguf-py's d * q + m); Q8_0 q * d, Q4_0 (q - 8) * d and Q5_0
//   (q - 16) * d, exact; the K-quants bitwise as gguf-py (ctxpar/quant.h's DequantizeRow):
//   Q4_K and Q5_K (d * sc) * q - dmin * m, Q6_K (d * sc) * (q - 32), each operation rounded;
//   F16 and BF16 widened to fp32 (exact), F32 as stored; Q2_K, Q3_K, IQ4_NL, IQ4_XS and MXFP4
//   by DequantizeRow itself (a block at a time, then each group loaded).
//   16 lanes start at +0; for each group g in order, lane l does acc[l] = fma(w[l], x[l],
//   acc[l]) and then acc[l] = fma(w[16 + l], x[16 + l], acc[l]) (elements of group g). The
//   lanes then reduce as r[l] = acc[l] + acc[l + 8], r[l] += r[l + 4], r[l] += r[l + 2],
//   r[0] + r[1]. CTXPAR_CPU_ISA (cpu_features.h) forces a lower ISA for tests.
// - The int8 sequence (ActFormat::kQ8) is fixed per ISA: one dot product per output, the same
//   function for every n.
// - Thread safety: the kernels are pure functions of their inputs and write only their output
//   range; the pool (thread_pool.h) is driven by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <span>
#include <vector>

#include "ctxpar/pack_arena.h"
#include "ctxpar/quant.h"
#include "ctxpar/status.h"
#include "ctxpar/thread_pool.h"

namespace ctxpar::compute {

// kF32, kF16 and kBF16: unquantized weights, taken in groups of 32 elements as the blocks of the
// quantized types (what llama.cpp's converter writes by default).
enum class WeightType {
  kQ4_1,
  kQ8_0,
  kQ5_0,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kF32,
  kF16,
  kBF16,
  kQ4_0,
  kQ5_1,
  kQ2_K,
  kQ3_K,
  kIQ4_NL,
  kIQ4_XS,
  kMXFP4
};

// Elements of a group: the unit of the fp32 sequence and of the int8 activations.
inline constexpr int kBlock = 32;

// Elements of one block of `type`: 32, or 256 (8 groups) for the K-quants.
constexpr int BlockSize(WeightType type) {
  return type == WeightType::kQ4_K || type == WeightType::kQ5_K || type == WeightType::kQ6_K ||
                 type == WeightType::kQ2_K || type == WeightType::kQ3_K ||
                 type == WeightType::kIQ4_XS
             ? 256
             : 32;
}

// Bytes of one block, ggml's layouts (ctxpar/quant.h): Q4_1 = fp16 d, fp16 m, 16 nibble bytes;
// Q8_0 = fp16 d, 32 int8; Q4_0 18, Q5_0 22, Q5_1 24, Q4_K 144, Q5_K 176, Q6_K 210; a group of 32
// F32 (128), F16 or BF16 (64) values.
constexpr std::size_t BlockBytes(WeightType type) {
  switch (type) {
    case WeightType::kQ4_1:
      return sizeof(BlockQ4_1);
    case WeightType::kQ8_0:
      return sizeof(BlockQ8_0);
    case WeightType::kQ5_0:
      return sizeof(BlockQ5_0);
    case WeightType::kQ4_K:
      return sizeof(BlockQ4K);
    case WeightType::kQ5_K:
      return sizeof(BlockQ5K);
    case WeightType::kQ6_K:
      return sizeof(BlockQ6K);
    case WeightType::kQ2_K:
      return sizeof(BlockQ2K);
    case WeightType::kQ3_K:
      return sizeof(BlockQ3K);
    case WeightType::kQ4_0:
      return sizeof(BlockQ4_0);
    case WeightType::kQ5_1:
      return sizeof(BlockQ5_1);
    case WeightType::kIQ4_NL:
      return sizeof(BlockIQ4NL);
    case WeightType::kIQ4_XS:
      return sizeof(BlockIQ4XS);
    case WeightType::kMXFP4:
      return sizeof(BlockMXFP4);
    case WeightType::kF32:
      return 4 * kBlock;
    case WeightType::kF16:
    case WeightType::kBF16:
      return 2 * kBlock;
  }
  return 0;
}

// The ggml types the matmuls take, for messages.
inline constexpr const char* kMatMulTypes =
    "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS "
    "and MXFP4";

// The WeightType of a GGUF tensor's type: InvalidArgument naming the type when the kernels do
// not take it.
Expected<WeightType> WeightTypeFor(GgmlType type);
// ggml's type of a WeightType.
GgmlType GgmlTypeOf(WeightType type);

struct Int8Pack;  // linear_int8.h: the weights repacked for the matrix units
struct Bf16Pack;  // linear_bf16.h: F16 / BF16 weights repacked for the bf16 products

struct QuantMatrix {
  WeightType type = WeightType::kQ4_1;
  const std::uint8_t* data = nullptr;
  int rows = 0;
  int cols = 0;                // a multiple of BlockSize(type)
  std::size_t row_stride = 0;  // bytes between rows
  // These rows repacked for ActFormat::kInt8 (WithInt8Pack), shared by the copies; null: MatMul
  // with kInt8 repacks them per call.
  std::shared_ptr<const Int8Pack> int8{};
  // F16 / BF16 rows repacked for kInt8's bf16 products (WithInt8Pack where Bf16Takes); null:
  // repacked per call.
  std::shared_ptr<const Bf16Pack> bf16{};

  // Rows [begin, begin + count): a rank's shard of a projection (without the packs).
  QuantMatrix RowRange(int begin, int count) const;
};

struct ActBlock {
  float d;  // scale, fp16-rounded
  float s;  // d * sum(q), fp16-rounded (Q8_1 only)
  std::int8_t q[kBlock];
};

// Cache-line-aligned storage for the kernels' operands: an unaligned 32- or 64-byte load that
// crosses a line costs two, and the widened path issues seven loads per twelve FMAs. Memory:
// where it comes from (Allocate(bytes), Free(p, bytes), both 64-byte aligned).
template <class T, class Memory>
struct LineAllocator {
  using value_type = T;
  LineAllocator() = default;
  template <class U>
  LineAllocator(const LineAllocator<U, Memory>&) {}
  T* allocate(std::size_t n) { return static_cast<T*>(Memory::Allocate(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) { Memory::Free(p, n * sizeof(T)); }
  bool operator==(const LineAllocator&) const { return true; }
};
struct HeapLines {
  static constexpr std::align_val_t kAlign{64};
  static void* Allocate(std::size_t bytes) { return ::operator new(bytes, kAlign); }
  static void Free(void* p, std::size_t) { ::operator delete(p, kAlign); }
};
// The weight packs: the pack arena (ctxpar/pack_arena.h: huge pages for the streams of a decode
// step).
struct PackLines {
  static void* Allocate(std::size_t bytes) { return AllocatePack(bytes); }
  static void Free(void* p, std::size_t bytes) { FreePack(p, bytes); }
};
template <class T>
using LineVector = std::vector<T, LineAllocator<T, HeapLines>>;
template <class T>
using PackVector = std::vector<T, LineAllocator<T, PackLines>>;

// How activations enter a matmul.
// - kF32: as they are. A perturbation of the
//   input moves the output by as little: what keeps greedy decoding identical across DCP sizes
//   and combine backends, whose attention sums round differently (docs/model.md).
// - kQ8: quantized per block to int8 like llama.cpp's CPU backend (Q8_1 for Q4_1 weights, Q8_0
//   for Q8_0 weights; AVX512-VNNI dot products); a 1-ulp change of an input can flip a rounding
//   and the difference then grows to the size of the quantization noise.
// - kInt8: the matrix units (`--dtype auto`): activations quantized per 32-group to int8 with an
//   fp32 scale, weights repacked to int8 tiles (WithInt8Pack), int32 products on AMX tiles,
//   AVX512-VNNI, AVX2 or scalar code, one fixed fp32 sequence per output (linear_int8.h), the same
//   bits on every ISA and for every n. Takes the quantized types of Int8Takes; F16 and BF16
//   weights take bf16 products where Bf16Takes (linear_bf16.h: AMX-BF16 or AVX512-BF16, one
//   sequence for every n on each); a matrix of any other type (F32, Q4_0, Q5_1, Q2_K, Q3_K) runs
//   the kF32 sequence instead (PrepareActs, WithInt8Pack). As kQ8, it is not layout-invariant.
enum class ActFormat { kF32, kQ8, kInt8 };

// Whether ActFormat::kInt8 has a repacking for `type`: Q4_1, Q8_0, Q5_0, Q4_K, Q5_K, Q6_K.
bool Int8Takes(WeightType type);
// Whether ActFormat::kInt8 takes `type` (F16, BF16) as bf16 products on this CPU now
// (linear_bf16.h); false where no bf16 path runs, and those weights take the fp32 sequence.
bool Bf16Takes(WeightType type);

// Activations of n rows prepared for one weight type; row t is Row(t) / F32Row(t).
struct Acts {
  ActFormat format = ActFormat::kF32;
  WeightType type = WeightType::kQ4_1;
  int n = 0;
  int blocks_per_row = 0;
  std::vector<ActBlock> blocks;  // kQ8
  // kInt8: [n rounded up to 16, cols] int8, and per token and 32-group the scale dx and dx *
  // sum(q), tile-major: [n / 16][blocks_per_row][16] (int8_internal::ScaleAt). What lies past
  // row n is unspecified: only rows of results that are dropped read it. The buffers may be
  // longer than that (they only grow).
  LineVector<std::int8_t> i8;
  std::vector<float> i8_d, i8_xs;
  // kInt8: per token and 32-group, sum(xq) of the group and of each of its halves, tile-major as
  // i8_d with 3 values per group (int8_internal::SumAt): the correction of the kernels that take
  // q + bias as the unsigned operand.
  std::vector<std::int32_t> i8_sums;
  // kInt8 for the types of Bf16Takes: bf16, tile-major [n / 16][cols / 32][16 tokens][32] (n
  // rounded up to 16, tokens past n zero): a block of 16 tokens' 32 columns is an AMX A tile
  // (bf16_internal::ActAt).
  LineVector<std::uint16_t> bf16;
  // kF32: [n, blocks_per_row * 32] at f32, the caller's rows themselves when they are contiguous
  // and cache-line aligned, else a copy in x.
  const float* f32 = nullptr;
  LineVector<float> x;
  const ActBlock* Row(int t) const { return blocks.data() + std::size_t(t) * blocks_per_row; }
  const float* F32Row(int t) const { return f32 + std::size_t(t) * blocks_per_row * kBlock; }
};

// Ok when MatMul takes activations in `format` for weights of `type`; Unimplemented naming the
// type otherwise (kQ8 takes Q4_1 and Q8_0). MatMul requires it: it writes NaN for a pair this
// refuses rather than a wrong product.
Status CheckActFormat(ActFormat format, WeightType type);

// Prepares x [n, cols] (row stride ldx floats) for weights of `type`. cols % 32 == 0. With kF32
// the result may point into x, which must then outlive its use by MatMul unchanged. kInt8 for a
// type Int8Takes refuses prepares kF32. kInt8 quantizes rows on `pool` where one is given (the
// same bits).
void PrepareActs(ActFormat format, WeightType type, const float* x, int n, int cols, int ldx,
                 Acts* out, ThreadPool* pool = nullptr);

// m with its rows repacked for ActFormat::kInt8 when `format` is kInt8 and Int8Takes(m.type)
// (once, at load: the pack lives as long as a copy of the result), else m as it is.
QuantMatrix WithInt8Pack(QuantMatrix m, ActFormat format);

// y = x W^T, x prepared with w.cols columns. pool may be null (single thread).
void MatMul(const QuantMatrix& w, const Acts& x, float* y, int ldy, ThreadPool* pool);

// One product of a fused MatMul: y = x W^T over all of w's columns.
struct MatMulOut {
  QuantMatrix w;
  float* y;
  int ldy;
};

// Several products of the same activations (q, k and v; gate and up) in one pass over the pool:
// each output's bits are MatMul's, with one wait for the pool's threads instead of one each.
void MatMulMany(std::span<const MatMulOut> outs, const Acts& x, ThreadPool* pool);

// Row r of w dequantized to fp32 (the embedding lookup): the weights the fp32 kernels multiply
// (for Q5_0 and the K-quants, ctxpar/quant.h's DequantizeRow, equal to gguf-py's).
void DequantizeRow(const QuantMatrix& w, int r, float* out);

// The scalar int8 dot product (no SIMD), for tests of the dispatched ones (Q4_1, Q8_0).
float DotScalar(WeightType type, const std::uint8_t* w_row, const ActBlock* x, int num_blocks);
// The fp32 path MatMul takes now ("avx512", "avx2" or "scalar"; CTXPAR_CPU_ISA lowers it).
const char* MatMulIsa();
// The int8 (kInt8) path MatMul takes now: "amx" (AMX tiles for groups of 4 to 16 tokens, VNNI
// for fewer), "avx512_vnni", "avx_vnni", "avx2" or "scalar". CTXPAR_CPU_ISA lowers it (avx2:
// avx_vnni where the CPU has it, else avx2; scalar: scalar), and so does
// CTXPAR_INT8_ISA=scalar|avx2|avx_vnni|avx512_vnni|amx (tests; avx_vnni forced on a CPU with
// AVX512-VNNI but not AVX-VNNI runs its kernel with the EVEX encoding); a value naming no path,
// or one this CPU lacks, is ignored here and reported by CheckInt8Isa.
const char* MatMulInt8Isa();
// The bf16 path (kInt8, F16 / BF16 weights) MatMul takes now: "amx_bf16", "avx512_bf16", or
// "none" (the fp32 sequence).
const char* MatMulBf16Isa();
// Ok, or InvalidArgument / FailedPrecondition for a CTXPAR_INT8_ISA that names no path or one
// this CPU (or the OS's AMX tile permission) lacks.
Status CheckInt8Isa();

}  // namespace ctxpar::compute
