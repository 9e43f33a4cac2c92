// The GGUF ModelSource of the Llama family (llama.h's LlamaVariant): hyperparameters, the layout
// rules that the model hook adds to the resolution pipeline (layers/attention_shard.h), and the
// factory.
#include <fmt/format.h>

#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "ctxpar/gguf_hparams.h"
#include "models/gguf_dense_source.h"
#include "models/layers/gguf_weights.h"
#include "models/llama.h"
#include "models/registry.h"

namespace ctxpar {

namespace {

class LlamaSource final : public GgufDenseSource<LlamaHparams> {
 public:
  LlamaSource(std::string path, std::shared_ptr<const GgufFile> file, LlamaHparams hp,
              Tokenizer tokenizer)
      : GgufDenseSource(hp.variant.hf_name, fmt::format("{}_layout_rules", hp.variant.gguf_name),
                        std::move(path), std::move(file), std::move(hp), std::move(tokenizer)) {
    SetDenseLayoutHook(hp_.variant.moe);
  }

  Expected<std::unique_ptr<Model>> CreateModel(const EngineConfig& config, Communicator& world,
                                               compute::Compute& compute) const override {
    const LlamaModelFactory create =
        hp_.variant.create != nullptr ? hp_.variant.create : CreateLlamaModel;
    return create(file_, hp_, desc_, config, world, compute);
  }
};

// The keys under "<arch>." that ReadLlamaHparams reads; rope.scaling.original_context_length
// changes no output of linear scaling (llama.cpp and transformers use it for YaRN only).
constexpr std::string_view kReadKeys[] = {"embedding_length",
                                          "block_count",
                                          "attention.head_count",
                                          "attention.head_count_kv",
                                          "feed_forward_length",
                                          "context_length",
                                          "attention.key_length",
                                          "attention.value_length",
                                          "rope.dimension_count",
                                          "rope.freq_base",
                                          "attention.layer_norm_rms_epsilon",
                                          "vocab_size",
                                          "rope.scaling.type",
                                          "rope.scaling.factor",
                                          "rope.scaling.original_context_length",
                                          "rope.scaling.attn_factor",
                                          "rope.scaling.yarn_ext_factor",
                                          "rope.scaling.yarn_beta_fast",
                                          "rope.scaling.yarn_beta_slow",
                                          "attention.sliding_window"};

// A table of RoPE frequency divisors (rope_freqs, rope_factors_long / _short): F32, rope dims / 2
// of them, each finite and positive. nullopt when the file has no such tensor.
Expected<std::optional<std::vector<float>>> ReadRopeFactors(const GgufFile& f,
                                                            const std::string& name,
                                                            int rope_dims) {
  const Expected<const GgufTensor*> found = f.FindTensor(name);
  if (!found.ok()) return std::optional<std::vector<float>>();
  const GgufTensor& t = **found;
  if (t.type != GgmlType::kF32 || t.num_elements() != rope_dims / 2) {
    return HparamError(
        f, "tensor " + name, std::string(GgmlTypeName(t.type)),
        fmt::format("it must be F32 with {} elements (rope dims / 2)", rope_dims / 2));
  }
  const auto* v = reinterpret_cast<const float*>(t.data);
  std::vector<float> factors(v, v + rope_dims / 2);
  for (float factor : factors) {
    if (!(factor > 0.0f) || !std::isfinite(factor)) {
      return HparamError(f, "tensor " + name, std::to_string(factor),
                         "every factor must be finite and positive");
    }
  }
  return std::optional<std::vector<float>>(std::move(factors));
}

// YaRN (rope.scaling.type yarn): ggml's mix of interpolated and extrapolated angles. Returns the
// factor llama.cpp gives ggml's attn_factor: mscale(1) / mscale(log_mul) over the (1 + 0.1 ln
// factor) that ggml applies itself, where rope.scaling.yarn_log_multiplier (DeepSeek's
// mscale_all_dim; Mistral 3 alone in this family) is log_mul, else mscale(1).
Expected<float> ReadYarn(const GgufFile& f, const std::string& a, float factor, LlamaHparams& hp) {
  compute::RopeScaling& s = hp.rope_scaling;
  CTXPAR_ASSIGN_OR_RETURN(s.ext_factor,
                          ReadFloatHparam(f, a + "rope.scaling.yarn_ext_factor",
                                          {0.0, 1.0, true, false, "in (0, 1]"}, 1.0f));
  CTXPAR_ASSIGN_OR_RETURN(s.beta_fast,
                          ReadFloatHparam(f, a + "rope.scaling.yarn_beta_fast",
                                          {0.0, 1e6, true, false, "in (0, 1e6]"}, 32.0f));
  CTXPAR_ASSIGN_OR_RETURN(s.beta_slow,
                          ReadFloatHparam(f, a + "rope.scaling.yarn_beta_slow",
                                          {0.0, 1e6, true, false, "in (0, 1e6]"}, 1.0f));
  CTXPAR_ASSIGN_OR_RETURN(s.orig_ctx,
                          ReadIntHparam(f, a + "rope.scaling.original_context_length", 1, 1 << 30));
  s.truncate = !hp.variant.yarn_exact_range;
  float log_mul = 0.0f;
  if (hp.variant.attn_temperature) {
    CTXPAR_ASSIGN_OR_RETURN(log_mul,
                            ReadFloatHparam(f, a + "rope.scaling.yarn_log_multiplier",
                                            {0.0, 100.0, false, false, "in [0, 100]"}, 0.0f));
  }
  const float magnitude =
      log_mul != 0.0f ? compute::YarnMscale(factor, 1.0f) / compute::YarnMscale(factor, log_mul)
                      : compute::YarnMscale(factor, 1.0f);
  return magnitude * (1.0f / compute::YarnMscale(factor, 1.0f));
}

// Mistral 3's attention temperature (attention.temperature_scale, over the original context's
// positions; llama.cpp requires that context).
Status ReadTemperature(const GgufFile& f, const std::string& a, LlamaHparams& hp) {
  CTXPAR_ASSIGN_OR_RETURN(hp.temperature_beta,
                          ReadFloatHparam(f, a + "attention.temperature_scale",
                                          {0.0, 100.0, false, false, "in [0, 100]"}, 0.0f));
  if (hp.temperature_beta == 0.0f) return Status::Ok();
  CTXPAR_ASSIGN_OR_RETURN(hp.temperature_floor,
                          ReadIntHparam(f, a + "rope.scaling.original_context_length", 1, 1 << 30));
  return Status::Ok();
}

// RoPE scaling: none, "linear" or "yarn" (rope.scaling.factor), Llama 3's rope_freqs.weight (the
// converter writes no scaling type for it), or Phi-3's LongRoPE tables. The other types change
// the angles and the attention scale in ways this block does not implement: refused.
Status ReadRopeScaling(const GgufFile& f, const std::string& a, LlamaHparams& hp) {
  const std::string type_key = a + "rope.scaling.type";
  std::string type = "none";
  if (f.Find(type_key) != nullptr) {
    CTXPAR_ASSIGN_OR_RETURN(type, f.GetString(type_key));
  }
  compute::RopeScaling& s = hp.rope_scaling;
  float yarn_magnitude = 1.0f;
  if (type == "linear" || type == "yarn") {
    CTXPAR_ASSIGN_OR_RETURN(
        const float factor,
        ReadFloatHparam(f, a + "rope.scaling.factor", {1.0, 1e6, false, false, "in [1, 1e6]"}));
    s.freq_scale = 1.0f / factor;
    if (type == "yarn") {
      CTXPAR_ASSIGN_OR_RETURN(yarn_magnitude, ReadYarn(f, a, factor, hp));
    }
  } else if (type != "none") {
    return HparamError(f, type_key, type,
                       "ctxpar runs RoPE scaling none, linear and yarn (and Llama 3's "
                       "rope_freqs.weight, Phi-3's LongRoPE tables)");
  }
  CTXPAR_ASSIGN_OR_RETURN(s.attn_factor,
                          ReadFloatHparam(f, a + "rope.scaling.attn_factor",
                                          {0.0, 100.0, true, false, "in (0, 100]"}, 1.0f));
  s.attn_factor *= yarn_magnitude;
  CTXPAR_ASSIGN_OR_RETURN(auto freqs, ReadRopeFactors(f, "rope_freqs.weight", hp.rope_dims));
  CTXPAR_ASSIGN_OR_RETURN(auto long_factors,
                          ReadRopeFactors(f, "rope_factors_long.weight", hp.rope_dims));
  CTXPAR_ASSIGN_OR_RETURN(auto short_factors,
                          ReadRopeFactors(f, "rope_factors_short.weight", hp.rope_dims));
  if (long_factors.has_value() != short_factors.has_value() ||
      (freqs.has_value() && long_factors.has_value())) {
    return HparamError(f, "tensor rope_factors_long.weight",
                       long_factors.has_value() ? "present" : "absent",
                       "LongRoPE needs rope_factors_long and rope_factors_short, and no "
                       "rope_freqs beside them");
  }
  if (freqs.has_value()) s.freq_factors = std::move(*freqs);
  if (long_factors.has_value()) {
    // llama.cpp takes the long factors when its context passes the original one; ctxpar runs at
    // the file's context_length (HF picks by the current sequence length instead).
    CTXPAR_ASSIGN_OR_RETURN(const int original,
                            ReadIntHparam(f, a + "rope.scaling.original_context_length", 1, 1 << 30,
                                          hp.context_length));
    s.freq_factors = std::move(hp.context_length > original ? *long_factors : *short_factors);
  }
  return Status::Ok();
}

}  // namespace

Expected<LlamaHparams> ReadLlamaHparams(const GgufFile& f, const LlamaVariant& variant) {
  LlamaHparams hp;
  hp.variant = variant;
  CTXPAR_ASSIGN_OR_RETURN(hp.architecture, f.GetString("general.architecture"));
  const std::string a = hp.architecture + ".";
  CTXPAR_RETURN_IF_ERROR(ReadDenseHparams(f, a, hp));
  CTXPAR_RETURN_IF_ERROR(CheckKvHeads(f, a, hp));
  const int dim_per_head = hp.dim % hp.num_heads == 0 ? hp.dim / hp.num_heads : 0;
  CTXPAR_ASSIGN_OR_RETURN(
      hp.head_dim,
      ReadIntHparam(f, a + "attention.key_length", 2, 1024,
                    dim_per_head > 0 ? std::optional<int>(dim_per_head) : std::nullopt));
  CTXPAR_ASSIGN_OR_RETURN(const int value_length,
                          ReadIntHparam(f, a + "attention.value_length", 1, 1 << 30, hp.head_dim));
  if (value_length != hp.head_dim) {
    return HparamError(f, a + "attention.value_length", value_length,
                       fmt::format("it must equal the key length ({})", hp.head_dim));
  }
  CTXPAR_ASSIGN_OR_RETURN(hp.rope_dims,
                          ReadIntHparam(f, a + "rope.dimension_count", 1, 1 << 30, hp.head_dim));
  if (hp.rope_dims > hp.head_dim || hp.rope_dims % 2 != 0 || hp.rope_dims > 512) {
    return HparamError(
        f, a + "rope.dimension_count", hp.rope_dims,
        fmt::format("it must be even and at most the head dim ({}) and 512", hp.head_dim));
  }
  CTXPAR_ASSIGN_OR_RETURN(
      hp.rope_base, ReadFloatHparam(f, a + "rope.freq_base", kRopeFreqBaseRange, hp.rope_base));
  CTXPAR_ASSIGN_OR_RETURN(
      hp.rms_eps, ReadFloatHparam(f, a + "attention.layer_norm_rms_epsilon", kRmsEpsilonRange));
  CTXPAR_RETURN_IF_ERROR(ReadRopeScaling(f, a, hp));
  if (variant.attn_temperature) CTXPAR_RETURN_IF_ERROR(ReadTemperature(f, a, hp));
  // A window on every layer (Phi-3, Mistral): 0 is "none" (what Phi-3's converter writes), and one
  // that reaches past the context binds no token.
  CTXPAR_ASSIGN_OR_RETURN(hp.window,
                          ReadIntHparam(f, a + "attention.sliding_window", 0, 1 << 30, 0));
  if (hp.window == 1) {
    return HparamError(f, a + "attention.sliding_window", hp.window,
                       "a window of 1 leaves each token only itself to attend to; 0 is none");
  }
  if (hp.window >= hp.context_length) hp.window = 0;
  if (variant.moe) {
    CTXPAR_ASSIGN_OR_RETURN(hp.experts, ReadIntHparam(f, a + "expert_count", 1, 1 << 16));
    CTXPAR_ASSIGN_OR_RETURN(hp.experts_used,
                            ReadIntHparam(f, a + "expert_used_count", 1, hp.experts));
    CTXPAR_ASSIGN_OR_RETURN(hp.expert_ffn,
                            ReadIntHparam(f, a + "expert_feed_forward_length", 1, 1 << 30));
  }
  CTXPAR_ASSIGN_OR_RETURN(hp.vocab_size, model::GgufVocabSize(f, hp.dim));
  hp.tied_embeddings = !f.FindTensor("output.weight").ok();
  return hp;
}

Expected<std::unique_ptr<ModelSource>> OpenLlamaFamilySource(const std::string& path,
                                                             std::shared_ptr<const GgufFile> file,
                                                             const LlamaVariant& variant) {
  CTXPAR_ASSIGN_OR_RETURN(LlamaHparams hp, ReadLlamaHparams(*file, variant));
  std::vector<std::string_view> keys(std::begin(kReadKeys), std::end(kReadKeys));
  if (variant.attn_temperature) {
    keys.insert(keys.end(), {"attention.temperature_scale", "rope.scaling.yarn_log_multiplier"});
  }
  if (variant.moe) {
    keys.insert(keys.end(), {"expert_count", "expert_used_count", "expert_feed_forward_length"});
  }
  CTXPAR_RETURN_IF_ERROR(model::CheckGgufKeys(*file, variant.hf_name, hp.architecture + ".", keys));
  const LlamaTensorCheck check =
      variant.check_tensors != nullptr ? variant.check_tensors : CheckLlamaTensors;
  CTXPAR_RETURN_IF_ERROR(check(*file, hp));
  CTXPAR_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::FromGguf(*file));
  return std::unique_ptr<ModelSource>(
      new LlamaSource(path, std::move(file), std::move(hp), std::move(tokenizer)));
}

Expected<std::unique_ptr<ModelSource>> OpenLlamaSource(const std::string& path,
                                                       std::shared_ptr<const GgufFile> file) {
  return OpenLlamaFamilySource(path, std::move(file), kLlamaVariant);
}

}  // namespace ctxpar
