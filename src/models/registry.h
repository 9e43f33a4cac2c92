// The architecture registry: which model source opens a checkpoint (SGLang's model registry,
// llama.cpp's LLM_ARCH table). A GGUF file is matched by its `general.architecture`, a HF
// checkpoint directory by its config.json `architectures` entry. Adding an architecture is one
// source file (its ModelSource and Model), one entry in registry.cpp's table and its goldens.
//
// Thread safety: the table is immutable.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "ctxpar/gguf.h"
#include "ctxpar/model.h"

namespace ctxpar {

// Opens a GGUF file already mapped as `file` (its architecture matched).
using GgufOpener = Expected<std::unique_ptr<ModelSource>> (*)(const std::string& path,
                                                              std::shared_ptr<const GgufFile> file);
// Opens a HF checkpoint directory (its architecture matched).
using HfOpener = Expected<std::unique_ptr<ModelSource>> (*)(const std::string& dir);

struct Architecture {
  std::string_view gguf_name;  // general.architecture, empty when not read from GGUF
  std::string_view hf_name;    // HF architectures entry (also ModelDesc::architecture)
  GgufOpener open_gguf = nullptr;
  HfOpener open_hf = nullptr;
};

std::span<const Architecture> Architectures();

// The openers of each architecture (in their source files).
Expected<std::unique_ptr<ModelSource>> OpenLlamaSource(const std::string& path,
                                                       std::shared_ptr<const GgufFile> file);
Expected<std::unique_ptr<ModelSource>> OpenQwen2Source(const std::string& path,
                                                       std::shared_ptr<const GgufFile> file);
Expected<std::unique_ptr<ModelSource>> OpenQwen3Source(const std::string& path,
                                                       std::shared_ptr<const GgufFile> file);
Expected<std::unique_ptr<ModelSource>> OpenQwen3MoeSource(const std::string& path,
                                                          std::shared_ptr<const GgufFile> file);
Expected<std::unique_ptr<ModelSource>> OpenPhi3Source(const std::string& path,
                                                      std::shared_ptr<const GgufFile> file);
Expected<std::unique_ptr<ModelSource>> OpenMistral3Source(const std::string& path,
                                                          std::shared_ptr<const GgufFile> file);
Expected<std::unique_ptr<ModelSource>> OpenOlmo2Source(const std::string& path,
                                                       std::shared_ptr<const GgufFile> file);
Expected<std::unique_ptr<ModelSource>> OpenGptOssSource(const std::string& path,
                                                        std::shared_ptr<const GgufFile> file);
Expected<std::unique_ptr<ModelSource>> OpenGemma3Source(const std::string& path,
                                                        std::shared_ptr<const GgufFile> file);
Expected<std::unique_ptr<ModelSource>> OpenGemma2Source(const std::string& path,
                                                        std::shared_ptr<const GgufFile> file);
Expected<std::unique_ptr<ModelSource>> OpenDeepseek2Source(const std::string& path,
                                                           std::shared_ptr<const GgufFile> file);
Expected<std::unique_ptr<ModelSource>> OpenDeepseekSource(const std::string& dir);

}  // namespace ctxpar
