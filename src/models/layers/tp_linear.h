// Tensor-parallel linear layers over the TP group, shared by every architecture (SGLang's
// ColumnParallelLinear / RowParallelLinear), for both weight kinds: GGUF blocks (QuantMatrix,
// linear.h; Llama, Gemma 3) and fp32 rows widened from safetensors (F32Matrix, matmul_f32.h;
// DeepSeek-V3).
//
// - Column-parallel: the rank holds some output rows of W (its heads, its MLP features; a
//   replicated weight is the case of every row) and multiplies the whole activation row by them;
//   no collective.
// - Row-parallel, gathered (QuantMatrix: o_proj, ffn_down): the ranks hold columns of the input
//   (their heads, their features). Instead of multiplying partial columns and all-reducing
//   partial sums (whose rounding depends on tp), the input is all-gathered, each rank computes
//   its output rows (`out_bounds`) over the whole input row, and the rows are all-gathered.
//   Every output is then one dot product over the whole row in the kernels' fixed order, so a run
//   at (tp, dcp = 1) equals the tp = 1 run bit for bit, with either activation format.
// - Row-parallel, partial sums (F32Matrix: DeepSeek's o_proj and MLP down projections): each rank
//   multiplies its input columns by the matching columns of W, the caller adds a layer's partials
//   (o_proj of decode and prefill rows, the experts and the shared expert), and ReducePartials
//   adds the ranks' sums in rank order, so the result does not depend on the MPI library's
//   reduction order.
// - Vocab-parallel head: rank r holds vocab rows [r * shard, ...) (vocab.h), the logits shards
//   are all-gathered.
//
// The products run on the compute seam (compute.h); the collectives pass host-visible memory.
// Shapes are row-major fp32; bounds are tp + 1 column (or row) offsets, rank r's range being
// [bounds[r], bounds[r + 1]). Thread safety: one rank's thread; the collectives are over the
// TP communicator.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "compute/compute.h"
#include "ctxpar/communicator.h"
#include "ctxpar/status.h"
#include "models/layers/compute_types.h"
#include "models/layers/vocab.h"

namespace ctxpar::model {

// fp32 weights held for a span of heads from head `first`, `per_head` rows (a column-parallel
// weight: q_b_proj, kv_b_proj) or columns (a row-parallel one: o_proj) each: a rank that computes
// for a subset of the span (its own heads, its decode Q heads, its prefill heads) takes its slice.
struct F32HeadSpan {
  F32Matrix w;
  int first = 0;
  int per_head = 0;

  // The rows (columns) of heads [head, head + count).
  F32Matrix Rows(int head, int count) const {
    return w.RowRange((head - first) * per_head, count * per_head);
  }
  F32Matrix Cols(int head, int count) const {
    return w.ColRange((head - first) * per_head, count * per_head);
  }
};

class TpLinear {
 public:
  // `world` is the TP group and `compute` the rank's compute seam (neither owned).
  TpLinear(Communicator* world, compute::Compute* compute) : world_(world), compute_(compute) {}

  int size() const { return world_->size(); }
  int rank() const { return world_->rank(); }
  Communicator& world() const { return *world_; }
  compute::Compute& compute() const { return *compute_; }

  // Each output y = x W^T over x [n, cols] (row stride cols), the weights' rows being the rank's.
  void ColumnParallel(std::span<const MatMulOut> outs, const float* x, int n, int cols);
  // y [n, w.rows] (row stride ldy) = x W^T over x [n, w.cols] (row stride ldx).
  void ColumnParallel(const F32Matrix& w, const float* x, int n, int ldx, float* y, int ldy);

  // out [n, bounds.back()]: columns [bounds[r], bounds[r + 1]) from rank r's `mine` [n, its
  // width] (collective).
  Status GatherColumns(const float* mine, int n, const std::vector<int>& bounds,
                       std::vector<float>& out);

  // in W^T for the rank's columns `mine` [n, its width of in_bounds] of the input, w holding the
  // rank's rows out_bounds of W over all in_bounds.back() columns (collective). Returns
  // [n, out_bounds.back()], valid until the next call.
  Expected<const float*> RowParallel(const QuantMatrix& w, const float* mine, int n,
                                     const std::vector<int>& in_bounds,
                                     const std::vector<int>& out_bounds);

  // The rank's partial sum y [n, w.rows] (row stride ldy) of a row-parallel product: its input
  // columns x [n, w.cols] (row stride ldx) times W's columns that match them.
  void RowParallelPartial(const F32Matrix& w, const float* x, int n, int ldx, float* y, int ldy);
  // sum [n] := the ranks' `sum` added in rank order (collective; an all-gather, then the adds).
  Status ReducePartials(float* sum, std::size_t n);

  // logits [n, vocab] = rows [n, w.cols] times the vocab-parallel head, `w` being the rank's
  // shard of it (collective).
  Status VocabLogits(const QuantMatrix& w, const VocabShard& shard, int vocab, const float* rows,
                     int n, float* logits);
  Status VocabLogits(const F32Matrix& w, const VocabShard& shard, int vocab, const float* rows,
                     int n, float* logits);

 private:
  // The vocab-parallel gather around `product(y, ldy)`, the rank's shard of the logits.
  template <class Product>
  Status GatherVocab(const VocabShard& shard, int vocab, int n, float* logits, Product product);

  Communicator* world_;
  compute::Compute* compute_;
  std::vector<float> send_, gathered_, in_full_, y_, y_full_, shard_logits_, scratch_;
};

}  // namespace ctxpar::model
