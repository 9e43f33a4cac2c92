// Gemma 3 hyperparameters that the KV pool cannot hold are refused with their key when the file
// opens: a sliding window of 0 or 1 (a window layer's token would see nothing or only itself),
// and a window on a file of fewer layers than the pattern of 6 (no global layer: the pool keeps
// the global layers' group first; it used to fail later, naming the pool's groups[0]).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "../loader/gguf_test_data.h"
#include "ctxpar/gguf.h"
#include "models/gemma3.h"

namespace ctxpar {
namespace {

// A metadata-only gemma3 file: the keys ReadGemma3Hparams reads before any tensor.
GgufFile Gemma3Keys(uint32_t block_count, uint32_t window) {
  const std::pair<const char*, uint32_t> ints[] = {
      {"gemma3.embedding_length", 64},     {"gemma3.block_count", block_count},
      {"gemma3.attention.head_count", 4},  {"gemma3.attention.head_count_kv", 1},
      {"gemma3.feed_forward_length", 128}, {"gemma3.context_length", 1024},
      {"gemma3.attention.key_length", 32}, {"gemma3.attention.sliding_window", window}};
  testing::Image img;
  img.Header(3, 0, std::size(ints) + 2);
  img.Str("general.architecture").Put<uint32_t>(8).Str("gemma3");
  img.Str("gemma3.attention.layer_norm_rms_epsilon").Put<uint32_t>(6).Put<float>(1e-6f);
  for (const auto& [key, value] : ints) img.Str(key).Put<uint32_t>(4).Put<uint32_t>(value);
  Expected<GgufFile> f = GgufFile::FromBytes(img.bytes());
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  return std::move(*f);
}

TEST(Gemma3Hparams, AWindowOfZeroOrOneIsRefusedByItsKey) {
  for (uint32_t window : {0u, 1u}) {
    const Expected<Gemma3Hparams> hp = ReadGemma3Hparams(Gemma3Keys(12, window));
    ASSERT_FALSE(hp.ok()) << window;
    EXPECT_EQ(hp.status().error_id(), "CTXPAR-GGUF-006") << hp.status().message();
    EXPECT_NE(hp.status().message().find("gemma3.attention.sliding_window"), std::string::npos)
        << hp.status().message();
  }
}

TEST(Gemma3Hparams, AWindowWithoutAGlobalLayerIsRefusedByBlockCount) {
  const Expected<Gemma3Hparams> hp = ReadGemma3Hparams(Gemma3Keys(5, 64));
  ASSERT_FALSE(hp.ok());
  EXPECT_EQ(hp.status().error_id(), "CTXPAR-GGUF-006") << hp.status().message();
  EXPECT_NE(hp.status().message().find("gemma3.block_count"), std::string::npos)
      << hp.status().message();
  EXPECT_EQ(hp.status().message().find("groups"), std::string::npos) << hp.status().message();
}

}  // namespace
}  // namespace ctxpar
