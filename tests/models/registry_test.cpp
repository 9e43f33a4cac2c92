// The architecture registry: every name maps to one source; a GGUF or HF checkpoint of an
// architecture outside the table gets its catalog error listing what runs.
#include "models/registry.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "ctxpar/model.h"

namespace ctxpar {
namespace {

TEST(Registry, NamesAreUniqueAndEachHasAnOpener) {
  std::set<std::string_view> gguf, hf;
  for (const Architecture& a : Architectures()) {
    EXPECT_TRUE(a.open_gguf != nullptr || a.open_hf != nullptr) << a.hf_name;
    EXPECT_TRUE(hf.insert(a.hf_name).second) << a.hf_name;
    if (a.open_gguf != nullptr) EXPECT_TRUE(gguf.insert(a.gguf_name).second) << a.gguf_name;
  }
  EXPECT_EQ(gguf,
            (std::set<std::string_view>{"llama", "gemma3", "gemma2", "qwen2", "qwen3", "phi3",
                                        "olmo2", "mistral3", "qwen3moe", "gpt-oss", "deepseek2"}));
}

TEST(Registry, GgufOfAnotherArchitectureListsTheKnownOnes) {
  // The loader's fixture: general.architecture = "testarch".
  const std::string path = std::string(CTXPAR_TEST_DATA_DIR) + "/gguf/fixture_v3.gguf.bin";
  auto source = OpenModelSource(path);
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().error_id(), "CTXPAR-MODEL-010");
  EXPECT_EQ(
      source.status().message(),
      path +
          ": general.architecture is 'testarch'; ctxpar runs GGUF models of the "
          "architectures llama, gemma3, gemma2, qwen2, qwen3, qwen3moe, phi3, olmo2, mistral3, "
          "gpt-oss, deepseek2.");
}

TEST(Registry, HfCheckpointOfAnotherArchitectureIsRefused) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("ctxpar_registry_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"architectures": ["Qwen2ForCausalLM"]})";
  auto source = OpenModelSource(dir.string());
  std::filesystem::remove_all(dir);
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().error_id(), "CTXPAR-HF-002");
  EXPECT_NE(source.status().message().find("Qwen2ForCausalLM"), std::string::npos);
}

}  // namespace
}  // namespace ctxpar
