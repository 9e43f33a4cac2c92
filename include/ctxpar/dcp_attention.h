// DcpAttention: the decode-context-parallel attention operator a model layer calls (docs/dcp.md).
//
// Each rank of a DCP group of N ranks holds the KV shard kv_layout.h assigns it (a KvCache) and
// computes attention for the widened head set of its group, h*N query heads, over that shard
// (PartialAttentionCpu); the combine (combine.h) then gives every rank the exact output for its
// own h heads, heads [dcp_rank*h, (dcp_rank+1)*h) of the group.
//
// Heads. H = num_heads of the layer, tp = tp_size, h = H / tp heads per rank, N = dcp_size.
// The KV heads in `kv` are those of the widened head set (GQA: query head g of the group reads KV
// head g / (h*N / num_kv_heads); absorbed MLA: one KV head).
//
// Q path. replicate_q = false: q is [rows, h, head_dim_qk] for the rank's own heads and is
// all-gathered over the group. replicate_q = true: q is [rows, h*N, head_dim_qk] (every rank
// computed the whole group's Q) and nothing is gathered.
//
// A call (every rank of the group calls Forward with the same rows):
//   auto attn = DcpAttention::Create({.dcp_size = 3, .backend = CombineBackend::kA2a,
//                                     .num_heads = 9, .tp_size = 3, .head_dim_qk = 64,
//                                     .head_dim_v = 64, .scale = 0.125f}, dcp_comm);
//   // decode: one row per sequence, seeing the whole local shard
//   row_seq[i] = seq_i;  row_kv_len[i] = cache.local_length(seq_i);
//   // causal prefill: one row per token at global position t, seeing positions <= t
//   row_seq[i] = seq;    row_kv_len[i] = cache.VisibleRows(t_i);
//   CTXPAR_RETURN_IF_ERROR((*attn)->Forward(q, cache.View(), row_seq, row_kv_len, rows, o));
//   // a sliding window: row i sees local rows [row_kv_start[i], row_kv_len[i]) (KvLayout::
//   // WindowLocalRows); a rank may see none of them (its partial is then O = 0, lse = -inf)
//   (*attn)->Forward(q, kv, row_seq, row_kv_len, rows, o, nullptr, row_kv_start);
// o is [rows, h, head_dim_v] fp32; lse (optional) [rows, h], natural log.
// With dcp_size == 1 Forward is plain attention over the whole cache with no communication.
//
// Thread safety: one DcpAttention per rank thread; Forward reuses internal scratch buffers.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ctxpar/attention.h"
#include "ctxpar/combine.h"
#include "ctxpar/communicator.h"
#include "ctxpar/dcp_rules.h"
#include "ctxpar/status.h"

namespace ctxpar {

namespace compute {
class Compute;  // the compute seam (docs/compute.md)
}  // namespace compute

struct DcpOptions {
  int dcp_size = 1;
  CombineBackend backend = CombineBackend::kAgRs;
  bool replicate_q = false;
  int interleave_size = 1;
  int num_heads = 0;  // H: query heads of the layer
  int tp_size = 0;    // 0: the DCP group is the whole attention TP group (tp_size = dcp_size)
  int head_dim_qk = 0;
  int head_dim_v = 0;
  float scale = 0.0f;                // softmax scale, > 0 (e.g. 1/sqrt(head_dim))
  float softcap = 0.0f;              // attention logit softcapping (attention.h); 0: none
  DataType o_wire = DataType::kF32;  // O element type on the a2a / shm_a2a wire
  int num_threads = 0;               // attention threads; <= 0: all hardware threads
  ThreadPool* pool = nullptr;        // not owned; when set, the attention runs on it (attention.h)
  // Not owned: runs the partial attention (its pool is then the compute's and the merge runs on
  // its host_threads); null: PartialAttentionCpu on `pool`.
  compute::Compute* compute = nullptr;
  // Keys per split-KV chunk (attention.h); > 0 makes each row's result independent of the other
  // rows of a call (what the engine's batch invariance needs); 0: chosen from the sizes.
  int split_kv_keys = 0;
  // The exact merge (merge.h): each rank keeps its chunks' states unmerged, the group agrees on
  // each (row, head)'s largest lse and |O| (a max all-reduce), and fixed-point sums of the
  // chunks are added over the group (a float64 all-reduce, exact in any order). With chunks that
  // are the same keys on every layout (split_kv_keys > 0 dividing interleave_size, or dcp_size
  // 1), O and lse are then the same bits for every dcp_size, backend and replicate_q. The
  // backend is not used.
  bool exact = false;
};

class DcpAttention {
 public:
  // Checks dcp_rules.h's CheckDcpRules (fi_a2a is CTXPAR-DCP-003: this operator runs on the
  // CPU), CTXPAR-LAYOUT-003 (num_heads % dcp_size), CTXPAR-LAYOUT-001 (tp_size % dcp_size), then
  // num_heads % tp_size, the communicator's size, the head dims, scale, softcap and
  // interleave_size.
  // `dcp_comm` (not owned) is the DCP group, of dcp_size ranks; it must outlive the operator.
  static Expected<std::unique_ptr<DcpAttention>> Create(const DcpOptions& options,
                                                        Communicator* dcp_comm);

  Status Forward(const float* q, const PagedKv& kv, const int32_t* row_seq,
                 const int32_t* row_kv_len, int rows, float* o, float* lse = nullptr,
                 const int32_t* row_kv_start = nullptr);

  int heads_per_rank() const { return h_; }
  int group_heads() const { return h_ * options_.dcp_size; }
  const DcpOptions& options() const { return options_; }

 private:
  DcpAttention(const DcpOptions& options, Communicator* comm, int h,
               std::unique_ptr<Combiner> combiner)
      : options_(options), comm_(comm), h_(h), combiner_(std::move(combiner)) {}

  DcpOptions options_;
  Communicator* comm_;
  int h_;
  std::unique_ptr<Combiner> combiner_;
  // The partial attention, on options_.compute where one is set.
  Status Partial(const PartialAttentionParams& p);
  // The exact merge of the chunks in chunks_ into o and lse (the rank's heads).
  Status MergeExact(int rows, float* o, float* lse);

  std::vector<float> q_gathered_, q_group_, o_partial_, lse_partial_;
  ChunkStates chunks_;
  std::vector<float> refs_;
  std::vector<double> sums_;
};

}  // namespace ctxpar
