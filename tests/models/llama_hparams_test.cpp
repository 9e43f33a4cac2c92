// The Llama family's RoPE scaling read from a LongRoPE file (tests/data/hf_tiny/phi3_longrope,
// made by tools/golden/hf_tiny/make_goldens.py): the long factors of transformers' config past
// the original context and its attention scaling, as rope.scaling.attn_factor; the short ones
// when the file's context is within the original one. The forward against transformers is
// hf_tiny_golden_test's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ctxpar/gguf.h"
#include "models/llama.h"

namespace ctxpar {
namespace {

const std::string kDir = std::string(CTXPAR_TEST_DATA_DIR) + "/hf_tiny/phi3_longrope/";

nlohmann::json Golden() {
  std::ifstream in(kDir + "golden.json");
  return nlohmann::json::parse(in);
}

std::vector<uint8_t> FileBytes(const std::string& path = kDir + "phi3_longrope-q8_0.gguf") {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The bytes with the u32 key `key` set to `value`.
std::vector<uint8_t> WithU32(std::vector<uint8_t> bytes, const std::string& key, uint32_t value) {
  std::string needle(8, '\0');
  const uint64_t size = key.size();
  std::memcpy(needle.data(), &size, 8);
  needle += key;
  const auto at = std::search(bytes.begin(), bytes.end(), needle.begin(), needle.end());
  EXPECT_NE(at, bytes.end()) << key;
  uint32_t type = 0;
  std::memcpy(&type, &*(at + needle.size()), 4);
  EXPECT_EQ(type, 4u) << key;  // GGUF u32
  std::memcpy(&*(at + needle.size() + 4), &value, 4);
  return bytes;
}

std::vector<float> Factors(const nlohmann::json& golden, const char* which) {
  return golden.at("config").at("rope_parameters").at(which).get<std::vector<float>>();
}

TEST(LlamaHparams, LongRopeTakesTransformersLongFactorsAndScaling) {
  const nlohmann::json golden = Golden();
  Expected<GgufFile> file = GgufFile::FromBytes(FileBytes());
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  Expected<LlamaHparams> hp = ReadLlamaHparams(*file);
  ASSERT_TRUE(hp.ok()) << hp.status().ToString();
  EXPECT_EQ(hp->context_length, 1024);
  EXPECT_EQ(hp->rope_scaling.freq_factors, Factors(golden, "long_factor"));
  EXPECT_NEAR(hp->rope_scaling.attn_factor, golden.at("rope_attention_scaling").get<double>(),
              1e-6);
}

TEST(LlamaHparams, LongRopeWithinTheOriginalContextTakesTheShortFactors) {
  const nlohmann::json golden = Golden();
  Expected<GgufFile> file = GgufFile::FromBytes(WithU32(FileBytes(), "phi3.context_length", 64));
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  Expected<LlamaHparams> hp = ReadLlamaHparams(*file);
  ASSERT_TRUE(hp.ok()) << hp.status().ToString();
  EXPECT_EQ(hp->rope_scaling.freq_factors, Factors(golden, "short_factor"));
}

// YaRN from the converter's keys (tests/data/hf_tiny/qwen2_yarn): transformers' factor and
// original context, ggml's default betas and ext_factor 1.
TEST(LlamaHparams, YarnTakesTheConvertersKeys) {
  const std::string dir = std::string(CTXPAR_TEST_DATA_DIR) + "/hf_tiny/qwen2_yarn/";
  std::ifstream in(dir + "golden.json");
  const nlohmann::json rope = nlohmann::json::parse(in).at("config").at("rope_parameters");
  Expected<GgufFile> file = GgufFile::FromBytes(FileBytes(dir + "qwen2_yarn-q8_0.gguf"));
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  Expected<LlamaHparams> hp = ReadLlamaHparams(*file);
  ASSERT_TRUE(hp.ok()) << hp.status().ToString();
  const compute::RopeScaling& s = hp->rope_scaling;
  EXPECT_EQ(s.freq_scale, float(1.0 / rope.at("factor").get<double>()));
  EXPECT_EQ(s.orig_ctx, rope.at("original_max_position_embeddings").get<int>());
  EXPECT_EQ(s.ext_factor, 1.0f);
  EXPECT_EQ(s.beta_fast, 32.0f);
  EXPECT_EQ(s.beta_slow, 1.0f);
  EXPECT_EQ(s.attn_factor, 1.0f);
  EXPECT_TRUE(s.freq_factors.empty());
}

// A window on every layer: 0 (the converter's "none") and one no token of the context can pass
// (Phi-3.5's 262144 over 128k) are none; one that binds (Phi-3-mini-4k's 2047) is kept; 1 would
// leave a token only itself and is refused.
TEST(LlamaHparams, WindowBindsOnlyWithinTheContext) {
  const LlamaVariant phi3 = {.gguf_name = "phi3",
                             .hf_name = "Phi3ForCausalLM",
                             .rope_style = compute::RopeStyle::kNeox,
                             .fused = true};
  const std::vector<uint8_t> bytes =
      FileBytes(std::string(CTXPAR_TEST_DATA_DIR) + "/hf_tiny/phi3/phi3-q8_0.gguf");
  for (const uint32_t window : {0u, 1024u, 262144u, 1023u, 2u, 1u}) {
    Expected<GgufFile> file =
        GgufFile::FromBytes(WithU32(bytes, "phi3.attention.sliding_window", window));
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    Expected<LlamaHparams> hp = ReadLlamaHparams(*file, phi3);
    if (window == 1) {
      ASSERT_FALSE(hp.ok());
      EXPECT_EQ(hp.status().error_id(), "CTXPAR-GGUF-006");
      EXPECT_NE(hp.status().message().find("phi3.attention.sliding_window"), std::string::npos)
          << hp.status().message();
      continue;
    }
    ASSERT_TRUE(hp.ok()) << window << ": " << hp.status().ToString();
    EXPECT_EQ(hp->window, window >= 1024 ? 0 : static_cast<int>(window)) << window;
  }
}

}  // namespace
}  // namespace ctxpar
