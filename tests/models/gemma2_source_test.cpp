// Gemma 2 hyperparameters that would change or break the output are refused with their key when
// the file opens, before any tensor is read: a softcap of 0, below 0 or NaN, a missing softcap
// (llama.cpp would run 50 and 30 in its place), a sliding window of 0 or 1, a single layer (no
// global layer for the KV pool's first group), and a key the model does not read (llama.cpp's
// rope.freq_base_swa). The same keys without a fault get as far as the first tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../loader/gguf_test_data.h"
#include "ctxpar/model.h"

namespace ctxpar {
namespace {

struct Keys {
  uint32_t block_count = 2;
  uint32_t window = 64;
  std::optional<float> attn_softcap = 50.0f;
  float final_softcap = 30.0f;
  bool extra_key = false;
};

// A metadata-only gemma2 file (the converter's keys, no tensor), written where OpenModelSource
// reads it.
std::string WriteGemma2Keys(const Keys& k, const std::string& name) {
  const std::pair<const char*, uint32_t> ints[] = {{"gemma2.embedding_length", 64},
                                                   {"gemma2.block_count", k.block_count},
                                                   {"gemma2.attention.head_count", 4},
                                                   {"gemma2.attention.head_count_kv", 2},
                                                   {"gemma2.feed_forward_length", 128},
                                                   {"gemma2.context_length", 1024},
                                                   {"gemma2.attention.key_length", 32},
                                                   {"gemma2.attention.value_length", 32},
                                                   {"gemma2.attention.sliding_window", k.window}};
  std::vector<std::pair<const char*, float>> floats = {
      {"gemma2.attention.layer_norm_rms_epsilon", 1e-6f},
      {"gemma2.final_logit_softcapping", k.final_softcap}};
  if (k.attn_softcap) floats.push_back({"gemma2.attn_logit_softcapping", *k.attn_softcap});
  if (k.extra_key) floats.push_back({"gemma2.rope.freq_base_swa", 1e4f});
  testing::Image img;
  img.Header(3, 0, std::size(ints) + floats.size() + 1);
  img.Str("general.architecture").Put<uint32_t>(8).Str("gemma2");
  for (const auto& [key, value] : ints) img.Str(key).Put<uint32_t>(4).Put<uint32_t>(value);
  for (const auto& [key, value] : floats) img.Str(key).Put<uint32_t>(6).Put<float>(value);
  const std::string path = ::testing::TempDir() + "gemma2_" + name + ".gguf";
  const std::vector<uint8_t> bytes = img.bytes();
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  return path;
}

void ExpectRefused(const Keys& k, const std::string& name, const std::string& id,
                   const std::string& key) {
  const std::string path = WriteGemma2Keys(k, name);
  const auto source = OpenModelSource(path);
  ASSERT_FALSE(source.ok()) << name;
  EXPECT_EQ(source.status().error_id(), id) << name << ": " << source.status().message();
  EXPECT_NE(source.status().message().find(key), std::string::npos)
      << name << ": " << source.status().message();
}

TEST(Gemma2Source, FaultyHyperparametersAreRefusedByTheirKey) {
  const std::string attn = "gemma2.attn_logit_softcapping";
  const std::string final = "gemma2.final_logit_softcapping";
  ExpectRefused({.attn_softcap = 0.0f}, "attn_zero", "CTXPAR-GGUF-006", attn);
  ExpectRefused({.attn_softcap = -5.0f}, "attn_negative", "CTXPAR-GGUF-006", attn);
  ExpectRefused({.attn_softcap = std::nanf("")}, "attn_nan", "CTXPAR-GGUF-006", attn);
  ExpectRefused({.attn_softcap = std::nullopt}, "attn_missing", "CTXPAR-GGUF-004", attn);
  ExpectRefused({.final_softcap = 0.0f}, "final_zero", "CTXPAR-GGUF-006", final);
  ExpectRefused({.final_softcap = std::nanf("")}, "final_nan", "CTXPAR-GGUF-006", final);
  for (uint32_t window : {0u, 1u}) {
    ExpectRefused({.window = window}, "window" + std::to_string(window), "CTXPAR-GGUF-006",
                  "gemma2.attention.sliding_window");
  }
  ExpectRefused({.block_count = 1}, "one_layer", "CTXPAR-GGUF-006", "gemma2.block_count");
  ExpectRefused({.extra_key = true}, "extra_key", "CTXPAR-MODEL-011",
                "key gemma2.rope.freq_base_swa");
}

TEST(Gemma2Source, TheSameKeysWithoutAFaultGetToTheTensors) {
  const std::string path = WriteGemma2Keys({}, "valid");
  const auto source = OpenModelSource(path);
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().error_id(), "CTXPAR-GGUF-007") << source.status().message();
  EXPECT_NE(source.status().message().find("token_embd.weight"), std::string::npos)
      << source.status().message();
}

}  // namespace
}  // namespace ctxpar
