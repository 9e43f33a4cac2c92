// The DeepSeek-V3 architecture from a HF checkpoint (not public API: the engine reaches it
// through model.h's ModelSource, which OpenModelSource returns for a directory with config.json).
// docs/deepseek.md describes the network, the shapes and every collective with its bytes.
//
// Layout over the tp ranks of the TP group (H query heads, h = H / tp per rank):
// - Replicated on every rank: the embedding (read from the mapping), q_a_proj, kv_a_proj_with_mqa,
//   the norms, the router. Every rank computes the latent KV [kv_lora_rank + qk_rope_head_dim]
//   of the tokens it needs; the KV pool stores that latent (one KV head, V = its first
//   kv_lora_rank elements), sharded over the DCP group by KvLayout: without DCP every rank holds
//   the whole latent cache, with dcp = tp one tp-th of it.
// - Decode rows (a sequence's single new token at pos0 > 0): the absorbed form. Q for the rank's
//   heads (or, with --dcp-replicate-q-proj, the DCP group's: q_b_proj and W_kc replicated over
//   the group), q_nope times W_kc, attention over [latent | rope] through DcpAttention with the
//   configured combine, then the latent output through W_vc of the rank's own heads.
// - Prefill rows (a sequence with pos0 == 0 or several new tokens): the decompressed form.
//   kv_b_proj expands the latent of every position [0, pos0 + n) into K_nope and V of the rank's
//   heads (positions before pos0 are gathered from the DCP group's pool shards), and causal
//   attention runs over [K_nope | k_pe]. With prefill CP the tp ranks form attn_cp_size CP ranks
//   of attn_tp = tp / attn_cp_size ranks; a sequence's new tokens are split over the CP ranks
//   (interleave: token i to CP rank i % cp; zigzag: 2cp blocks, CP rank r takes blocks r and
//   2cp-1-r); a rank computes the latent and Q of its tokens for the H / attn_tp heads of its
//   attention-TP rank, the latents are all-gathered over the CP group into position order, and
//   each token attends causally by its global position.
// - o_proj is row-parallel: each rank multiplies the heads it attended for; the partial sums are
//   all-gathered and added in rank order (a deterministic all-reduce).
// - MLPs: the dense layers' gate/up/down are sharded over tp (replicated with
//   --moe-dense-tp-size 1). MoE layers: the ep_size EP groups of tp / ep_size ranks each hold
//   n_routed_experts / ep_size experts, each expert's intermediate split over the group.
//   --moe-a2a-backend none: every rank runs its experts (and its tp-th of the shared expert) for
//   every token, then the deterministic all-reduce. deepep (ep_size = tp_size): each rank routes
//   its share of the tokens, dispatches each token once to every rank owning one of its top-k
//   experts (an all-to-all-v), the owners run them and send the weighted sums back (the
//   combine), the home rank adds the shared expert (replicated), and an all-gather gives every
//   rank every token.
// - lm_head is vocab-sharded and all-gathered. The linears, the ordered all-reduce and the head
//   are the shared layer's (layers/tp_linear.h, layers/vocab_head.h). Numerics: bf16/f16/f32
//   weights widened (a GGUF's dequantized) to fp32 at load, the fixed-order fp32 matmul
//   (matmul_f32.h), fp32 KV.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ctxpar/communicator.h"
#include "ctxpar/config.h"
#include "ctxpar/engine_config.h"
#include "ctxpar/model.h"
#include "ctxpar/safetensors.h"
#include "ctxpar/status.h"
#include "ctxpar/tokenizer.h"
#include "models/deepseek_config.h"

namespace ctxpar {

namespace compute {
class Compute;  // compute/compute.h
}  // namespace compute

// One rank's share of the network for a configuration.
struct DeepseekShard {
  int tp_size = 1;
  int tp_rank = 0;
  // Decode attention.
  int dcp_size = 1;
  int dcp_rank = 0;
  int heads = 0;  // h: the rank's own heads (W_vc, o_proj, the combine's output)
  int head_first = 0;
  int q_heads = 0;  // heads it projects decode Q for (h, or h * dcp with replicated Q)
  int q_first = 0;
  // Prefill attention.
  int cp_size = 1;  // attn_cp_size with --enable-prefill-cp, else 1
  int cp_rank = 0;
  int attn_tp = 1;  // tp / cp_size
  int attn_tp_rank = 0;
  int prefill_heads = 0;
  int prefill_first = 0;
  CpStrategy cp_strategy = CpStrategy::kNone;
  // The heads whose q_b_proj, kv_b_proj and o_proj weights the rank holds: all of the above.
  int span_first = 0;
  int span_heads = 0;
  // MLPs: the rank's slice [first, first + count) of each intermediate dimension.
  int dense_first = 0;
  int dense_count = 0;
  bool dense_replicated = false;
  int shared_first = 0;
  int shared_count = 0;
  bool deepep = false;
  int ep_size = 1;
  int expert_first = 0;  // the routed experts of the rank's EP group
  int expert_count = 0;
  int moe_first = 0;  // its slice of each of them
  int moe_count = 0;
};

DeepseekShard MakeDeepseekShard(const DeepseekV3Config& c, const EngineConfig& config, int tp_rank);

// Where a DeepSeek model reads its weights: by their HF names ("model.layers.3.mlp.gate.weight")
// and HF shapes (row-major), whatever the file holds them as. A HF checkpoint's safetensors
// are read in place and widened to fp32; a GGUF (deepseek2) maps each name to its tensors and
// dequantizes them (deepseek_gguf_source.cpp).
class DeepseekWeights {
 public:
  virtual ~DeepseekWeights() = default;
  // The file or directory, for messages.
  virtual const std::string& path() const = 0;
  // The shape of weight `name`; an error when the file has no such weight.
  virtual Expected<std::vector<int64_t>> Shape(const std::string& name) const = 0;
  // Elements [first, first + count) of `name`, row-major, as fp32.
  virtual Status Read(const std::string& name, int64_t first, int64_t count, float* out) const = 0;
  // The error for weight `name`, which the network reads with shape `want`: the file has it
  // with shape `*have`, or not at all (null), in the file's own terms and catalog ID.
  virtual Status ShapeError(const std::string& name, const std::vector<int64_t>* have,
                            const std::vector<int64_t>& want) const = 0;
};

// The weights of a HF checkpoint's safetensors.
std::shared_ptr<const DeepseekWeights> SafetensorsDeepseekWeights(
    std::shared_ptr<const SafetensorsCheckpoint> ckpt);

// Every weight the network reads, by HF name, with its shape: the checkpoint's files must hold
// exactly these (CheckDeepseekTensors).
struct DeepseekTensor {
  std::string name;
  std::vector<int64_t> shape;
};
std::vector<DeepseekTensor> DeepseekTensors(const DeepseekV3Config& c);
// Each of DeepseekTensors(c) exists with its shape, else the weights' ShapeError for the first
// that does not: the checkpoint is refused when it is opened, before any compute.
Status CheckDeepseekTensors(const DeepseekWeights& w, const DeepseekV3Config& c);

// The ModelSource of a DeepSeek checkpoint whose weights and configuration are read and checked:
// `tokenizer` where the file has one (GGUF), else token ids in and out.
std::unique_ptr<ModelSource> NewDeepseekSource(std::string path,
                                               std::shared_ptr<const DeepseekWeights> weights,
                                               DeepseekV3Config c,
                                               std::optional<Tokenizer> tokenizer);

// The model's rules for a launch (ModelInfo::hook, source kDeepseekHook): with deepep the EP
// size is the TP size (declared, as SGLang does), --attn-cp-size needs prefill CP
// (CTXPAR-DSV3-004), then CheckDeepseekLayout.
inline constexpr std::string_view kDeepseekHook = "deepseek_v3_layout_rules";
Status ApplyDeepseekRules(const DeepseekV3Config& c, Resolution& resolution);

// The latent and the rope part of every token in `dtype`, whatever the layout: DCP alone
// shards it (one KV head, V the first kv_lora_rank elements of K).
KvSpec DeepseekKvSpec(const DeepseekV3Config& c, DataType dtype);

struct DeepseekLayoutArgs {
  int tp = 1;
  int ep = 1;
  std::optional<int> dense_tp;  // --moe-dense-tp-size
  bool deepep = false;
  bool moe_flags = false;  // --ep-size or --moe-a2a-backend given a value other than the default
};
// Heads against tp (CTXPAR-MODEL-002), MoE flags without MoE layers (CTXPAR-MODEL-005), ep
// against tp and the experts (CTXPAR-DSV3-002/001), --moe-dense-tp-size (CTXPAR-DSV3-003),
// intermediate sizes the shards cannot split (CTXPAR-MODEL-006), deepep with ep != tp.
Status CheckDeepseekLayout(const DeepseekV3Config& c, const DeepseekLayoutArgs& args);

// Collective over `world` (tp_size ranks).
Expected<std::unique_ptr<Model>> CreateDeepseekModel(std::shared_ptr<const DeepseekWeights> weights,
                                                     const DeepseekV3Config& c, ModelDesc desc,
                                                     const EngineConfig& config,
                                                     Communicator& world,
                                                     compute::Compute& compute);

// A DeepSeek model's own communicators, the DCP group and the prefill-CP group split from the TP
// group, whose counters tests and benchmarks read. `model` must come from CreateDeepseekModel.
struct DeepseekGroups {
  Communicator* dcp = nullptr;
  Communicator* cp = nullptr;
};
DeepseekGroups GroupsOf(Model& model);

namespace model {

// Rows [first, first + count) of a 2-D weight [rows, cols] (checked against `name`), as fp32,
// row-major.
Expected<std::vector<float>> LoadRows(const DeepseekWeights& w, const std::string& name,
                                      int64_t rows, int64_t cols, int64_t first, int64_t count);
// Columns [first, first + count) of every row of a 2-D weight [rows, cols]: [rows, count].
Expected<std::vector<float>> LoadCols(const DeepseekWeights& w, const std::string& name,
                                      int64_t rows, int64_t cols, int64_t first, int64_t count);
// A 1-D weight of `size` elements.
Expected<std::vector<float>> LoadVector(const DeepseekWeights& w, const std::string& name,
                                        int64_t size);

// out [rows.size(), dim] := the rows of src [.., dim] that `rows` lists, in that order.
void GatherRows(const float* src, int dim, const std::vector<int32_t>& rows,
                std::vector<float>& out);

}  // namespace model
}  // namespace ctxpar
