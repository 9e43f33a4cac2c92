// The planner's built-in models and machines (docs/plan.md cites the source of every figure).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <string>

#include "ctxpar/error_catalog.h"
#include "ctxpar/plan.h"
#include "models/deepseek.h"
#include "models/gemma3.h"
#include "models/layers/attention_shard.h"

namespace ctxpar::plan {

namespace {

// A published config.json's dimensions, as the planner needs them.
struct ModelRow {
  std::string_view name;
  std::string_view architecture;
  std::string_view source;
  int layers, hidden, vocab, heads, kv_heads, head_dim;
  bool mla;
  int q_lora, kv_lora, qk_nope, qk_rope;
  int dense_layers, ffn, experts, experts_per_token, shared_experts, expert_ffn;
  int sliding_window, global_every;
  int context;
  double bytes_per_param;  // the released checkpoint's weights
  bool tied;
};

constexpr std::string_view kHf = "https://huggingface.co/";

// clang-format off
constexpr std::array<ModelRow, 8> kModels = {{
    {"deepseek-v3", "DeepseekV3ForCausalLM", "deepseek-ai/DeepSeek-V3/blob/main/config.json",
     61, 7168, 129280, 128, 128, 128, true, 1536, 512, 128, 64, 3, 18432, 256, 8, 1, 2048, 0, 0,
     163840, 1.0, false},
    {"deepseek-r1", "DeepseekV3ForCausalLM", "deepseek-ai/DeepSeek-R1/blob/main/config.json",
     61, 7168, 129280, 128, 128, 128, true, 1536, 512, 128, 64, 3, 18432, 256, 8, 1, 2048, 0, 0,
     163840, 1.0, false},
    {"kimi-k2", "DeepseekV3ForCausalLM", "moonshotai/Kimi-K2-Instruct/blob/main/config.json",
     61, 7168, 163840, 64, 64, 128, true, 1536, 512, 128, 64, 1, 18432, 384, 8, 1, 2048, 0, 0,
     131072, 1.0, false},
    {"glm-4.5", "Glm4MoeForCausalLM", "zai-org/GLM-4.5/blob/main/config.json",
     92, 5120, 151552, 96, 8, 128, false, 0, 0, 0, 0, 3, 12288, 160, 8, 1, 1536, 0, 0,
     131072, 2.0, false},
    {"llama-3.1-70b", "LlamaForCausalLM", "meta-llama/Llama-3.1-70B-Instruct/blob/main/config.json",
     80, 8192, 128256, 64, 8, 128, false, 0, 0, 0, 0, 80, 28672, 0, 0, 0, 0, 0, 0,
     131072, 2.0, false},
    {"llama-3.1-405b", "LlamaForCausalLM",
     "meta-llama/Llama-3.1-405B-Instruct/blob/main/config.json",
     126, 16384, 128256, 128, 8, 128, false, 0, 0, 0, 0, 126, 53248, 0, 0, 0, 0, 0, 0,
     131072, 2.0, false},
    {"qwen3-235b-a22b", "Qwen3MoeForCausalLM", "Qwen/Qwen3-235B-A22B/blob/main/config.json",
     94, 4096, 151936, 64, 4, 128, false, 0, 0, 0, 0, 0, 12288, 128, 8, 0, 1536, 0, 0,
     40960, 2.0, false},
    {"gemma-3-27b", "Gemma3ForConditionalGeneration", "google/gemma-3-27b-it/blob/main/config.json",
     62, 5376, 262208, 32, 16, 128, false, 0, 0, 0, 0, 62, 21504, 0, 0, 0, 0, 1024, 6,
     131072, 2.0, true},
}};
// clang-format on

// The DeepSeek-V3 layout rules (heads and experts against tp and ep) for an MLA preset; the CPU
// engine's own restriction (an fp32 latent cache) is not the GPU's.
DeepseekV3Config DeepseekConfigOf(const PlanModel& m) {
  DeepseekV3Config c;
  c.architecture = m.info.architecture;
  c.vocab_size = m.vocab;
  c.hidden_size = m.hidden;
  c.intermediate_size = m.ffn;
  c.moe_intermediate_size = m.expert_ffn;
  c.num_hidden_layers = m.num_layers;
  c.num_attention_heads = m.num_heads;
  c.num_key_value_heads = m.num_heads;
  c.max_position_embeddings = m.desc.context_length;
  c.q_lora_rank = m.q_lora_rank;
  c.kv_lora_rank = m.kv_lora_rank;
  c.qk_nope_head_dim = m.qk_nope_head_dim;
  c.qk_rope_head_dim = m.qk_rope_head_dim;
  c.v_head_dim = m.head_dim;
  c.n_routed_experts = m.experts;
  c.num_experts_per_tok = m.experts_per_token;
  c.n_shared_experts = m.shared_experts;
  c.first_k_dense_replace = m.dense_layers;
  return c;
}

PlanModel FromRow(const ModelRow& r) {
  PlanModel m;
  m.name = std::string(r.name);
  m.source = std::string(kHf) + std::string(r.source);
  m.num_layers = r.layers;
  m.hidden = r.hidden;
  m.vocab = r.vocab;
  m.num_heads = r.heads;
  m.num_kv_heads = r.mla ? 1 : r.kv_heads;
  m.head_dim = r.head_dim;
  m.mla = r.mla;
  m.q_lora_rank = r.q_lora;
  m.kv_lora_rank = r.kv_lora;
  m.qk_nope_head_dim = r.qk_nope;
  m.qk_rope_head_dim = r.qk_rope;
  m.dense_layers = r.dense_layers;
  m.ffn = r.ffn;
  m.experts = r.experts;
  m.experts_per_token = r.experts_per_token;
  m.shared_experts = r.shared_experts;
  m.expert_ffn = r.expert_ffn;
  m.sliding_window = r.sliding_window;
  m.global_every = r.global_every;
  m.tied_embeddings = r.tied;
  m.desc.architecture = std::string(r.architecture);
  m.desc.vocab_size = r.vocab;
  m.desc.context_length = r.context;
  m.info.architecture = m.desc.architecture;
  m.info.num_attention_heads = r.heads;
  m.info.num_key_value_heads = m.num_kv_heads;
  m.info.hook_name = "plan_layout_rules";
  m.weight_bytes = m.TotalParams() * r.bytes_per_param;
  if (m.mla) {
    const DeepseekV3Config c = DeepseekConfigOf(m);
    m.info.hook = [c](Resolution& res, const ResolveContext&) {
      ResolvingView cfg = res.view();
      return CheckDeepseekLayout(
          c, {.tp = cfg.tp_size(),
              .ep = cfg.ep_size(),
              .dense_tp = cfg.moe_dense_tp_size(),
              .deepep = cfg.moe_a2a_backend() == "deepep",
              .moe_flags = cfg.ep_size() != 1 || cfg.moe_a2a_backend() != "none"});
    };
    m.kv_spec = [c](const EngineConfig&) { return DeepseekKvSpec(c, DataType::kBF16); };
  } else {
    const int heads = r.heads, kv = r.kv_heads, layers = r.layers, dim = r.head_dim;
    m.info.hook = [heads, kv](Resolution& res, const ResolveContext&) {
      ResolvingView cfg = res.view();
      return model::CheckGqaLayout(heads, kv, cfg.tp_size(), cfg.dcp_size());
    };
    // Gemma 3's window layers form their own KV group, as the model declares it.
    const std::vector<KvGroupSpec> groups = Gemma3KvGroups(
        {.num_layers = layers, .window = r.sliding_window, .window_pattern = r.global_every});
    m.kv_spec = [heads, kv, layers, dim, groups](const EngineConfig& c) {
      return KvSpec{.num_layers = layers,
                    .num_kv_heads = model::GqaKvHeadsPerRank(heads, kv, c.tp_size, c.dcp_size),
                    .head_dim_k = dim,
                    .head_dim_v = dim,
                    .v_in_k = false,
                    .dtype = DataType::kBF16,
                    .groups = groups};
    };
  }
  return m;
}

struct HardwareRow {
  std::string_view name;
  std::string_view source;
  std::string_view platform;
  double memory_gib, mem_gbps, flops, link_gbps;
  int domain;
  double net_gbps;
  double mem_eff, flops_eff;
};

// Efficiencies: the H200 anchors measured for this project (docs/plan.md): a bf16 8192^3
// matmul at 792 of 989 TFLOP/s, a read at 4.24 of 4.8 TB/s; the same fractions for the other
// NVIDIA parts, and AMD's published MI300X GEMM and copy rates for that one.
constexpr std::array<HardwareRow, 5> kHardware = {{
    {"h100", "https://www.nvidia.com/en-us/data-center/h100/ (SXM5)", "cuda:sm90", 80, 3350, 989e12,
     450, 8, 50, 0.88, 0.80},
    {"h200", "https://www.nvidia.com/en-us/data-center/h200/ (SXM)", "cuda:sm90", 141, 4800, 989e12,
     450, 8, 50, 0.88, 0.80},
    {"b200", "https://www.nvidia.com/en-us/data-center/hgx/ (HGX B200)", "cuda:sm100", 180, 8000,
     2250e12, 900, 8, 50, 0.88, 0.80},
    {"gb200-nvl72", "https://www.nvidia.com/en-us/data-center/gb200-nvl72/", "cuda:sm100+mnnvl",
     186, 8000, 2500e12, 900, 72, 100, 0.88, 0.80},
    {"mi300x", "https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html", "rocm",
     192, 5300, 1307.4e12, 448, 8, 50, 0.80, 0.55},
}};

}  // namespace

std::vector<std::string> PresetModelNames() {
  std::vector<std::string> names;
  for (const ModelRow& r : kModels) names.emplace_back(r.name);
  return names;
}

Expected<PlanModel> PresetModel(std::string_view name) {
  for (const ModelRow& r : kModels) {
    if (r.name == name) return FromRow(r);
  }
  return CatalogError("CTXPAR-PLAN-001",
                      {{"name", std::string(name)},
                       {"choices", fmt::format("{}", fmt::join(PresetModelNames(), ", "))}});
}

std::vector<std::string> PresetHardwareNames() {
  std::vector<std::string> names;
  for (const HardwareRow& r : kHardware) names.emplace_back(r.name);
  return names;
}

Expected<Hardware> PresetHardware(std::string_view name) {
  for (const HardwareRow& r : kHardware) {
    if (r.name != name) continue;
    Hardware h;
    h.name = std::string(r.name);
    h.source = std::string(r.source);
    CTXPAR_ASSIGN_OR_RETURN(h.platform, ParsePlatform(r.platform));
    h.platform.origin = PlatformOrigin::kFlag;
    h.memory_gib = r.memory_gib;
    h.mem_gbps = r.mem_gbps;
    h.flops = r.flops;
    h.mem_efficiency = r.mem_eff;
    h.flops_efficiency = {{64, r.flops_eff}};
    h.link_gbps = r.link_gbps;
    h.domain_devices = r.domain;
    h.net_gbps = r.net_gbps;
    // Not datasheet figures: the order of a small NCCL / custom all-reduce inside a node, of
    // an IB hop, of a one-sided fabric write, and of a CUDA-graph decode step's host work.
    h.link_latency_us = 8;
    h.net_latency_us = 15;
    h.oneside_latency_us = 3;
    h.step_cost_us = {{1, 300}};
    h.chunked_prefill_size = r.memory_gib > 160 ? 16384 : 8192;
    return h;
  }
  return CatalogError("CTXPAR-PLAN-002",
                      {{"name", std::string(name)},
                       {"choices", fmt::format("{}", fmt::join(PresetHardwareNames(), ", "))}});
}

}  // namespace ctxpar::plan
