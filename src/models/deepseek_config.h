// The DeepSeek-V3 network's configuration (not public API): a HF transformers config.json of the
// DeepSeek-V3 architecture (DeepseekV3ForCausalLM, and
// DeepseekV4ForCausalLM, which ctxpar runs as the same network; see docs/deepseek.md).
//
// The reader takes what the network uses and refuses, by key and value, what ctxpar does not run
// or what contradicts itself:
// - CTXPAR-HF-001: not a JSON object, a key missing or of the wrong type (the key named).
// - CTXPAR-HF-002: an architecture other than the two above.
// - CTXPAR-HF-003: a value ctxpar does not support: q_lora_rank null (no q LoRA), rope_interleave
//   false, a rope_scaling / rope_parameters type other than "default" and "yarn", scoring_func
//   other than sigmoid, topk_method other than noaux_tc, hidden_act other than silu, attention_bias
//   true, moe_layer_freq other than 1, a quantization_config, a dtype other than bfloat16, float16
//   and float32, or MLA widths the attention kernels do not take (multiples of 16, at most 1024).
// - CTXPAR-HF-004: inconsistent values: a size below 1, an odd qk_rope_head_dim, n_group not
//   dividing n_routed_experts, topk_group above n_group, num_experts_per_tok above the experts of
//   topk_group groups, first_k_dense_replace above num_hidden_layers, a head_dim or qk_head_dim
//   that disagrees with the MLA widths.
// Keys the network does not depend on (transformers_version, use_cache, ...) are ignored.
// Transformers 5 writes RoPE as rope_parameters {rope_type, rope_theta}; older files write
// rope_theta and rope_scaling {type | rope_type}: both are read.
//
// Thread safety: values and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "ctxpar/dtype.h"
#include "ctxpar/status.h"

namespace ctxpar {

struct DeepseekV3Config {
  std::string architecture;  // "DeepseekV3ForCausalLM" or "DeepseekV4ForCausalLM"
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;      // the dense layers' MLP
  int moe_intermediate_size = 0;  // one routed or shared expert's MLP
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;  // HF keeps it; MLA stores one latent head whatever it says
  int max_position_embeddings = 0;
  // MLA
  int q_lora_rank = 0;
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
  double rope_theta = 10000.0;
  // YaRN (rope_type "yarn", DeepSeek-V3's factor 40 over 4096 positions), as transformers reads
  // it; absent: the default RoPE.
  struct Yarn {
    double factor = 1.0;
    int original_max_position_embeddings = 0;
    double beta_fast = 32.0;
    double beta_slow = 1.0;
    double mscale = 0.0;  // 0: not given
    double mscale_all_dim = 0.0;
    std::optional<double> attention_factor;  // absent: from the mscales
    bool truncate = true;
  };
  std::optional<Yarn> yarn;
  double rms_norm_eps = 1e-6;
  // MoE: layers [first_k_dense_replace, num_hidden_layers) route to experts.
  int n_routed_experts = 0;
  int num_experts_per_tok = 0;
  int n_shared_experts = 0;
  int n_group = 1;
  int topk_group = 1;
  int first_k_dense_replace = 0;
  double routed_scaling_factor = 1.0;
  bool norm_topk_prob = false;
  // DeepSeek-V2's router (from GGUF, expert_gating_func 1 or absent): softmax scores, no
  // correction bias, each group scored by its best expert (transformers' group_limited_greedy);
  // false: V3's sigmoid scores plus e_score_correction_bias, groups scored by their top two.
  bool softmax_router = false;
  bool tie_word_embeddings = false;
  std::vector<int32_t> eos_token_ids;
  // The dtype the checkpoint's model runs in ("dtype", or "torch_dtype" before transformers 5:
  // bfloat16, float16, float32; absent: float32). transformers rounds its RoPE frequencies to it.
  DataType dtype = DataType::kF32;

  int qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  bool is_moe_layer(int layer) const { return layer >= first_k_dense_replace; }
};

// A rule that a DeepSeek configuration's values break, whatever file stated them: the
// config.json key of the value, the value, the rule (a clause: "it must be at most n_group (8)");
// `unsupported`: a value ctxpar does not run (CTXPAR-HF-003) rather than a contradiction
// (CTXPAR-HF-004). The GGUF reader names the key as its file does.
struct DeepseekConfigFault {
  std::string key;
  std::variant<int64_t, double> value;
  std::string rule;
  bool unsupported = false;
};
// The first of the rules between c's sizes the kernels and the router need: an even rope width,
// MLA widths the attention kernels take (CTXPAR-HF-003), n_group dividing the experts into groups
// of at least 2, topk_group at most n_group, num_experts_per_tok within topk_group groups,
// first_k_dense_replace at most the layers, a positive routed_scaling_factor and rms_norm_eps.
std::optional<DeepseekConfigFault> FindDeepseekConfigFault(const DeepseekV3Config& c);

// `origin` names the text in messages (the file's path).
Expected<DeepseekV3Config> ParseDeepseekV3Config(std::string_view json_text,
                                                 const std::string& origin);
// Reads DIR/config.json; NotFound when it does not exist.
Expected<DeepseekV3Config> ReadDeepseekV3Config(const std::string& dir);

}  // namespace ctxpar
