// Mistral 3 (Ministral 3) from GGUF: the Llama block (llama.h) with YaRN's log multiplier and
// Llama 4's attention temperature on the queries past each multiple of the original context.
#include <memory>
#include <string>
#include <utility>

#include "models/llama.h"
#include "models/registry.h"

namespace ctxpar {

namespace {

constexpr LlamaVariant kMistral3 = {
    .gguf_name = "mistral3", .hf_name = "Ministral3ForCausalLM", .attn_temperature = true};

}  // namespace

Expected<std::unique_ptr<ModelSource>> OpenMistral3Source(const std::string& path,
                                                          std::shared_ptr<const GgufFile> file) {
  return OpenLlamaFamilySource(path, std::move(file), kMistral3);
}

}  // namespace ctxpar
