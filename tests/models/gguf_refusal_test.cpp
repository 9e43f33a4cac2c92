// Nothing in a GGUF file is ignored: copies of the tiny Llama Q8_0 file with one fault each
// (tests/data/hf_tiny/refused, written by gguf-py from tools/golden/hf_tiny/make_goldens.py) are
// refused when the source opens, before any compute, with the catalog ID and the tensor or key
// that refused.json names: a bias and a tensor the model does not read, a layer past
// block_count, a vocab_size and a key (a sliding window, an expert count) it does not read, a
// RoPE scaling type it does not run, a weight type without a kernel, a NaN norm and an infinite
// Q8_0 scale. The copy with no fault opens. tests/data/hf_tiny/deepseek_refused does the same for
// the deepseek2 file: a router (no expert_gating_func, softmax), YaRN, no q LoRA, an expert group
// count the router cannot take, a key and tensors it does not read (attn_kv_b, experts in a dense
// layer), attn_k_b without the converter's transpose and a NaN correction bias;
// tests/data/hf_tiny/gpt_oss_refused for gpt-oss: llama.cpp's rope.freq_base_swa and an
// expert_gating_func it does not read, one layer, a window of 1, a tensor it does not read and
// an MXFP4 exponent byte of 255 (E8M0's NaN).
// OpenModelSource is what `ctxpar check --model-path` and generate both run.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "ctxpar/model.h"

namespace ctxpar {
namespace {

class GgufRefusal : public ::testing::TestWithParam<const char*> {};

TEST_P(GgufRefusal, EachFaultIsRefusedByNameWhenTheFileOpens) {
  const std::string dir = std::string(CTXPAR_TEST_DATA_DIR) + "/hf_tiny/" + GetParam() + "/";
  std::ifstream in(dir + "refused.json");
  ASSERT_TRUE(in) << dir;
  const nlohmann::json cases = nlohmann::json::parse(in).at("cases");
  ASSERT_GE(cases.size(), 5u);
  for (const auto& [name, want] : cases.items()) {
    const std::string path = dir + name + ".gguf";
    const auto source = OpenModelSource(path);
    const std::string id = want.at("id").get<std::string>();
    if (id.empty()) {
      EXPECT_TRUE(source.ok()) << name << ": " << source.status().ToString();
      continue;
    }
    ASSERT_FALSE(source.ok()) << name;
    EXPECT_EQ(source.status().error_id(), id) << name << ": " << source.status().message();
    EXPECT_NE(source.status().message().find(want.at("names").get<std::string>()),
              std::string::npos)
        << name << ": " << source.status().message();
    EXPECT_NE(source.status().message().find(path), std::string::npos)
        << name << ": " << source.status().message();
  }
}

INSTANTIATE_TEST_SUITE_P(Files, GgufRefusal,
                         ::testing::Values("refused", "deepseek_refused", "gpt_oss_refused"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace ctxpar
