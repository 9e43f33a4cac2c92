// The loaders OpenModelSource chooses between (not public API).
#pragma once

#include <memory>
#include <string>

#include "ctxpar/model.h"

namespace ctxpar {

// A GGUF file of the llama architecture (llama_source.cpp).
Expected<std::unique_ptr<ModelSource>> OpenGgufSource(const std::string& path);
// A HF checkpoint directory (config.json + safetensors) of the DeepSeek-V3 architecture
// (deepseek_source.cpp).
Expected<std::unique_ptr<ModelSource>> OpenHfSource(const std::string& dir);

}  // namespace ctxpar
