#include "models/registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <system_error>
#include <vector>

#include "ctxpar/error_catalog.h"
#include "ctxpar/hf_config.h"

namespace ctxpar {

namespace {

constexpr Architecture kArchitectures[] = {
    {"llama", "LlamaForCausalLM", OpenLlamaSource, nullptr},
    {"gemma3", "Gemma3ForCausalLM", OpenGemma3Source, nullptr},
    {"gemma2", "Gemma2ForCausalLM", OpenGemma2Source, nullptr},
    {"qwen2", "Qwen2ForCausalLM", OpenQwen2Source, nullptr},
    {"qwen3", "Qwen3ForCausalLM", OpenQwen3Source, nullptr},
    {"qwen3moe", "Qwen3MoeForCausalLM", OpenQwen3MoeSource, nullptr},
    {"phi3", "Phi3ForCausalLM", OpenPhi3Source, nullptr},
    {"olmo2", "Olmo2ForCausalLM", OpenOlmo2Source, nullptr},
    {"mistral3", "Ministral3ForCausalLM", OpenMistral3Source, nullptr},
    {"gpt-oss", "GptOssForCausalLM", OpenGptOssSource, nullptr},
    {"deepseek2", "DeepseekV3ForCausalLM", OpenDeepseek2Source, OpenDeepseekSource},
    {"", "DeepseekV4ForCausalLM", nullptr, OpenDeepseekSource},
};

Expected<std::unique_ptr<ModelSource>> OpenGguf(const std::string& path) {
  CTXPAR_ASSIGN_OR_RETURN(GgufFile opened, GgufFile::Open(path));
  auto file = std::make_shared<const GgufFile>(std::move(opened));
  CTXPAR_ASSIGN_OR_RETURN(std::string arch, file->GetString("general.architecture"));
  std::vector<std::string_view> known;
  for (const Architecture& a : kArchitectures) {
    if (a.open_gguf == nullptr) continue;
    if (a.gguf_name == arch) return a.open_gguf(path, std::move(file));
    known.push_back(a.gguf_name);
  }
  return CatalogError("CTXPAR-MODEL-010", {{"path", path},
                                           {"architecture", arch},
                                           {"known", fmt::format("{}", fmt::join(known, ", "))}});
}

Expected<std::unique_ptr<ModelSource>> OpenHf(const std::string& dir) {
  CTXPAR_ASSIGN_OR_RETURN(std::string arch, ReadHfArchitecture(dir));
  for (const Architecture& a : kArchitectures) {
    if (a.open_hf != nullptr && a.hf_name == arch) return a.open_hf(dir);
  }
  return CatalogError("CTXPAR-HF-002", {{"path", dir + "/config.json"}, {"architecture", arch}});
}

}  // namespace

std::span<const Architecture> Architectures() { return kArchitectures; }

Expected<std::unique_ptr<ModelSource>> OpenModelSource(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    if (std::filesystem::exists(std::filesystem::path(path) / "config.json", ec)) {
      return OpenHf(path);
    }
    return CatalogError("CTXPAR-MODEL-008",
                        {{"path", path}, {"holds", "a directory without a config.json"}});
  }
  Expected<std::unique_ptr<ModelSource>> source = OpenGguf(path);
  // Only a file that is not there is sent to fetch the model; a corrupt one would come back the
  // same, and a missing key (also kNotFound) is the file's fault.
  if (source.ok() || source.status().code() != StatusCode::kNotFound ||
      source.status().error_id() != "CTXPAR-GGUF-001") {
    return source;
  }
  const Status& s = source.status();
  return Status(s.code(),
                s.message() +
                    " Fetch the default model with scripts/fetch-model.sh, or give the path with "
                    "--model-path or CTXPAR_MODEL.",
                s.error_id());
}

}  // namespace ctxpar
