#include "models/layers/head_split_norm.h"

#include <cmath>
#include <cstddef>

namespace ctxpar::model {

Status HeadSplitRmsNorm::Run(Communicator& tp, compute::Compute& c, std::span<const HeadRows> parts,
                             int n, int head_dim, float eps) {
  std::size_t width = 0;
  for (const HeadRows& p : parts) width += p.total;
  sums_.assign(std::size_t(n) * width, 0.0);
  const std::size_t hd = head_dim;
  std::size_t offset = 0;
  for (const HeadRows& p : parts) {
    const compute::Tensor owned =
        compute::F32(p.rows + (p.owned_first - p.first) * hd, n, p.owned * hd, p.count * hd);
    c.SumsOfSquares(owned, head_dim, sums_.data() + offset + p.owned_first, width);
    offset += p.total;
  }
  if (tp.size() > 1) {
    CTXPAR_RETURN_IF_ERROR(
        tp.AllReduce(sums_.data(), sums_.data(), sums_.size(), DataType::kF64, ReduceOp::kSum));
  }
  scales_.resize(n);
  offset = 0;
  for (const HeadRows& p : parts) {
    for (int row = 0; row < n; ++row) {
      const double* sums = sums_.data() + row * width + offset;
      double sum = 0.0;
      for (int h = 0; h < p.total; ++h) sum += sums[h];
      scales_[row] = 1.0f / std::sqrt(float(sum / double(p.total * hd)) + eps);
    }
    c.ScaleRows(compute::F32(p.rows, n, p.count * hd), scales_.data(), p.weight + p.first * hd);
    offset += p.total;
  }
  return Status::Ok();
}

}  // namespace ctxpar::model
