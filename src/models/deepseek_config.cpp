// The DeepSeek-V3 config.json reader: what the network uses, each value checked by name.
#include "models/deepseek_config.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <variant>

#include "ctxpar/error_catalog.h"
#include "ctxpar/hf_config.h"

namespace ctxpar {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kArchitectures[] = {"DeepseekV3ForCausalLM", "DeepseekV4ForCausalLM"};

// Typed reads of one config object; every failure names the key.
class Reader {
 public:
  Reader(const Json& json, const std::string& origin) : json_(json), origin_(origin) {}

  Status Unreadable(std::string_view key, std::string_view what) const {
    return CatalogError("CTXPAR-HF-001",
                        {{"path", origin_}, {"problem", fmt::format("{} {}", key, what)}});
  }
  Status Unsupported(std::string_view key, const Json& value, std::string_view reason) const {
    return CatalogError("CTXPAR-HF-003", {{"path", origin_},
                                          {"key", std::string(key)},
                                          {"value", value.dump()},
                                          {"reason", std::string(reason)}});
  }
  Status Inconsistent(std::string_view key, const Json& value, std::string_view rule) const {
    return CatalogError("CTXPAR-HF-004", {{"path", origin_},
                                          {"key", std::string(key)},
                                          {"value", value.dump()},
                                          {"rule", std::string(rule)}});
  }

  bool Contains(std::string_view key) const { return json_.contains(key); }
  // Present and not null.
  bool Has(std::string_view key) const {
    return json_.contains(key) && !json_.at(std::string(key)).is_null();
  }
  const Json& At(std::string_view key) const { return json_.at(std::string(key)); }

  // An integer in [min_value, 2^30]; absent: `fallback` when given, else an error.
  Expected<int> Int(std::string_view key, int min_value, std::optional<int> fallback = {}) const {
    if (!json_.contains(key)) {
      if (fallback) return *fallback;
      return Unreadable(key, "is missing");
    }
    const Json& v = At(key);
    if (!v.is_number_integer()) return Unreadable(key, "is not an integer");
    const int64_t x = v.get<int64_t>();
    if (x < min_value || x > (int64_t{1} << 30)) {
      return Inconsistent(key, v, fmt::format("it must be in [{}, 2^30]", min_value));
    }
    return static_cast<int>(x);
  }
  Expected<double> Number(std::string_view key, std::optional<double> fallback = {}) const {
    if (!json_.contains(key)) {
      if (fallback) return *fallback;
      return Unreadable(key, "is missing");
    }
    if (!At(key).is_number()) return Unreadable(key, "is not a number");
    return At(key).get<double>();
  }
  Expected<bool> Bool(std::string_view key, bool fallback) const {
    if (!json_.contains(key)) return fallback;
    if (!At(key).is_boolean()) return Unreadable(key, "is not a boolean");
    return At(key).get<bool>();
  }
  // A string key that may only hold `wanted` (absent is `wanted`).
  Status Only(std::string_view key, std::string_view wanted, std::string_view reason) const {
    if (!Has(key)) return Status::Ok();
    if (!At(key).is_string()) return Unreadable(key, "is not a string");
    if (At(key).get<std::string>() != wanted) return Unsupported(key, At(key), reason);
    return Status::Ok();
  }

 private:
  const Json& json_;
  const std::string& origin_;
};

Expected<std::string> Architecture(const Reader& r, const std::string& origin) {
  if (!r.Has("architectures")) return r.Unreadable("architectures", "is missing");
  const Json& a = r.At("architectures");
  if (!a.is_array() || a.size() != 1 || !a[0].is_string()) {
    return r.Unreadable("architectures", "is not a list of one string");
  }
  const std::string arch = a[0].get<std::string>();
  for (std::string_view known : kArchitectures) {
    if (arch == known) return arch;
  }
  return CatalogError("CTXPAR-HF-002", {{"path", origin}, {"architecture", arch}});
}

// RoPE: transformers 5's rope_parameters, or the older rope_theta + rope_scaling; the default
// rotation or YaRN with transformers' parameters.
Status ReadRope(const Reader& r, DeepseekV3Config* c) {
  CTXPAR_ASSIGN_OR_RETURN(c->rope_theta, r.Number("rope_theta", 10000.0));
  for (std::string_view key : {"rope_parameters", "rope_scaling"}) {
    if (!r.Has(key)) continue;
    const Json& rope = r.At(key);
    if (!rope.is_object()) return r.Unreadable(key, "is not an object");
    std::string type = "default";
    for (const char* name : {"rope_type", "type"}) {
      if (!rope.contains(name) || rope.at(name).is_null()) continue;
      if (!rope.at(name).is_string()) {
        return r.Unreadable(fmt::format("{}.{}", key, name), "is not a string");
      }
      type = rope.at(name).get<std::string>();
    }
    if (type != "default" && type != "yarn") {
      return r.Unsupported(fmt::format("{}.rope_type", key), type,
                           "ctxpar runs the default RoPE and YaRN");
    }
    DeepseekV3Config::Yarn y;
    for (const auto& [name, value] : rope.items()) {
      const std::string full = fmt::format("{}.{}", key, name);
      if (name == "rope_type" || name == "type") continue;
      const bool yarn_key = name == "factor" || name == "original_max_position_embeddings" ||
                            name == "beta_fast" || name == "beta_slow" || name == "mscale" ||
                            name == "mscale_all_dim" || name == "attention_factor" ||
                            name == "truncate";
      if (name != "rope_theta" && !(type == "yarn" && yarn_key)) {
        return r.Unsupported(full, value, fmt::format("the {} RoPE takes no such parameter", type));
      }
      if (name == "truncate") {
        if (!value.is_boolean()) return r.Unreadable(full, "is not a boolean");
        y.truncate = value.get<bool>();
        continue;
      }
      if (!value.is_number()) return r.Unreadable(full, "is not a number");
      const double v = value.get<double>();
      if (name == "rope_theta") c->rope_theta = v;
      if (name == "factor") y.factor = v;
      if (name == "beta_fast") y.beta_fast = v;
      if (name == "beta_slow") y.beta_slow = v;
      if (name == "mscale") y.mscale = v;
      if (name == "mscale_all_dim") y.mscale_all_dim = v;
      if (name == "attention_factor") y.attention_factor = v;
      if (name == "original_max_position_embeddings") {
        if (!value.is_number_integer() || v < 1 || v > (1 << 30)) {
          return r.Inconsistent(full, value, "it must be an integer in [1, 2^30]");
        }
        y.original_max_position_embeddings = static_cast<int>(v);
      }
    }
    if (type != "yarn") continue;
    if (y.original_max_position_embeddings == 0) {
      return r.Unreadable(fmt::format("{}.original_max_position_embeddings", key), "is missing");
    }
    if (!(y.factor >= 1.0) || !(y.beta_fast > 0.0) || !(y.beta_slow > 0.0) || !(y.mscale >= 0.0) ||
        !(y.mscale_all_dim >= 0.0) ||
        (y.attention_factor.has_value() && !(*y.attention_factor > 0.0))) {
      return r.Inconsistent(key, rope,
                            "YaRN needs factor >= 1, positive betas and attention_factor, and "
                            "mscales >= 0");
    }
    c->yarn = y;
  }
  if (!(c->rope_theta > 0.0)) {
    return r.Inconsistent("rope_theta", c->rope_theta, "it must be positive");
  }
  return Status::Ok();
}

Status ReadDtype(const Reader& r, DeepseekV3Config* c) {
  for (std::string_view key : {"dtype", "torch_dtype"}) {
    if (!r.Has(key)) continue;
    const Json& v = r.At(key);
    const std::string name = v.is_string() ? v.get<std::string>() : "";
    if (name == "bfloat16") {
      c->dtype = DataType::kBF16;
    } else if (name == "float16") {
      c->dtype = DataType::kF16;
    } else if (name == "float32") {
      c->dtype = DataType::kF32;
    } else {
      return r.Unsupported(key, v, "ctxpar runs bfloat16, float16 and float32 checkpoints");
    }
    return Status::Ok();
  }
  return Status::Ok();
}

Status ReadEos(const Reader& r, DeepseekV3Config* c) {
  if (!r.Has("eos_token_id")) return Status::Ok();
  const Json& e = r.At("eos_token_id");
  const Json list = e.is_array() ? e : Json::array({e});
  for (const Json& id : list) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= c->vocab_size) {
      return r.Inconsistent(
          "eos_token_id", e,
          fmt::format("token ids must be in [0, vocab_size = {})", c->vocab_size));
    }
    c->eos_token_ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return Status::Ok();
}

Status CheckSupported(const Reader& r) {
  CTXPAR_RETURN_IF_ERROR(r.Only("hidden_act", "silu", "the MLPs are SwiGLU (silu)"));
  CTXPAR_RETURN_IF_ERROR(
      r.Only("scoring_func", "sigmoid", "the DeepSeek-V3 router scores experts with a sigmoid"));
  CTXPAR_RETURN_IF_ERROR(r.Only("topk_method", "noaux_tc",
                                "the DeepSeek-V3 router picks experts by noaux_tc (group-limited "
                                "top-k with the correction bias)"));
  CTXPAR_ASSIGN_OR_RETURN(bool bias, r.Bool("attention_bias", false));
  if (bias) return r.Unsupported("attention_bias", true, "the projections have no bias");
  CTXPAR_ASSIGN_OR_RETURN(bool interleave, r.Bool("rope_interleave", true));
  if (!interleave) {
    return r.Unsupported("rope_interleave", false,
                         "ctxpar rotates the rope part in adjacent pairs (interleaved) only");
  }
  CTXPAR_ASSIGN_OR_RETURN(int freq, r.Int("moe_layer_freq", 1, 1));
  if (freq != 1)
    return r.Unsupported("moe_layer_freq", freq, "every layer after the dense ones is MoE");
  if (r.Has("quantization_config")) {
    return r.Unsupported("quantization_config", r.At("quantization_config"),
                         "ctxpar reads F32, BF16 and F16 weights, not quantized ones");
  }
  if (r.Contains("q_lora_rank") && !r.Has("q_lora_rank")) {
    return r.Unsupported("q_lora_rank", nullptr,
                         "ctxpar runs MLA with the q LoRA (q_a_proj, q_b_proj)");
  }
  return Status::Ok();
}

// FindDeepseekConfigFault's rules, then those between values that only config.json states.
Status CheckConsistent(const Reader& r, const DeepseekV3Config& c) {
  if (const std::optional<DeepseekConfigFault> fault = FindDeepseekConfigFault(c)) {
    const Json value = std::visit([](auto v) { return Json(v); }, fault->value);
    return fault->unsupported ? r.Unsupported(fault->key, value, fault->rule)
                              : r.Inconsistent(fault->key, value, fault->rule);
  }
  if (r.Has("qk_head_dim") && r.At("qk_head_dim") != c.qk_head_dim()) {
    return r.Inconsistent(
        "qk_head_dim", r.At("qk_head_dim"),
        fmt::format("it must be qk_nope_head_dim + qk_rope_head_dim = {}", c.qk_head_dim()));
  }
  if (r.Has("head_dim") && r.At("head_dim") != c.qk_rope_head_dim) {
    return r.Inconsistent(
        "head_dim", r.At("head_dim"),
        fmt::format("DeepSeek-V3 configs set it to qk_rope_head_dim = {}", c.qk_rope_head_dim));
  }
  return Status::Ok();
}

}  // namespace

std::optional<DeepseekConfigFault> FindDeepseekConfigFault(const DeepseekV3Config& c) {
  auto fault = [](std::string key, std::variant<int64_t, double> value, std::string rule,
                  bool unsupported = false) {
    return DeepseekConfigFault{std::move(key), value, std::move(rule), unsupported};
  };
  if (c.qk_rope_head_dim % 2 != 0) {
    return fault("qk_rope_head_dim", c.qk_rope_head_dim, "RoPE rotates pairs: it must be even");
  }
  const int latent = c.kv_lora_rank + c.qk_rope_head_dim;
  if (c.kv_lora_rank % 16 != 0 || latent % 16 != 0 || latent > 1024 || c.qk_head_dim() % 16 != 0 ||
      c.v_head_dim % 16 != 0 || c.v_head_dim > 1024 || c.qk_head_dim() > 1024) {
    return fault(
        "kv_lora_rank", c.kv_lora_rank,
        fmt::format("the attention kernels take head widths that are multiples of 16 up to 1024: "
                    "kv_lora_rank ({}), kv_lora_rank + qk_rope_head_dim ({}), qk_nope_head_dim + "
                    "qk_rope_head_dim ({}) and v_head_dim ({})",
                    c.kv_lora_rank, latent, c.qk_head_dim(), c.v_head_dim),
        true);
  }
  if (c.n_routed_experts % c.n_group != 0 || c.n_routed_experts / c.n_group < 2) {
    return fault("n_group", c.n_group,
                 fmt::format("it must divide n_routed_experts ({}) into groups of at least 2 "
                             "experts (a group scores by its top 2)",
                             c.n_routed_experts));
  }
  if (c.topk_group > c.n_group) {
    return fault("topk_group", c.topk_group,
                 fmt::format("it must be at most n_group ({})", c.n_group));
  }
  const int reachable = c.topk_group * (c.n_routed_experts / c.n_group);
  if (c.num_experts_per_tok > reachable) {
    return fault(
        "num_experts_per_tok", c.num_experts_per_tok,
        fmt::format("topk_group ({}) groups hold only {} experts", c.topk_group, reachable));
  }
  if (c.first_k_dense_replace > c.num_hidden_layers) {
    return fault("first_k_dense_replace", c.first_k_dense_replace,
                 fmt::format("it must be at most num_hidden_layers ({})", c.num_hidden_layers));
  }
  if (!(c.routed_scaling_factor > 0.0)) {
    return fault("routed_scaling_factor", c.routed_scaling_factor, "it must be positive");
  }
  if (!(c.rms_norm_eps > 0.0)) return fault("rms_norm_eps", c.rms_norm_eps, "it must be positive");
  return std::nullopt;
}

Expected<DeepseekV3Config> ParseDeepseekV3Config(std::string_view json_text,
                                                 const std::string& origin) {
  const Json json = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return CatalogError("CTXPAR-HF-001",
                        {{"path", origin}, {"problem", "the text is not one JSON object"}});
  }
  const Reader r(json, origin);
  DeepseekV3Config c;
  CTXPAR_ASSIGN_OR_RETURN(c.architecture, Architecture(r, origin));
  CTXPAR_RETURN_IF_ERROR(CheckSupported(r));
  CTXPAR_ASSIGN_OR_RETURN(c.vocab_size, r.Int("vocab_size", 1));
  CTXPAR_ASSIGN_OR_RETURN(c.hidden_size, r.Int("hidden_size", 1));
  CTXPAR_ASSIGN_OR_RETURN(c.intermediate_size, r.Int("intermediate_size", 1));
  CTXPAR_ASSIGN_OR_RETURN(c.moe_intermediate_size, r.Int("moe_intermediate_size", 1));
  CTXPAR_ASSIGN_OR_RETURN(c.num_hidden_layers, r.Int("num_hidden_layers", 1));
  CTXPAR_ASSIGN_OR_RETURN(c.num_attention_heads, r.Int("num_attention_heads", 1));
  CTXPAR_ASSIGN_OR_RETURN(c.num_key_value_heads,
                          r.Int("num_key_value_heads", 1, c.num_attention_heads));
  CTXPAR_ASSIGN_OR_RETURN(c.max_position_embeddings, r.Int("max_position_embeddings", 1, 4096));
  CTXPAR_ASSIGN_OR_RETURN(c.q_lora_rank, r.Int("q_lora_rank", 1));
  CTXPAR_ASSIGN_OR_RETURN(c.kv_lora_rank, r.Int("kv_lora_rank", 1));
  CTXPAR_ASSIGN_OR_RETURN(c.qk_nope_head_dim, r.Int("qk_nope_head_dim", 1));
  CTXPAR_ASSIGN_OR_RETURN(c.qk_rope_head_dim, r.Int("qk_rope_head_dim", 2));
  CTXPAR_ASSIGN_OR_RETURN(c.v_head_dim, r.Int("v_head_dim", 1));
  CTXPAR_ASSIGN_OR_RETURN(c.rms_norm_eps, r.Number("rms_norm_eps", 1e-6));
  CTXPAR_RETURN_IF_ERROR(ReadRope(r, &c));
  CTXPAR_ASSIGN_OR_RETURN(c.n_routed_experts, r.Int("n_routed_experts", 1));
  CTXPAR_ASSIGN_OR_RETURN(c.num_experts_per_tok, r.Int("num_experts_per_tok", 1));
  CTXPAR_ASSIGN_OR_RETURN(c.n_shared_experts, r.Int("n_shared_experts", 0));
  CTXPAR_ASSIGN_OR_RETURN(c.n_group, r.Int("n_group", 1));
  CTXPAR_ASSIGN_OR_RETURN(c.topk_group, r.Int("topk_group", 1));
  CTXPAR_ASSIGN_OR_RETURN(c.first_k_dense_replace, r.Int("first_k_dense_replace", 0));
  CTXPAR_ASSIGN_OR_RETURN(c.routed_scaling_factor, r.Number("routed_scaling_factor"));
  if (!r.Has("norm_topk_prob")) return r.Unreadable("norm_topk_prob", "is missing");
  CTXPAR_ASSIGN_OR_RETURN(c.norm_topk_prob, r.Bool("norm_topk_prob", false));
  CTXPAR_ASSIGN_OR_RETURN(c.tie_word_embeddings, r.Bool("tie_word_embeddings", false));
  CTXPAR_RETURN_IF_ERROR(ReadEos(r, &c));
  CTXPAR_RETURN_IF_ERROR(ReadDtype(r, &c));
  CTXPAR_RETURN_IF_ERROR(CheckConsistent(r, c));
  return c;
}

namespace {}  // namespace

Expected<DeepseekV3Config> ReadDeepseekV3Config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  CTXPAR_ASSIGN_OR_RETURN(std::string text, ReadHfConfigText(path));
  return ParseDeepseekV3Config(text, path);
}

}  // namespace ctxpar
