// config.json's architecture, read without knowing the architecture: the registry chooses the
// model by it (a name it does not run is the registry's CTXPAR-HF-002, registry_test).
#include "ctxpar/hf_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace ctxpar {
namespace {

std::string Dir(const std::string& name, const std::string& text) {
  const std::string dir = ::testing::TempDir() + "hf_config_" + name;
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << text;
  return dir;
}

TEST(HfConfig, ReadsTheArchitectureWhateverItIs) {
  auto arch = ReadHfArchitecture(Dir("llama", R"({"architectures": ["LlamaForCausalLM"]})"));
  ASSERT_TRUE(arch.ok()) << arch.status().ToString();
  EXPECT_EQ(*arch, "LlamaForCausalLM");
}

TEST(HfConfig, RefusesWhatNamesNoArchitecture) {
  for (const auto& [name, text, problem] :
       {std::tuple{"not_json", "{", "the text is not one JSON object"},
        std::tuple{"list", "[1]", "the text is not one JSON object"},
        std::tuple{"missing", "{}", "architectures is missing"},
        std::tuple{"two", R"({"architectures": ["A", "B"]})",
                   "architectures is not a list of one string"},
        std::tuple{"number", R"({"architectures": [1]})",
                   "architectures is not a list of one string"}}) {
    auto arch = ReadHfArchitecture(Dir(name, text));
    ASSERT_FALSE(arch.ok()) << name;
    EXPECT_EQ(arch.status().error_id(), "CTXPAR-HF-001") << name;
    EXPECT_NE(arch.status().message().find(problem), std::string::npos) << arch.status().message();
  }
  auto absent = ReadHfArchitecture(::testing::TempDir() + "hf_config_absent");
  ASSERT_FALSE(absent.ok());
  EXPECT_EQ(absent.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace ctxpar
