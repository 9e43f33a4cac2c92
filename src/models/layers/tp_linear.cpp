#include "models/layers/tp_linear.h"

#include <algorithm>

namespace ctxpar::model {

void TpLinear::ColumnParallel(std::span<const MatMulOut> outs, const float* x, int n, int cols) {
  compute_->MatMul(outs, compute::F32(x, n, cols));
}

void TpLinear::ColumnParallel(const F32Matrix& w, const float* x, int n, int ldx, float* y,
                              int ldy) {
  compute_->MatMul(w, compute::F32(x, n, w.cols, ldx), compute::F32(y, n, w.rows, ldy));
}

Status TpLinear::GatherColumns(const float* mine, int n, const std::vector<int>& bounds,
                               std::vector<float>& out) {
  const int tp = size();
  const int total = bounds.back();
  int width = 0;
  for (int r = 0; r < tp; ++r) width = std::max(width, bounds[r + 1] - bounds[r]);
  const int own = bounds[rank() + 1] - bounds[rank()];
  // Uneven shards travel padded to the widest.
  send_.assign(std::size_t(n) * width, 0.0f);
  for (int t = 0; t < n; ++t) {
    std::copy_n(mine + std::size_t(t) * own, own, send_.begin() + std::size_t(t) * width);
  }
  gathered_.resize(send_.size() * tp);
  CTXPAR_RETURN_IF_ERROR(
      world_->AllGather(send_.data(), gathered_.data(), send_.size(), DataType::kF32));
  out.resize(std::size_t(n) * total);
  for (int r = 0; r < tp; ++r) {
    for (int t = 0; t < n; ++t) {
      std::copy_n(gathered_.begin() + (std::size_t(r) * n + t) * width, bounds[r + 1] - bounds[r],
                  out.begin() + std::size_t(t) * total + bounds[r]);
    }
  }
  return Status::Ok();
}

Expected<const float*> TpLinear::RowParallel(const QuantMatrix& w, const float* mine, int n,
                                             const std::vector<int>& in_bounds,
                                             const std::vector<int>& out_bounds) {
  const float* in = mine;
  if (size() > 1) {
    CTXPAR_RETURN_IF_ERROR(GatherColumns(mine, n, in_bounds, in_full_));
    in = in_full_.data();
  }
  y_.resize(std::size_t(n) * w.rows);
  const MatMulOut out[] = {{w, y_.data(), w.rows}};
  compute_->MatMul(out, compute::F32(in, n, w.cols));
  if (size() == 1) return y_.data();
  CTXPAR_RETURN_IF_ERROR(GatherColumns(y_.data(), n, out_bounds, y_full_));
  return y_full_.data();
}

void TpLinear::RowParallelPartial(const F32Matrix& w, const float* x, int n, int ldx, float* y,
                                  int ldy) {
  ColumnParallel(w, x, n, ldx, y, ldy);
}

Status TpLinear::ReducePartials(float* sum, std::size_t n) {
  const int ranks = size();
  if (ranks == 1) return Status::Ok();
  scratch_.resize(n * ranks);
  CTXPAR_RETURN_IF_ERROR(world_->AllGather(sum, scratch_.data(), n, DataType::kF32));
  for (std::size_t i = 0; i < n; ++i) {
    float s = scratch_[i];
    for (int r = 1; r < ranks; ++r) s += scratch_[r * n + i];
    sum[i] = s;
  }
  return Status::Ok();
}

template <class Product>
Status TpLinear::GatherVocab(const VocabShard& shard, int vocab, int n, float* logits,
                             Product product) {
  if (size() == 1) {
    product(logits, vocab);
    return Status::Ok();
  }
  shard_logits_.assign(std::size_t(n) * shard.rows, 0.0f);
  product(shard_logits_.data(), shard.rows);
  return GatherVocabShards(*world_, shard_logits_.data(), n, shard.rows, vocab, scratch_, logits);
}

Status TpLinear::VocabLogits(const QuantMatrix& w, const VocabShard& shard, int vocab,
                             const float* rows, int n, float* logits) {
  return GatherVocab(shard, vocab, n, logits, [&](float* y, int ldy) {
    const MatMulOut out[] = {{w, y, ldy}};
    compute_->MatMul(out, compute::F32(rows, n, w.cols));
  });
}

Status TpLinear::VocabLogits(const F32Matrix& w, const VocabShard& shard, int vocab,
                             const float* rows, int n, float* logits) {
  return GatherVocab(shard, vocab, n, logits,
                     [&](float* y, int ldy) { ColumnParallel(w, rows, n, w.cols, y, ldy); });
}

}  // namespace ctxpar::model
