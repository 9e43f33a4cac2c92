// The fp32 matmul of the safetensors models: y = x W^T with every output computed by one fixed
// sequence of operations, on every SIMD path and for any number of rows or threads.
//
// Why fixed: batch invariance (batch.h) needs a row's result not to depend on the other rows of
// the batch, and the tests compare runs on machines with and without AVX-512. So each output is
// sum_k x[k] * w[k] accumulated in 16 lanes (lane j takes the k with k % 16 == j, by fused
// multiply-add in increasing k), then the lanes are added pairwise (j + 8, then j + 4, j + 2,
// j + 1). The scalar, AVX2 (two 8-wide halves) and AVX-512 paths perform exactly these roundings,
// so they give the same bits; tiling and threads only change which outputs are computed together.
//
// Shapes (fp32, row-major): x [n, cols] (row stride ldx), w [rows, cols] (row stride ldw),
// y [n, rows] (row stride ldy): y[t * ldy + r] = sum_c x[t * ldx + c] * w[r * ldw + c].
//
// Thread safety: pure; the pool (may be null) is driven by the calling thread only.
#pragma once

#include "ctxpar/thread_pool.h"

namespace ctxpar::compute {

struct F32Matrix {
  const float* w = nullptr;
  int rows = 0;
  int cols = 0;
  int ld = 0;  // elements between rows

  // Rows [begin, begin + count).
  F32Matrix RowRange(int begin, int count) const {
    return {w + static_cast<long>(begin) * ld, count, cols, ld};
  }
  // Columns [begin, begin + count).
  F32Matrix ColRange(int begin, int count) const { return {w + begin, rows, count, ld}; }
};

void MatMulF32(const F32Matrix& w, const float* x, int n, int ldx, float* y, int ldy,
               ThreadPool* pool);

// One output of the fixed order, on the scalar path (the reference of the tests).
float DotF32Fixed(const float* x, const float* w, int cols);

// "avx512", "avx2" or "scalar": the path MatMulF32 takes on this CPU.
const char* MatMulF32Isa();

}  // namespace ctxpar::compute
