// How a dense transformer's heads, KV heads and MLP features are split over the TP group with
// DCP groups of dcp contiguous ranks inside it (H query heads, Hkv KV heads, h = H / tp heads per
// rank), and the rules a configuration must meet for that split. Shared by the GGUF
// architectures (Llama, Gemma 3).
//
// - Query heads are split evenly (tp divides H). KV heads: with tp <= Hkv each rank holds
//   Hkv / tp of them; with tp a multiple of Hkv each KV head is replicated over tp / Hkv ranks
//   (SGLang and vLLM do the same), and DCP (dcp dividing tp / Hkv) shards the tokens of that one
//   head over the group instead of replicating them.
// - A rank attends for the widened head set of its DCP group (h * dcp heads) over its shard of
//   the KV pool; with replicated Q it projects Q for the whole group.
// - MLP gate / up rows: whole 32-blocks, floor(r * B / tp) (ffn_bounds); o_proj / ffn_down
//   output rows: floor(r * dim / tp) (dim_bounds); tp_linear.h's row-parallel form.
//
// Thread safety: pure functions.
#pragma once

#include <string_view>
#include <vector>

#include "ctxpar/communicator.h"
#include "ctxpar/config.h"
#include "ctxpar/engine_config.h"
#include "ctxpar/status.h"

namespace ctxpar::model {

struct HeadLayout {
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int dim = 0;  // hidden size
  int ffn_dim = 0;
};

// The layout of an architecture's hparams struct (its num_heads, num_kv_heads, head_dim, dim and
// ffn_dim fields).
template <class Hparams>
HeadLayout DenseHeadLayout(const Hparams& hp) {
  return {.num_heads = hp.num_heads,
          .num_kv_heads = hp.num_kv_heads,
          .head_dim = hp.head_dim,
          .dim = hp.dim,
          .ffn_dim = hp.ffn_dim};
}

struct HeadShard {
  int tp_rank = 0;
  int dcp_rank = 0;
  int group = 0;     // DCP group (tp_rank / dcp)
  int heads = 0;     // h: query heads of the rank (o_proj)
  int q_heads = 0;   // heads it projects Q for (h, or h * dcp with replicated Q)
  int q_first = 0;   // first of them
  int kv_heads = 0;  // KV heads of the DCP group (the rank's pool stores its shard of them)
  int kv_first = 0;
  // The KV heads no lower rank holds, [kv_owned_first, kv_owned_first + kv_owned): each KV head
  // has one owner (head_split_norm.h's sums). The rank's own query heads are heads from
  // tp_rank * heads.
  int kv_owned_first = 0;
  int kv_owned = 0;
  std::vector<int> head_bounds;  // tp + 1 columns of the attention output: rank r's heads
  std::vector<int> ffn_bounds;   // tp + 1 MLP features: rank r's gate / up rows
  std::vector<int> dim_bounds;   // tp + 1 hidden features: rank r's o_proj / ffn_down rows
};
HeadShard MakeHeadShard(const HeadLayout& l, const EngineConfig& config, int tp_rank);

// KV heads one rank of a GQA model stores (those its DCP group's query heads read; with
// tp > Hkv they all read one).
int GqaKvHeadsPerRank(int num_heads, int num_kv_heads, int tp, int dcp);
// The GQA layout rules, whatever the kernels: heads and KV heads against tp
// (CTXPAR-MODEL-002/003), dcp against the KV-head replicas (CTXPAR-MODEL-004).
Status CheckGqaLayout(int num_heads, int num_kv_heads, int tp, int dcp);

// CheckGqaLayout, then shapes the block-sharded kernels cannot cut (CTXPAR-MODEL-006, naming
// `architecture`).
Status CheckHeadLayout(const HeadLayout& l, std::string_view architecture, int tp, int dcp);

// A dense model factory's checks, then the rank's shard: `world` has config.tp_size ranks
// (InvalidArgument), CheckHeadLayout.
Expected<HeadShard> DenseModelShard(const HeadLayout& l, std::string_view architecture,
                                    const EngineConfig& config, const Communicator& world);

// The flags a dense model cannot honour (expert parallelism, the MoE backends, prefill CP,
// DP attention): CTXPAR-MODEL-005 naming the flag and `architecture`. With `routed_experts` (a
// GGUF MoE model, layers/routed_moe.h, whose experts sit whole on the TP ranks) --ep-size may be
// 1 or tp_size (CTXPAR-MODEL-012 otherwise).
Status CheckDenseFlags(const ResolvingView& cfg, std::string_view architecture,
                       bool routed_experts = false);

}  // namespace ctxpar::model
