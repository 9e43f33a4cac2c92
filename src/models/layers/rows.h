// Row bookkeeping every architecture's forward does: the position of each row of a Batch, and
// elementwise steps (norms, RoPE, activations) split over the thread pool by rows.
//
// Thread safety: ForRows is driven by the rank's thread; `f` runs on the pool's threads over
// disjoint row ranges.
#pragma once

#include <cstdint>
#include <vector>

#include "ctxpar/batch.h"
#include "ctxpar/thread_pool.h"
#include "models/layers/elementwise.h"

namespace ctxpar::model {

// positions[t] = the position of the batch's row t (its sequence's pos0 plus its index).
inline void BatchPositions(const Batch& batch, std::vector<int>& positions) {
  positions.resize(batch.tokens.size());
  for (const BatchSeq& seq : batch.seqs) {
    for (int32_t t = 0; t < seq.num_tokens; ++t) {
      positions[seq.token_offset + t] = static_cast<int>(seq.pos0 + t);
    }
  }
}

// Rows are split over the pool when there are enough of them to pay for waking it: a prefill
// chunk otherwise leaves the pool idle for about a tenth of its time. Each row's bits do not
// depend on the split.
inline constexpr int kParallelRows = 32;

// f(begin, end) over [0, n).
template <class F>
void ForRows(ThreadPool* pool, int n, const F& f) {
  if (pool == nullptr || n < kParallelRows) return f(0, n);
  pool->ParallelFor(n, [&](std::int64_t begin, std::int64_t end) {
    f(static_cast<int>(begin), static_cast<int>(end));
  });
}

// x[r * width + c] += bias[c] for n rows of `width`.
inline void AddRowBias(float* x, int n, const float* bias, int width) {
  for (int r = 0; r < n; ++r) {
    float* row = x + std::size_t(r) * width;
    for (int c = 0; c < width; ++c) row[c] += bias[c];
  }
}

// out = RmsNorm(in) with `weight` over n rows of `dim`, split over the pool; out may alias in.
inline void RmsNormRows(ThreadPool* pool, const float* in, const float* weight, int n, int dim,
                        float eps, float* out) {
  ForRows(pool, n, [&](int begin, int end) {
    const std::size_t first = std::size_t(begin) * dim;
    RmsNorm(in + first, weight, end - begin, dim, eps, out + first);
  });
}

// x += RmsNorm(y) with `weight` over n rows of `dim` (Gemma's post-attention and post-FFN norms
// before the residual add), split over the pool; `normed` is scratch.
inline void AddRmsNormRows(ThreadPool* pool, const float* y, const float* weight, int n, int dim,
                           float eps, std::vector<float>& normed, float* x) {
  normed.resize(std::size_t(n) * dim);
  ForRows(pool, n, [&](int begin, int end) {
    const std::size_t first = std::size_t(begin) * dim, count = std::size_t(end - begin) * dim;
    RmsNorm(y + first, weight, end - begin, dim, eps, normed.data() + first);
    for (std::size_t i = first; i < first + count; ++i) x[i] += normed[i];
  });
}

}  // namespace ctxpar::model
