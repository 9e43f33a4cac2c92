// One layer's attention over a Batch (batch.h): every row attends causally to its own sequence's
// KV slot in the pool, through DcpAttention (the rank's partial attention over its shard, then
// the DCP combine). Shared by the model architectures.
//
// Shapes (fp32, row-major): q [T, q_heads, head_dim_qk] for the batch's T tokens in batch order
// (q_heads = the rank's heads, or its DCP group's with replicated Q; dcp_attention.h); o [T, h,
// head_dim_v]. Row t of sequence s is the token at position s.pos0 + t and sees the positions
// <= s.pos0 + t of slot s.slot, which must already hold them (KvPool::Write before Run).
//
// Windows: the layer's group in the pool (KvSpec::groups, kv_pool.h) sets what a row sees. In a
// window group of W, the row at position t sees only the positions t - W < p <= t
// (KvPool::VisibleRange); so a model passes the layer index and nothing else, and the window its
// pool retains is the window its attention applies. A model with a window on every layer keeps
// them all in the full group 0 (the pool needs one) and passes its window to Run.
//
// Thread safety: used by the rank's thread only; Run is collective over the DCP group.
#pragma once

#include <memory>
#include <vector>

#include "compute/compute.h"
#include "ctxpar/batch.h"
#include "ctxpar/dcp_attention.h"
#include "ctxpar/engine_config.h"
#include "ctxpar/kv_pool.h"
#include "ctxpar/status.h"

namespace ctxpar::model {

// Keys per split-KV chunk of every attention the models run: fixed, so that a row's partial
// states and their merge order depend on its own KV length only, never on the other rows of
// the batch (batch invariance), in the decode and the prefill form alike.
inline constexpr int kSplitKvKeys = 256;

// The engine's part of a layer's DcpOptions: the launch configuration's DCP flags, tp_size
// attention ranks, the rank's compute seam and kSplitKvKeys. The model adds its shape (num_heads,
// the head dims, scale).
DcpOptions EngineDcpOptions(const EngineConfig& config, int tp_size, compute::Compute& compute);

class BatchAttention {
 public:
  // `dcp` (not owned) is the DCP group, of options.dcp_size ranks.
  static Expected<std::unique_ptr<BatchAttention>> Create(const DcpOptions& options,
                                                          Communicator* dcp);
  // window > 0: the layer's own window where its group retains every position (KvPool::
  // VisibleRange). lse (optional): [T, h], each row's merged log-sum-exp (natural log).
  Status Run(const Batch& batch, const KvPool& pool, int layer, const float* q, float* o,
             int window = 0, float* lse = nullptr);
  const DcpAttention& attention() const { return *attention_; }

 private:
  explicit BatchAttention(std::unique_ptr<DcpAttention> attention)
      : attention_(std::move(attention)) {}

  std::unique_ptr<DcpAttention> attention_;
  std::vector<int32_t> row_seq_, row_start_, row_len_;
};

}  // namespace ctxpar::model
