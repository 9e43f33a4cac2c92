// The DeepSeek-V3 config.json reader: the values it takes, HF's spellings of RoPE, and each
// refusal by key with its catalog ID.
#include "models/deepseek_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

namespace ctxpar {
namespace {

using Json = nlohmann::json;

const std::string kReference = std::string(CTXPAR_REFERENCE_DIR) + "/deepseek_v3_tiny";

// DeepSeek-V3's published sizes, as transformers 5 writes them (bf16, default RoPE).
Json V3Config() {
  return Json::parse(R"({
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
    "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432,
    "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
    "num_key_value_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "head_dim": 64,
    "qk_head_dim": 192, "n_routed_experts": 256, "num_experts_per_tok": 8,
    "n_shared_experts": 1, "n_group": 8, "topk_group": 4, "first_k_dense_replace": 3,
    "routed_scaling_factor": 2.5, "norm_topk_prob": true, "rope_interleave": true,
    "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
    "rms_norm_eps": 1e-6, "max_position_embeddings": 163840, "bos_token_id": 0,
    "eos_token_id": 1, "hidden_act": "silu", "tie_word_embeddings": false,
    "transformers_version": "5.17.0", "use_cache": true})");
}

Expected<DeepseekV3Config> Parse(const Json& j) { return ParseDeepseekV3Config(j.dump(), "cfg"); }

TEST(HfConfigTest, ReadsDeepseekV3) {
  auto c = Parse(V3Config());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->architecture, "DeepseekV3ForCausalLM");
  EXPECT_EQ(c->hidden_size, 7168);
  EXPECT_EQ(c->q_lora_rank, 1536);
  EXPECT_EQ(c->kv_lora_rank, 512);
  EXPECT_EQ(c->qk_head_dim(), 192);
  EXPECT_EQ(c->n_group, 8);
  EXPECT_EQ(c->topk_group, 4);
  EXPECT_DOUBLE_EQ(c->routed_scaling_factor, 2.5);
  EXPECT_TRUE(c->norm_topk_prob);
  EXPECT_EQ(c->eos_token_ids, std::vector<int32_t>{1});
  EXPECT_EQ(c->dtype, DataType::kF32);  // no dtype key
  EXPECT_FALSE(c->is_moe_layer(2));
  EXPECT_TRUE(c->is_moe_layer(3));

  // The older spelling: rope_theta at the top and rope_scaling null; a list of EOS ids.
  Json old = V3Config();
  old.erase("rope_parameters");
  old["rope_theta"] = 50000.0;
  old["rope_scaling"] = nullptr;
  old["eos_token_id"] = {1, 2};
  auto o = Parse(old);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_DOUBLE_EQ(o->rope_theta, 50000.0);
  EXPECT_EQ(o->eos_token_ids, (std::vector<int32_t>{1, 2}));
  old["torch_dtype"] = "float16";
  EXPECT_EQ(Parse(old)->dtype, DataType::kF16);

  Json v4 = V3Config();
  v4["architectures"] = {"DeepseekV4ForCausalLM"};
  EXPECT_EQ(Parse(v4)->architecture, "DeepseekV4ForCausalLM");
}

// DeepSeek-V3's hub config.json spells its YaRN in rope_scaling with "type"; transformers 5
// writes rope_parameters with "rope_type". Both are read with every parameter.
TEST(HfConfigTest, ReadsDeepseekV3sYarn) {
  Json old = V3Config();
  old.erase("rope_parameters");
  old["rope_theta"] = 10000;
  old["rope_scaling"] = {{"beta_fast", 32},       {"beta_slow", 1},
                         {"factor", 40},          {"mscale", 1.0},
                         {"mscale_all_dim", 1.0}, {"original_max_position_embeddings", 4096},
                         {"type", "yarn"}};
  auto c = Parse(old);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(c->yarn.has_value());
  EXPECT_EQ(c->yarn->factor, 40.0);
  EXPECT_EQ(c->yarn->original_max_position_embeddings, 4096);
  EXPECT_EQ(c->yarn->beta_fast, 32.0);
  EXPECT_EQ(c->yarn->beta_slow, 1.0);
  EXPECT_EQ(c->yarn->mscale, 1.0);
  EXPECT_EQ(c->yarn->mscale_all_dim, 1.0);
  EXPECT_FALSE(c->yarn->attention_factor.has_value());
  EXPECT_TRUE(c->yarn->truncate);
  Json v5 = V3Config();
  v5["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 10000.0},
                           {"factor", 4.0},       {"original_max_position_embeddings", 64},
                           {"truncate", false},   {"attention_factor", 1.5}};
  auto d = Parse(v5);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->yarn->factor, 4.0);
  EXPECT_FALSE(d->yarn->truncate);
  EXPECT_EQ(d->yarn->attention_factor, 1.5);
  EXPECT_FALSE(Parse(V3Config())->yarn.has_value());
}

struct Refusal {
  std::function<void(Json&)> edit;
  const char* id;
  const char* message;
};

TEST(HfConfigTest, RefusesByKeyWithCatalogIds) {
  const Refusal cases[] = {
      {[](Json& j) { j.erase("kv_lora_rank"); }, "CTXPAR-HF-001",
       "cfg is not a config.json ctxpar can read: kv_lora_rank is missing"},
      {[](Json& j) { j["hidden_size"] = "7168"; }, "CTXPAR-HF-001",
       "cfg is not a config.json ctxpar can read: hidden_size is not an integer"},
      {[](Json& j) { j["norm_topk_prob"] = 1; }, "CTXPAR-HF-001",
       "norm_topk_prob is not a boolean"},
      {[](Json& j) { j["architectures"] = {"LlamaForCausalLM"}; }, "CTXPAR-HF-002",
       "cfg: architecture LlamaForCausalLM is not one ctxpar runs from a HF checkpoint; it runs "
       "DeepseekV3ForCausalLM and DeepseekV4ForCausalLM"},
      // YaRN needs its original context; other scalings are refused.
      {[](Json& j) {
         j["rope_parameters"] = {{"type", "yarn"}, {"rope_theta", 10000}};
       },
       "CTXPAR-HF-001", "rope_parameters.original_max_position_embeddings is missing"},
      {[](Json& j) {
         j["rope_parameters"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
       },
       "CTXPAR-HF-003",
       "cfg: rope_parameters.rope_type=\"dynamic\" is not supported: ctxpar runs the default RoPE "
       "and YaRN"},
      {[](Json& j) {
         j["rope_scaling"] = {{"rope_type", "linear"}};
       },
       "CTXPAR-HF-003", "cfg: rope_scaling.rope_type=\"linear\" is not supported"},
      {[](Json& j) { j["rope_parameters"]["factor"] = 2; }, "CTXPAR-HF-003",
       "cfg: rope_parameters.factor=2 is not supported: the default RoPE takes no such parameter"},
      {[](Json& j) {
         j["quantization_config"] = {{"quant_method", "fp8"}};
       },
       "CTXPAR-HF-003", "cfg: quantization_config={\"quant_method\":\"fp8\"} is not supported"},
      {[](Json& j) { j["rope_interleave"] = false; }, "CTXPAR-HF-003",
       "cfg: rope_interleave=false is not supported"},
      {[](Json& j) { j["q_lora_rank"] = nullptr; }, "CTXPAR-HF-003",
       "cfg: q_lora_rank=null is not supported"},
      {[](Json& j) { j["scoring_func"] = "softmax"; }, "CTXPAR-HF-003",
       "cfg: scoring_func=\"softmax\" is not supported"},
      {[](Json& j) { j["topk_method"] = "greedy"; }, "CTXPAR-HF-003",
       "cfg: topk_method=\"greedy\" is not supported"},
      {[](Json& j) { j["hidden_act"] = "gelu"; }, "CTXPAR-HF-003", "cfg: hidden_act=\"gelu\""},
      {[](Json& j) { j["dtype"] = "float8_e4m3fn"; }, "CTXPAR-HF-003",
       "cfg: dtype=\"float8_e4m3fn\" is not supported"},
      {[](Json& j) { j["attention_bias"] = true; }, "CTXPAR-HF-003", "cfg: attention_bias=true"},
      {[](Json& j) { j["moe_layer_freq"] = 2; }, "CTXPAR-HF-003", "cfg: moe_layer_freq=2"},
      {[](Json& j) { j["kv_lora_rank"] = 500; }, "CTXPAR-HF-003",
       "cfg: kv_lora_rank=500 is not supported: the attention kernels take head widths"},
      {[](Json& j) { j["n_group"] = 3; }, "CTXPAR-HF-004",
       "cfg: n_group=3 contradicts the configuration: it must divide n_routed_experts (256)"},
      {[](Json& j) { j["topk_group"] = 9; }, "CTXPAR-HF-004",
       "cfg: topk_group=9 contradicts the configuration: it must be at most n_group (8)"},
      {[](Json& j) { j["num_experts_per_tok"] = 200; }, "CTXPAR-HF-004",
       "cfg: num_experts_per_tok=200 contradicts the configuration: topk_group (4) groups hold "
       "only 128 experts"},
      {[](Json& j) { j["first_k_dense_replace"] = 62; }, "CTXPAR-HF-004",
       "first_k_dense_replace=62 contradicts the configuration: it must be at most "
       "num_hidden_layers (61)"},
      {[](Json& j) { j["qk_rope_head_dim"] = 63; }, "CTXPAR-HF-004", "qk_rope_head_dim=63"},
      {[](Json& j) { j["qk_head_dim"] = 190; }, "CTXPAR-HF-004",
       "qk_head_dim=190 contradicts the configuration: it must be qk_nope_head_dim + "
       "qk_rope_head_dim = 192"},
      {[](Json& j) { j["head_dim"] = 128; }, "CTXPAR-HF-004", "head_dim=128"},
      {[](Json& j) { j["num_attention_heads"] = 0; }, "CTXPAR-HF-004",
       "num_attention_heads=0 contradicts the configuration: it must be in [1, 2^30]"},
      {[](Json& j) { j["routed_scaling_factor"] = -1; }, "CTXPAR-HF-004",
       "routed_scaling_factor=-1.0"},
      {[](Json& j) { j["eos_token_id"] = 129280; }, "CTXPAR-HF-004",
       "eos_token_id=129280 contradicts the configuration: token ids must be in [0, vocab_size "
       "= 129280)"},
  };
  for (const Refusal& r : cases) {
    Json j = V3Config();
    r.edit(j);
    auto c = Parse(j);
    ASSERT_FALSE(c.ok()) << r.message;
    EXPECT_EQ(c.status().error_id(), r.id) << c.status().message();
    EXPECT_NE(c.status().message().find(r.message), std::string::npos) << c.status().message();
  }
  auto text = ParseDeepseekV3Config("[1]", "cfg");
  EXPECT_EQ(text.status().error_id(), "CTXPAR-HF-001");
}

TEST(HfConfigTest, ReadsTheReferenceConfigInPlace) {
  if (!std::filesystem::exists(kReference + "/config.json")) {
    GTEST_SKIP() << "the tiny DeepSeek-V3 reference checkpoint is not at " << kReference;
  }
  auto c = ReadDeepseekV3Config(kReference);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->hidden_size, 256);
  EXPECT_EQ(c->num_attention_heads, 8);
  EXPECT_EQ(c->q_lora_rank, 96);
  EXPECT_EQ(c->kv_lora_rank, 64);
  EXPECT_EQ(c->qk_nope_head_dim, 32);
  EXPECT_EQ(c->qk_rope_head_dim, 16);
  EXPECT_EQ(c->v_head_dim, 32);
  EXPECT_EQ(c->n_routed_experts, 8);
  EXPECT_EQ(c->n_group, 4);
  EXPECT_EQ(c->topk_group, 2);
  EXPECT_EQ(c->first_k_dense_replace, 1);
  EXPECT_EQ(c->vocab_size, 1024);
  EXPECT_EQ(c->dtype, DataType::kBF16);
  EXPECT_EQ(ReadDeepseekV3Config("/nonexistent").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace ctxpar
