// Qwen2 and Qwen3 from GGUF: the Llama block (llama.h) with the HF rotate_half RoPE pairs (the
// converter does not permute their Q/K), plus q/k/v biases (Qwen2) or per-head RMSNorms of q and
// k before RoPE (Qwen3).
#include <memory>
#include <string>
#include <utility>

#include "models/llama.h"
#include "models/registry.h"

namespace ctxpar {

namespace {

constexpr LlamaVariant kQwen2 = {.gguf_name = "qwen2",
                                 .hf_name = "Qwen2ForCausalLM",
                                 .rope_style = model::RopeStyle::kNeox,
                                 .qkv_bias = true};
constexpr LlamaVariant kQwen3 = {.gguf_name = "qwen3",
                                 .hf_name = "Qwen3ForCausalLM",
                                 .rope_style = model::RopeStyle::kNeox,
                                 .qk_norm = true};

}  // namespace

Expected<std::unique_ptr<ModelSource>> OpenQwen2Source(const std::string& path,
                                                       std::shared_ptr<const GgufFile> file) {
  return OpenLlamaFamilySource(path, std::move(file), kQwen2);
}

Expected<std::unique_ptr<ModelSource>> OpenQwen3Source(const std::string& path,
                                                       std::shared_ptr<const GgufFile> file) {
  return OpenLlamaFamilySource(path, std::move(file), kQwen3);
}

}  // namespace ctxpar
