// The Llama family from GGUF (not public API: the engine reaches it through model.h's
// ModelSource, which OpenModelSource returns for a GGUF file): the architectures whose block is
// Llama's, pre-norm grouped-query attention and a SwiGLU MLP, each stating what its block adds
// in a LlamaVariant (llama; qwen2: q/k/v biases; qwen3: per-head q/k norms; phi3: fused q/k/v
// and gate/up matrices; mistral3: an attention temperature; any of them a window on every layer;
// olmo2 and gpt-oss bring their own block, olmo2.cpp and gpt_oss.cpp):
//   h = x + o(attn(rope(norm_qk(q(n(x)) + bq)), rope(norm_qk(k(n(x)) + bk)), v(n(x)) + bv))
//   x = h + down(silu(gate(n(h))) * up(n(h)))
//
// Layout: layers/attention_shard.h (heads, KV heads, MLP features over tp and dcp) and
// layers/tp_linear.h (column-parallel q/k/v and gate/up; o_proj and ffn_down row-parallel as
// all-gather + output-row shards, so a (tp, dcp = 1) run equals the tp = 1 run bit for bit;
// vocab-parallel lm_head). Numerics: quantized weights times fp32 activations (or int8 ones with
// quantize_activations), RMSNorm and RoPE in ggml's normal mode as llama.cpp runs the llama
// architecture, fp32 KV.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ctxpar/communicator.h"
#include "ctxpar/engine_config.h"
#include "ctxpar/gguf.h"
#include "ctxpar/model.h"
#include "ctxpar/status.h"
#include "models/layers/attention_shard.h"
#include "models/layers/compute_types.h"

namespace ctxpar {

namespace compute {
class Compute;  // compute/compute.h
}  // namespace compute
struct LlamaHparams;

// A variant whose block is not Llama's (its own model file): the checks of the file's tensors
// that its loading makes, and its factory.
using LlamaTensorCheck = Status (*)(const GgufFile& file, const LlamaHparams& hp);
using LlamaModelFactory = Expected<std::unique_ptr<Model>> (*)(
    std::shared_ptr<const GgufFile> file, const LlamaHparams& hp, ModelDesc desc,
    const EngineConfig& config, Communicator& world, compute::Compute& compute);

// What an architecture of the family adds to the Llama block, or the block that replaces it.
struct LlamaVariant {
  std::string_view gguf_name;  // general.architecture
  std::string_view hf_name;    // ModelDesc::architecture
  // kNormal: llama.cpp's converter permuted the llama Q/K rows to adjacent pairs; kNeox: the
  // HF rotate_half pairs (Qwen).
  compute::RopeStyle rope_style = compute::RopeStyle::kNormal;
  bool qkv_bias = false;  // attn_q.bias, attn_k.bias, attn_v.bias (Qwen2)
  bool qk_norm = false;   // attn_q_norm, attn_k_norm over each head (Qwen3)
  // attn_qkv holds the q, k, v rows and ffn_up the gate then up rows (Phi-3).
  bool fused = false;
  // Routed experts instead of the MLP (layers/routed_moe.h): ffn_gate_inp and ffn_*_exps, the
  // expert_count, expert_used_count and expert_feed_forward_length keys (Qwen3-MoE).
  bool moe = false;
  // Llama 4's attention temperature (attention.temperature_scale) and YaRN's
  // rope.scaling.yarn_log_multiplier (Mistral 3).
  bool attn_temperature = false;
  // attention.sliding_window binds the even layers only, the odd ones are global (gpt-oss;
  // llama.cpp's swa pattern 2), kept in the pool's window group (WindowKvGroups); else every
  // layer.
  bool alternating_window = false;
  // YaRN's correction range kept exact, not rounded out to whole dims (RopeScaling::truncate):
  // every gpt-oss config states "truncate": false, which the GGUF does not carry.
  bool yarn_exact_range = false;
  // Null: the Llama block (CheckLlamaTensors, CreateLlamaModel).
  LlamaTensorCheck check_tensors = nullptr;
  LlamaModelFactory create = nullptr;
};
inline constexpr LlamaVariant kLlamaVariant = {"llama", "LlamaForCausalLM"};

struct LlamaHparams {
  std::string architecture;  // general.architecture ("llama")
  LlamaVariant variant = kLlamaVariant;
  int vocab_size = 0;
  int dim = 0;  // embedding_length
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;  // attention.key_length, else dim / num_heads
  int ffn_dim = 0;
  int rope_dims = 0;
  float rope_base = 10000.0f;
  // RoPE scaling (elementwise.h's RopeScaling): Llama 3's rope_freqs.weight or Phi-3's LongRoPE
  // tables, 1 / rope.scaling.factor of a linear or YaRN file, YaRN's mix, attn_factor.
  compute::RopeScaling rope_scaling;
  float rms_eps = 1e-5f;
  int context_length = 0;
  // attention.sliding_window: every layer (or the even ones, variant.alternating_window) sees the
  // positions (t - window, t]; 0: all of them.
  int window = 0;
  // variant.attn_temperature: q scaled by 1 + beta * log(1 + floor(pos / floor)) after RoPE, with
  // floor the original context (gqa_attention.h); beta 0: none.
  float temperature_beta = 0.0f;
  int temperature_floor = 0;
  bool tied_embeddings = false;  // no output.weight: lm_head is token_embd
  int experts = 0;               // variant.moe: expert_count, else 0
  int experts_used = 0;
  int expert_ffn = 0;
  // The layers in the pool's window group (gguf_dense_source.h's WindowKvGroups): none unless the
  // variant alternates, where the model passes no window of its own.
  bool IsWindowLayer(int l) const { return variant.alternating_window && window > 0 && l % 2 == 0; }
};

// Reads `<arch>.*` metadata (and rope_freqs.weight), naming the key of anything missing or out of
// range; `variant` is the architecture's.
Expected<LlamaHparams> ReadLlamaHparams(const GgufFile& file,
                                        const LlamaVariant& variant = kLlamaVariant);

// The checks of the file's tensors that the forward's loading makes (names, shapes, types with a
// kernel: layers/gguf_weights.h), run when the source opens so that `ctxpar check` refuses what
// generate would; CTXPAR-MODEL-011 naming the first tensor at fault.
Status CheckLlamaTensors(const GgufFile& file, const LlamaHparams& hp);

// The registry's opener (registry.h's GgufOpener) of an architecture of the family.
Expected<std::unique_ptr<ModelSource>> OpenLlamaFamilySource(const std::string& path,
                                                             std::shared_ptr<const GgufFile> file,
                                                             const LlamaVariant& variant);

// Collective over `world` (tp_size ranks). config.llama_cpp_numerics quantizes activations to
// int8 per 32-block before each matmul, as llama.cpp's CPU backend does; off, fp32 activations,
// whose rounding differences do not grow, keep greedy output identical across DCP sizes and
// backends.
Expected<std::unique_ptr<Model>> CreateLlamaModel(std::shared_ptr<const GgufFile> file,
                                                  const LlamaHparams& hp, ModelDesc desc,
                                                  const EngineConfig& config, Communicator& world,
                                                  compute::Compute& compute);

}  // namespace ctxpar
