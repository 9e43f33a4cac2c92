// The ModelSource of the DeepSeek-V3 architecture, whatever file its weights come from (a HF
// checkpoint here, a deepseek2 GGUF in deepseek_gguf_source.cpp): the sharding plan, the layout
// rules its hook adds to the resolution pipeline, the tensor checks, and the weight loaders.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "ctxpar/error_catalog.h"
#include "models/deepseek.h"
#include "models/registry.h"

namespace ctxpar {

namespace {

std::string Int(int64_t v) { return std::to_string(v); }

Status Shape(const DeepseekV3Config& c, std::string_view what, int value, std::string rule) {
  return CatalogError("CTXPAR-MODEL-006", {{"what", std::string(what)},
                                           {"architecture", c.architecture},
                                           {"value", Int(value)},
                                           {"rule", std::move(rule)}});
}

bool HasMoeLayers(const DeepseekV3Config& c) {
  return c.first_k_dense_replace < c.num_hidden_layers;
}

// A HF checkpoint's tensors, read in place (bf16, f16, f32) and widened to fp32.
class SafetensorsWeights final : public DeepseekWeights {
 public:
  explicit SafetensorsWeights(std::shared_ptr<const SafetensorsCheckpoint> ckpt)
      : ckpt_(std::move(ckpt)) {}

  const std::string& path() const override { return ckpt_->dir(); }

  Expected<std::vector<int64_t>> Shape(const std::string& name) const override {
    CTXPAR_ASSIGN_OR_RETURN(const SafetensorsTensor* t, ckpt_->Find(name));
    return t->shape;
  }

  Status Read(const std::string& name, int64_t first, int64_t count, float* out) const override {
    CTXPAR_ASSIGN_OR_RETURN(const SafetensorsTensor* t, ckpt_->Find(name));
    return CopyElements(*t, first, count, out);
  }

  Status ShapeError(const std::string& name, const std::vector<int64_t>* have,
                    const std::vector<int64_t>& want) const override {
    const std::string detail =
        have == nullptr ? fmt::format("it has no tensor '{}' of shape {}", name, Dims(want))
                        : fmt::format("tensor '{}' has shape {}, where config.json makes it {}",
                                      name, Dims(*have), Dims(want));
    return CatalogError("CTXPAR-ST-005", {{"dir", PyRepr(ckpt_->dir())}, {"detail", detail}});
  }

 private:
  static std::string Dims(const std::vector<int64_t>& s) {
    return fmt::format("[{}]", fmt::join(s, ", "));
  }

  std::shared_ptr<const SafetensorsCheckpoint> ckpt_;
};

class DeepseekSource final : public ModelSource {
 public:
  DeepseekSource(std::string path, std::shared_ptr<const DeepseekWeights> weights,
                 DeepseekV3Config c, std::optional<Tokenizer> tokenizer)
      : path_(std::move(path)),
        weights_(std::move(weights)),
        c_(std::move(c)),
        tokenizer_(std::move(tokenizer)) {
    desc_.architecture = c_.architecture;
    desc_.vocab_size = c_.vocab_size;
    desc_.context_length = c_.max_position_embeddings;
    desc_.eos_token_ids = c_.eos_token_ids;
    info_.architecture = c_.architecture;
    info_.num_attention_heads = c_.num_attention_heads;
    info_.num_key_value_heads = 1;  // MLA: the one latent head
    info_.hook_name = std::string(kDeepseekHook);
    info_.hook = [c = c_](Resolution& r, const ResolveContext&) {
      return ApplyDeepseekRules(c, r);
    };
    shape_ = {.num_layers = c_.num_hidden_layers,
              .hidden = c_.hidden_size,
              .vocab = c_.vocab_size,
              .num_heads = c_.num_attention_heads,
              .num_kv_heads = 1,
              .head_dim = c_.v_head_dim,
              .mla = true,
              .q_lora_rank = c_.q_lora_rank,
              .kv_lora_rank = c_.kv_lora_rank,
              .qk_nope_head_dim = c_.qk_nope_head_dim,
              .qk_rope_head_dim = c_.qk_rope_head_dim,
              .dense_layers = c_.first_k_dense_replace,
              .ffn = c_.intermediate_size,
              .experts = c_.n_routed_experts,
              .experts_per_token = c_.num_experts_per_tok,
              .shared_experts = c_.n_shared_experts,
              .expert_ffn = c_.moe_intermediate_size,
              .tied_embeddings = c_.tie_word_embeddings};
  }

  const std::string& path() const override { return path_; }
  const ModelInfo& info() const override { return info_; }
  const ModelDesc& desc() const override { return desc_; }
  const ModelShape& shape() const override { return shape_; }
  const Tokenizer* tokenizer() const override {
    return tokenizer_.has_value() ? &*tokenizer_ : nullptr;
  }

  // fp32: ApplyDeepseekRules says why.
  KvSpec KvSpecFor(const EngineConfig&) const override {
    return DeepseekKvSpec(c_, DataType::kF32);
  }

  Expected<std::unique_ptr<Model>> CreateModel(const EngineConfig& config, Communicator& world,
                                               compute::Compute& compute) const override {
    return CreateDeepseekModel(weights_, c_, desc_, config, world, compute);
  }

 private:
  std::string path_;
  std::shared_ptr<const DeepseekWeights> weights_;
  DeepseekV3Config c_;
  std::optional<Tokenizer> tokenizer_;
  ModelDesc desc_;
  ModelInfo info_;
  ModelShape shape_;
};

}  // namespace

std::shared_ptr<const DeepseekWeights> SafetensorsDeepseekWeights(
    std::shared_ptr<const SafetensorsCheckpoint> ckpt) {
  return std::make_shared<const SafetensorsWeights>(std::move(ckpt));
}

std::vector<DeepseekTensor> DeepseekTensors(const DeepseekV3Config& c) {
  const int64_t d = c.hidden_size, H = c.num_attention_heads;
  std::vector<DeepseekTensor> want = {{"model.embed_tokens.weight", {c.vocab_size, d}},
                                      {"model.norm.weight", {d}}};
  if (!c.tie_word_embeddings) want.push_back({"lm_head.weight", {c.vocab_size, d}});
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    const std::string a = p + "self_attn.";
    std::vector<DeepseekTensor> layer = {{p + "input_layernorm.weight", {d}},
                                         {p + "post_attention_layernorm.weight", {d}}};
    if (c.q_lora_rank == 0) {
      layer.push_back({a + "q_proj.weight", {H * c.qk_head_dim(), d}});
    } else {
      layer.insert(layer.end(), {{a + "q_a_proj.weight", {c.q_lora_rank, d}},
                                 {a + "q_a_layernorm.weight", {c.q_lora_rank}},
                                 {a + "q_b_proj.weight", {H * c.qk_head_dim(), c.q_lora_rank}}});
    }
    layer.insert(
        layer.end(),
        {{a + "kv_a_proj_with_mqa.weight", {c.kv_lora_rank + c.qk_rope_head_dim, d}},
         {a + "kv_a_layernorm.weight", {c.kv_lora_rank}},
         {a + "kv_b_proj.weight", {H * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank}},
         {a + "o_proj.weight", {d, H * c.v_head_dim}}});
    want.insert(want.end(), layer.begin(), layer.end());
    auto mlp = [&](const std::string& m, int64_t inter) {
      want.push_back({m + "gate_proj.weight", {inter, d}});
      want.push_back({m + "up_proj.weight", {inter, d}});
      want.push_back({m + "down_proj.weight", {d, inter}});
    };
    if (!c.is_moe_layer(l)) {
      mlp(p + "mlp.", c.intermediate_size);
      continue;
    }
    want.push_back({p + "mlp.gate.weight", {c.n_routed_experts, d}});
    if (!c.softmax_router) {
      want.push_back({p + "mlp.gate.e_score_correction_bias", {c.n_routed_experts}});
    }
    for (int e = 0; e < c.n_routed_experts; ++e) {
      mlp(fmt::format("{}mlp.experts.{}.", p, e), c.moe_intermediate_size);
    }
    if (c.n_shared_experts > 0) {
      mlp(p + "mlp.shared_experts.", int64_t{c.moe_intermediate_size} * c.n_shared_experts);
    }
  }
  return want;
}

Status CheckDeepseekTensors(const DeepseekWeights& w, const DeepseekV3Config& c) {
  for (const DeepseekTensor& t : DeepseekTensors(c)) {
    const Expected<std::vector<int64_t>> have = w.Shape(t.name);
    if (!have.ok()) return w.ShapeError(t.name, nullptr, t.shape);
    if (*have != t.shape) return w.ShapeError(t.name, &*have, t.shape);
  }
  return Status::Ok();
}

std::unique_ptr<ModelSource> NewDeepseekSource(std::string path,
                                               std::shared_ptr<const DeepseekWeights> weights,
                                               DeepseekV3Config c,
                                               std::optional<Tokenizer> tokenizer) {
  return std::make_unique<DeepseekSource>(std::move(path), std::move(weights), std::move(c),
                                          std::move(tokenizer));
}

KvSpec DeepseekKvSpec(const DeepseekV3Config& c, DataType dtype) {
  return {.num_layers = c.num_hidden_layers,
          .num_kv_heads = 1,
          .head_dim_k = c.kv_lora_rank + c.qk_rope_head_dim,
          .head_dim_v = c.kv_lora_rank,
          .v_in_k = true,
          .dtype = dtype};
}

DeepseekShard MakeDeepseekShard(const DeepseekV3Config& c, const EngineConfig& config,
                                int tp_rank) {
  DeepseekShard s;
  const int H = c.num_attention_heads, tp = config.tp_size, n = config.dcp_size;
  s.tp_size = tp;
  s.tp_rank = tp_rank;
  s.dcp_size = n;
  s.dcp_rank = tp_rank % n;
  s.heads = H / tp;
  s.head_first = tp_rank * s.heads;
  s.q_heads = config.dcp_replicate_q_proj ? s.heads * n : s.heads;
  s.q_first = config.dcp_replicate_q_proj ? tp_rank / n * s.heads * n : s.head_first;
  s.cp_size = config.enable_prefill_cp ? config.attn_cp_size : 1;
  s.attn_tp = tp / s.cp_size;
  s.attn_tp_rank = tp_rank % s.attn_tp;
  s.cp_rank = tp_rank / s.attn_tp;
  s.prefill_heads = H / s.attn_tp;
  s.prefill_first = s.attn_tp_rank * s.prefill_heads;
  s.cp_strategy = config.cp_strategy;
  s.span_first = std::min({s.head_first, s.q_first, s.prefill_first});
  s.span_heads =
      std::max({s.head_first + s.heads, s.q_first + s.q_heads, s.prefill_first + s.prefill_heads}) -
      s.span_first;
  s.dense_replicated = config.moe_dense_tp_size == 1 || tp == 1;
  s.dense_count = s.dense_replicated ? c.intermediate_size : c.intermediate_size / tp;
  s.dense_first = s.dense_replicated ? 0 : tp_rank * s.dense_count;
  s.deepep = config.moe_a2a_backend == MoeA2aBackend::kDeepep;
  const int shared = c.moe_intermediate_size * c.n_shared_experts;
  s.shared_count = s.deepep ? shared : shared / tp;
  s.shared_first = s.deepep ? 0 : tp_rank * s.shared_count;
  s.ep_size = config.ep_size;
  const int moe_tp = tp / s.ep_size;
  s.expert_count = c.n_routed_experts / s.ep_size;
  s.expert_first = tp_rank / moe_tp * s.expert_count;
  s.moe_count = c.moe_intermediate_size / moe_tp;
  s.moe_first = tp_rank % moe_tp * s.moe_count;
  return s;
}

Status ApplyDeepseekRules(const DeepseekV3Config& c, Resolution& r) {
  ResolvingView cfg = r.view();
  if (cfg.moe_a2a_backend() == "deepep" && cfg.ep_size() != cfg.tp_size()) {
    CTXPAR_RETURN_IF_ERROR(r.Declare(kDeepseekHook, {{"ep_size", int64_t{cfg.tp_size()}}}));
  }
  if (cfg.attn_cp_size() != 1 && !cfg.enable_prefill_cp()) {
    return CatalogError("CTXPAR-DSV3-004", {{"attn_cp_size", Int(cfg.attn_cp_size())}});
  }
  // The latent cache stays fp32: prefill attends over the chunk's own latents as computed, so a
  // rounded cache (bf16 or fp8; fp4: CTXPAR-KV-003) would make a chunked prompt differ from a
  // whole one.
  if (const std::string dtype = cfg.kv_cache_dtype();
      dtype == "bf16" || dtype == "bfloat16" || dtype == "fp8_e4m3" || dtype == "fp8_e5m2") {
    return CatalogError("CTXPAR-MODEL-005",
                        {{"flag", "--kv-cache-dtype " + dtype},
                         {"feature", "the Llama models' KV cache"},
                         {"architecture", c.architecture + " (its latent cache is fp32)"}});
  }
  // The network computes in fp32 from fp32 weights (a GGUF's dequantized at load): the int8
  // activations that --llama-cpp-numerics and --dtype auto ask for are not implemented for it.
  if (cfg.enable_deterministic_inference()) {
    return CatalogError(
        "CTXPAR-MODEL-005",
        {{"flag", "--enable-deterministic-inference"},
         {"feature", "the exact merge of fixed chunks"},
         {"architecture", c.architecture + " (its prefill attention is not chunked)"}});
  }
  if (cfg.llama_cpp_numerics() || cfg.dtype() == "auto") {
    return CatalogError(
        "CTXPAR-MODEL-005",
        {{"flag", cfg.llama_cpp_numerics() ? "--llama-cpp-numerics" : "--dtype auto"},
         {"feature", "int8 activations in the matmuls"},
         {"architecture", c.architecture + " (its matmuls are fp32)"}});
  }
  return CheckDeepseekLayout(c,
                             {.tp = cfg.tp_size(),
                              .ep = cfg.ep_size(),
                              .dense_tp = cfg.moe_dense_tp_size(),
                              .deepep = cfg.moe_a2a_backend() == "deepep",
                              .moe_flags = cfg.ep_size() != 1 || cfg.moe_a2a_backend() != "none"});
}

Status CheckDeepseekLayout(const DeepseekV3Config& c, const DeepseekLayoutArgs& a) {
  const int tp = a.tp, ep = a.ep;
  if (c.num_attention_heads % tp != 0) {
    return CatalogError("CTXPAR-MODEL-002",
                        {{"num_heads", Int(c.num_attention_heads)}, {"tp_size", Int(tp)}});
  }
  if (!HasMoeLayers(c) && a.moe_flags) {
    return CatalogError(
        "CTXPAR-MODEL-005",
        {{"flag", ep != 1 ? "--ep-size" : "--moe-a2a-backend"},
         {"feature", "mixture-of-experts layers"},
         {"architecture", c.architecture + " (first_k_dense_replace covers every layer)"}});
  }
  if (tp % ep != 0) {
    return CatalogError("CTXPAR-DSV3-002", {{"tp_size", Int(tp)}, {"ep_size", Int(ep)}});
  }
  if (c.n_routed_experts % ep != 0) {
    return CatalogError("CTXPAR-DSV3-001",
                        {{"experts", Int(c.n_routed_experts)}, {"ep_size", Int(ep)}});
  }
  if (a.dense_tp && *a.dense_tp != 1) return CatalogError("CTXPAR-DSV3-003", {});
  if (!a.dense_tp && c.intermediate_size % tp != 0) {
    return Shape(c, "the dense MLP width (intermediate_size)", c.intermediate_size,
                 fmt::format("it must be divisible by tp_size ({})", tp));
  }
  if (c.moe_intermediate_size % (tp / ep) != 0) {
    return Shape(c, "the expert width (moe_intermediate_size)", c.moe_intermediate_size,
                 fmt::format("it must be divisible by tp_size / ep_size ({})", tp / ep));
  }
  const int shared = c.moe_intermediate_size * c.n_shared_experts;
  if (!a.deepep && shared % tp != 0) {
    return Shape(c, "the shared experts' width (moe_intermediate_size * n_shared_experts)", shared,
                 fmt::format("it must be divisible by tp_size ({})", tp));
  }
  if (a.deepep && ep != tp) {
    return InvalidArgument(fmt::format(
        "--moe-a2a-backend deepep places every expert on one rank: ep_size ({}) must equal "
        "tp_size ({})",
        ep, tp));
  }
  return Status::Ok();
}

Expected<std::unique_ptr<ModelSource>> OpenDeepseekSource(const std::string& dir) {
  CTXPAR_ASSIGN_OR_RETURN(DeepseekV3Config c, ReadDeepseekV3Config(dir));
  CTXPAR_ASSIGN_OR_RETURN(SafetensorsCheckpoint opened, SafetensorsCheckpoint::Open(dir));
  std::shared_ptr<const DeepseekWeights> weights =
      SafetensorsDeepseekWeights(std::make_shared<const SafetensorsCheckpoint>(std::move(opened)));
  CTXPAR_RETURN_IF_ERROR(CheckDeepseekTensors(*weights, c));
  return NewDeepseekSource(dir, std::move(weights), std::move(c), std::nullopt);
}

namespace model {

namespace {

Status CheckShape(const DeepseekWeights& w, const std::string& name,
                  const std::vector<int64_t>& want) {
  CTXPAR_ASSIGN_OR_RETURN(const std::vector<int64_t> have, w.Shape(name));
  if (have != want) {
    return InvalidArgument(
        fmt::format("tensor '{}' must have shape [{}]", name, fmt::join(want, ", ")));
  }
  return Status::Ok();
}

}  // namespace

Expected<std::vector<float>> LoadRows(const DeepseekWeights& w, const std::string& name,
                                      int64_t rows, int64_t cols, int64_t first, int64_t count) {
  CTXPAR_RETURN_IF_ERROR(CheckShape(w, name, {rows, cols}));
  std::vector<float> out(count * cols);
  CTXPAR_RETURN_IF_ERROR(w.Read(name, first * cols, count * cols, out.data()));
  return out;
}

Expected<std::vector<float>> LoadCols(const DeepseekWeights& w, const std::string& name,
                                      int64_t rows, int64_t cols, int64_t first, int64_t count) {
  CTXPAR_RETURN_IF_ERROR(CheckShape(w, name, {rows, cols}));
  std::vector<float> out(rows * count);
  for (int64_t r = 0; r < rows; ++r) {
    CTXPAR_RETURN_IF_ERROR(w.Read(name, r * cols + first, count, out.data() + r * count));
  }
  return out;
}

Expected<std::vector<float>> LoadVector(const DeepseekWeights& w, const std::string& name,
                                        int64_t size) {
  CTXPAR_RETURN_IF_ERROR(CheckShape(w, name, {size}));
  std::vector<float> out(size);
  CTXPAR_RETURN_IF_ERROR(w.Read(name, 0, size, out.data()));
  return out;
}

void GatherRows(const float* src, int dim, const std::vector<int32_t>& rows,
                std::vector<float>& out) {
  out.resize(rows.size() * dim);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    std::copy_n(src + std::size_t(rows[i]) * dim, dim, out.data() + i * dim);
  }
}

}  // namespace model
}  // namespace ctxpar
