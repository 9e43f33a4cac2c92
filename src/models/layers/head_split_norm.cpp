#include "models/layers/head_split_norm.h"

#include <cmath>
#include <cstddef>

#include "models/layers/elementwise.h"
#include "models/layers/rows.h"

namespace ctxpar::model {

Status HeadSplitRmsNorm::Run(Communicator& tp, ThreadPool* pool, std::span<const HeadRows> parts,
                             int n, int head_dim, float eps) {
  std::size_t width = 0;
  for (const HeadRows& p : parts) width += p.total;
  sums_.assign(std::size_t(n) * width, 0.0);
  const std::size_t hd = head_dim;
  ForRows(pool, n, [&](int begin, int end) {
    for (int row = begin; row < end; ++row) {
      double* sums = sums_.data() + row * width;
      for (const HeadRows& p : parts) {
        const float* x = p.rows + row * p.count * hd;
        for (int h = p.owned_first; h < p.owned_first + p.owned; ++h) {
          sums[h] = SumOfSquares(x + (h - p.first) * hd, head_dim);
        }
        sums += p.total;
      }
    }
  });
  if (tp.size() > 1) {
    CTXPAR_RETURN_IF_ERROR(
        tp.AllReduce(sums_.data(), sums_.data(), sums_.size(), DataType::kF64, ReduceOp::kSum));
  }
  ForRows(pool, n, [&](int begin, int end) {
    for (int row = begin; row < end; ++row) {
      const double* sums = sums_.data() + row * width;
      for (const HeadRows& p : parts) {
        double sum = 0.0;
        for (int h = 0; h < p.total; ++h) sum += sums[h];
        const float scale = 1.0f / std::sqrt(float(sum / double(p.total * hd)) + eps);
        float* x = p.rows + row * p.count * hd;
        const float* w = p.weight + p.first * hd;
        for (std::size_t c = 0; c < p.count * hd; ++c) x[c] = x[c] * scale * w[c];
        sums += p.total;
      }
    }
  });
  return Status::Ok();
}

}  // namespace ctxpar::model
