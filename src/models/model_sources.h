// The loaders OpenModelSource chooses between (not public API).
#pragma once

#include <memory>
#include <string>

#include "ctxpar/model.h"

namespace ctxpar {

// A GGUF file of the llama architecture (llama_source.cpp).
Expected<std::unique_ptr<ModelSource>> OpenGgufSource(const std::string& path);

}  // namespace ctxpar
