// Qwen2, Qwen3 and Qwen3-MoE from GGUF: the Llama block (llama.h) with the HF rotate_half RoPE
// pairs (the converter does not permute their Q/K), plus q/k/v biases (Qwen2) or per-head
// RMSNorms of q and k before RoPE (Qwen3), and routed experts in place of the MLP (Qwen3-MoE,
// layers/routed_moe.h).
#include <memory>
#include <string>
#include <utility>

#include "models/llama.h"
#include "models/registry.h"

namespace ctxpar {

namespace {

constexpr LlamaVariant kQwen2 = {.gguf_name = "qwen2",
                                 .hf_name = "Qwen2ForCausalLM",
                                 .rope_style = compute::RopeStyle::kNeox,
                                 .qkv_bias = true};
constexpr LlamaVariant kQwen3 = {.gguf_name = "qwen3",
                                 .hf_name = "Qwen3ForCausalLM",
                                 .rope_style = compute::RopeStyle::kNeox,
                                 .qk_norm = true};

constexpr LlamaVariant kQwen3Moe = {.gguf_name = "qwen3moe",
                                    .hf_name = "Qwen3MoeForCausalLM",
                                    .rope_style = compute::RopeStyle::kNeox,
                                    .qk_norm = true,
                                    .moe = true};

}  // namespace

Expected<std::unique_ptr<ModelSource>> OpenQwen2Source(const std::string& path,
                                                       std::shared_ptr<const GgufFile> file) {
  return OpenLlamaFamilySource(path, std::move(file), kQwen2);
}

Expected<std::unique_ptr<ModelSource>> OpenQwen3Source(const std::string& path,
                                                       std::shared_ptr<const GgufFile> file) {
  return OpenLlamaFamilySource(path, std::move(file), kQwen3);
}

Expected<std::unique_ptr<ModelSource>> OpenQwen3MoeSource(const std::string& path,
                                                          std::shared_ptr<const GgufFile> file) {
  return OpenLlamaFamilySource(path, std::move(file), kQwen3Moe);
}

}  // namespace ctxpar
