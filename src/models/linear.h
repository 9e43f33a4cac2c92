// The matmul kernels of the Llama forward: ggml-quantized weights (Q4_1, Q8_0), read in their
// blocks as stored in the GGUF file, times fp32 activations or activations quantized per
// 32-element block to int8 (the way llama.cpp's CPU backend computes).
//
// Why the weights stay in their quantized blocks rather than dequantized bf16/fp32 copies: decode
// reads every weight once per token, so its speed is bounded by weight bytes over memory
// bandwidth, and Q4_1 is 0.625 byte per weight against 2 for bf16 and 4 for fp32. Prefill is
// compute-bound: MatMul widens each 16-row tile to fp32 once and runs every prompt token over it.
// Activations default to fp32 (see ActFormat; docs/perf-model.md has the measurements).
//
// Contract
// - A weight matrix W is [rows, cols] row-major in ggml blocks of 32 along cols: row r, block b
//   starts at data + r * row_stride + b * BlockBytes(type). A view of a column range (a
//   row-sharded projection) keeps row_stride and offsets data by whole blocks.
// - Activations x [n, cols] fp32 are used as they are, or quantized per row into cols / 32
//   ActBlocks (Q8_1 for Q4_1 weights: d, s = d * sum(q); Q8_0 for Q8_0 weights) with d and s
//   rounded to fp16 as ggml stores them, so the dot products match ggml's up to summation order.
// - y[t * ldy + r] = sum_c W[r, c] * x[t, c] for t < n, r < rows.
// - Thread safety: the kernels are pure functions of their inputs and write only their output
//   range; the pool (thread_pool.h) is driven by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ctxpar/quant.h"
#include "ctxpar/status.h"
#include "ctxpar/thread_pool.h"

namespace ctxpar::model {

enum class WeightType { kQ4_1, kQ8_0 };

inline constexpr int kBlock = 32;

// Bytes of one 32-weight block: Q4_1 = fp16 d, fp16 m, 16 nibble bytes; Q8_0 = fp16 d, 32 int8.
constexpr std::size_t BlockBytes(WeightType type) { return type == WeightType::kQ4_1 ? 20 : 34; }

struct QuantMatrix {
  WeightType type = WeightType::kQ4_1;
  const std::uint8_t* data = nullptr;
  int rows = 0;
  int cols = 0;                // a multiple of 32
  std::size_t row_stride = 0;  // bytes between rows

  // Rows [begin, begin + count): an output-sharded (column-parallel) projection.
  QuantMatrix RowRange(int begin, int count) const;
  // Columns [begin, begin + count), both multiples of 32: an input-sharded (row-parallel) one.
  QuantMatrix ColRange(int begin, int count) const;
};

struct ActBlock {
  float d;  // scale, fp16-rounded
  float s;  // d * sum(q), fp16-rounded (Q8_1 only)
  std::int8_t q[kBlock];
};

// How activations enter a matmul.
// - kF32: as they are (with per-block sums for Q4_1's offset term). A perturbation of the
//   input moves the output by as little: what keeps greedy decoding identical across DCP sizes
//   and combine backends, whose attention sums round differently (docs/model.md).
// - kQ8: quantized per block to int8 like llama.cpp's CPU backend (Q8_1 for Q4_1 weights, Q8_0
//   for Q8_0 weights; AVX512-VNNI dot products); a 1-ulp change of an input can flip a rounding
//   and the difference then grows to the size of the quantization noise.
enum class ActFormat { kF32, kQ8 };

// Activations of n rows prepared for one weight type; row t is Row(t) / F32Row(t).
struct Acts {
  ActFormat format = ActFormat::kF32;
  WeightType type = WeightType::kQ4_1;
  int n = 0;
  int blocks_per_row = 0;
  std::vector<ActBlock> blocks;   // kQ8
  std::vector<float> x;           // kF32: [n, blocks_per_row * 32]
  std::vector<float> block_sums;  // kF32: [n, blocks_per_row]
  const ActBlock* Row(int t) const { return blocks.data() + std::size_t(t) * blocks_per_row; }
  const float* F32Row(int t) const { return x.data() + std::size_t(t) * blocks_per_row * kBlock; }
  const float* Sums(int t) const { return block_sums.data() + std::size_t(t) * blocks_per_row; }
};

// Prepares x [n, cols] (row stride ldx floats) for weights of `type`. cols % 32 == 0.
void PrepareActs(ActFormat format, WeightType type, const float* x, int n, int cols, int ldx,
                 Acts* out);

// y = x W^T over the column range [col_begin, col_begin + w.cols) of the prepared acts (so one
// preparation serves a row-sharded view). pool may be null (single thread). Each y element is
// computed by one fixed sequence of operations, whatever the thread count or n.
void MatMul(const QuantMatrix& w, const Acts& x, int col_begin, float* y, int ldy,
            ThreadPool* pool);

// Row r of w dequantized to fp32 (the embedding lookup).
void DequantizeRow(const QuantMatrix& w, int r, float* out);

// The scalar kernels (no SIMD), for tests of the dispatched ones.
float DotScalar(WeightType type, const std::uint8_t* w_row, const ActBlock* x, int num_blocks);
float DotF32Scalar(WeightType type, const std::uint8_t* w_row, const float* x, const float* sums,
                   int num_blocks);
// The kernel MatMul dispatches to on this CPU ("avx512vnni", "avx2" or "scalar").
const char* MatMulIsa();


}  // namespace ctxpar::model
