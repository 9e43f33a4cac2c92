// Phi-3 from GGUF: the Llama block (llama.h) with the HF rotate_half RoPE pairs and its fused
// matrices (attn_qkv: q, k, v rows; ffn_up: gate then up rows), which the layer's GgufDenseBlock
// cuts into the same row ranges as separate ones. LongRoPE files (rope_factors_long / short) run
// with the family's RoPE scaling, and a window the file states on every layer.
#include <memory>
#include <string>
#include <utility>

#include "models/llama.h"
#include "models/registry.h"

namespace ctxpar {

namespace {

constexpr LlamaVariant kPhi3 = {.gguf_name = "phi3",
                                .hf_name = "Phi3ForCausalLM",
                                .rope_style = compute::RopeStyle::kNeox,
                                .fused = true};

}  // namespace

Expected<std::unique_ptr<ModelSource>> OpenPhi3Source(const std::string& path,
                                                      std::shared_ptr<const GgufFile> file) {
  return OpenLlamaFamilySource(path, std::move(file), kPhi3);
}

}  // namespace ctxpar
