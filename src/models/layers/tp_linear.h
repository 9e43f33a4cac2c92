// Tensor-parallel linear layers over the TP group, shared by the quantized-weight architectures
// (SGLang's ColumnParallelLinear / RowParallelLinear, in the form that keeps tp invariance).
//
// - Column-parallel: the rank holds some output rows of W (its heads, its MLP features) and
//   multiplies the whole activation row by them; no collective.
// - Row-parallel (o_proj, ffn_down): the ranks hold columns of the input (their heads, their
//   features). Instead of multiplying partial columns and all-reducing partial sums (whose
//   rounding depends on tp), the input is all-gathered, each rank computes its output rows
//   (`out_bounds`) over the whole input row, and the rows are all-gathered. Every output is then
//   one dot product over the whole row in the kernels' fixed order, so a run at (tp, dcp = 1)
//   equals the tp = 1 run bit for bit, with either activation format.
// - Vocab-parallel head: rank r holds vocab rows [r * shard, ...) (vocab.h), the logits shards
//   are all-gathered.
//
// Shapes are row-major fp32; bounds are tp + 1 column (or row) offsets, rank r's range being
// [bounds[r], bounds[r + 1]). Thread safety: one rank's thread; the collectives are over the
// TP communicator.
#pragma once

#include <span>
#include <vector>

#include "ctxpar/communicator.h"
#include "ctxpar/status.h"
#include "ctxpar/thread_pool.h"
#include "models/layers/vocab.h"
#include "models/linear.h"

namespace ctxpar::model {

class TpLinear {
 public:
  // `world` is the TP group (not owned); `pool` may be null.
  TpLinear(Communicator* world, ThreadPool* pool, ActFormat format)
      : world_(world), pool_(pool), format_(format) {}

  int size() const { return world_->size(); }
  int rank() const { return world_->rank(); }
  Communicator& world() const { return *world_; }
  ActFormat format() const { return format_; }

  // Each output y = x W^T over x [n, cols] (row stride cols), the weights' rows being the rank's.
  void ColumnParallel(std::span<const MatMulOut> outs, const float* x, int n, int cols);

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

  // logits [n, vocab] = rows [n, w.cols] times the vocab-parallel head, `w` being the rank's
  // shard of it (collective).
  Status VocabLogits(const QuantMatrix& w, const VocabShard& shard, int vocab, const float* rows,
                     int n, float* logits);

 private:
  Communicator* world_;
  ThreadPool* pool_;
  ActFormat format_;
  Acts acts_;
  std::vector<float> send_, gathered_, in_full_, y_, y_full_, shard_logits_, scratch_;
};

// A row-parallel layer with partial sums (fp32 weights sharded by input columns): sum := partial
// summed over the ranks of `comm` in rank order (an all-gather, then the adds), so that the
// result does not depend on the MPI library's reduction order. n floats; `sum` may alias
// `partial`.
Status OrderedAllReduce(Communicator& comm, const float* partial, std::size_t n, float* sum,
                        std::vector<float>& scratch);

}  // namespace ctxpar::model
