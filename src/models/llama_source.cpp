// The GGUF ModelSource of the Llama family: hyperparameters, the sharding plan, the layout rules
// that the model hook adds to the resolution pipeline, and the factory.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <memory>
#include <string>
#include <utility>

#include "ctxpar/error_catalog.h"
#include "ctxpar/gguf_hparams.h"
#include "ctxpar/tokenizer.h"
#include "models/linear.h"
#include "models/llama.h"
#include "models/model_sources.h"

namespace ctxpar {

namespace {

constexpr std::string_view kHookName = "llama_layout_rules";

Expected<int> ReadPositive(const GgufFile& f, const std::string& key) {
  return ReadIntHparam(f, key, 1, 1 << 30);
}

std::string Int(int64_t v) { return std::to_string(v); }

// The flags a dense Llama cannot honour, with what they apply to.
Status CheckDenseFlags(const ResolvingView& cfg, const std::string& arch) {
  struct Flag {
    bool given;
    std::string_view flag;
    std::string_view feature;
  };
  const Flag flags[] = {
      {cfg.ep_size() != 1, "--ep-size", "mixture-of-experts models (expert parallelism)"},
      {cfg.moe_a2a_backend() != "none", "--moe-a2a-backend", "mixture-of-experts models"},
      {cfg.moe_dense_tp_size().has_value(), "--moe-dense-tp-size", "mixture-of-experts models"},
      {cfg.enable_prefill_cp(), "--enable-prefill-cp",
       "the DeepSeek models (prefill context parallelism)"},
      {cfg.attn_cp_size() != 1, "--attn-cp-size",
       "the DeepSeek models (prefill context parallelism)"},
      {cfg.cp_strategy().has_value(), "--cp-strategy (or --nsa-prefill-cp-mode)",
       "the DeepSeek models (prefill context parallelism)"},
      {cfg.enable_dp_attention(), "--enable-dp-attention", "data-parallel attention"},
  };
  for (const Flag& f : flags) {
    if (f.given) {
      return CatalogError("CTXPAR-MODEL-005", {{"flag", std::string(f.flag)},
                                               {"feature", std::string(f.feature)},
                                               {"architecture", arch}});
    }
  }
  return Status::Ok();
}

class LlamaSource final : public ModelSource {
 public:
  LlamaSource(std::string path, std::shared_ptr<const GgufFile> file, LlamaHparams hp,
              Tokenizer tokenizer)
      : path_(std::move(path)),
        file_(std::move(file)),
        hp_(std::move(hp)),
        tokenizer_(std::move(tokenizer)) {
    desc_.architecture = "LlamaForCausalLM";
    desc_.vocab_size = hp_.vocab_size;
    desc_.context_length = hp_.context_length;
    for (int32_t id = 0; id < tokenizer_.vocab_size(); ++id) {
      if (tokenizer_.IsEndOfGeneration(id)) desc_.eos_token_ids.push_back(id);
    }
    info_.architecture = desc_.architecture;
    info_.num_attention_heads = hp_.num_heads;
    info_.num_key_value_heads = hp_.num_kv_heads;
    info_.hook_name = std::string(kHookName);
    info_.hook = [hp = hp_, arch = desc_.architecture](Resolution& r, const ResolveContext&) {
      ResolvingView cfg = r.view();
      CTXPAR_RETURN_IF_ERROR(CheckLlamaLayout(hp, cfg.tp_size(), cfg.dcp_size()));
      return CheckDenseFlags(cfg, arch);
    };
  }

  const std::string& path() const override { return path_; }
  const ModelInfo& info() const override { return info_; }
  const ModelDesc& desc() const override { return desc_; }
  const Tokenizer* tokenizer() const override { return &tokenizer_; }

  KvSpec KvSpecFor(const EngineConfig& c) const override {
    const LlamaShard shard = MakeLlamaShard(hp_, c, 0);
    return {.num_layers = hp_.num_layers,
            .num_kv_heads = shard.kv_heads,
            .head_dim_k = hp_.head_dim,
            .head_dim_v = hp_.head_dim,
            .v_in_k = false,
            .dtype = c.kv_cache_dtype};
  }

  Expected<std::unique_ptr<Model>> CreateModel(const EngineConfig& config, Communicator& world,
                                               ThreadPool* pool) const override {
    return CreateLlamaModel(file_, hp_, desc_, config, world, pool);
  }

 private:
  std::string path_;
  std::shared_ptr<const GgufFile> file_;
  LlamaHparams hp_;
  Tokenizer tokenizer_;
  ModelDesc desc_;
  ModelInfo info_;
};

}  // namespace

Expected<LlamaHparams> ReadLlamaHparams(const GgufFile& f) {
  LlamaHparams hp;
  CTXPAR_ASSIGN_OR_RETURN(hp.architecture, f.GetString("general.architecture"));
  const std::string a = hp.architecture + ".";
  CTXPAR_ASSIGN_OR_RETURN(hp.dim, ReadPositive(f, a + "embedding_length"));
  CTXPAR_ASSIGN_OR_RETURN(hp.num_layers, ReadPositive(f, a + "block_count"));
  CTXPAR_ASSIGN_OR_RETURN(hp.num_heads, ReadPositive(f, a + "attention.head_count"));
  CTXPAR_ASSIGN_OR_RETURN(hp.num_kv_heads, ReadPositive(f, a + "attention.head_count_kv"));
  CTXPAR_ASSIGN_OR_RETURN(hp.ffn_dim, ReadPositive(f, a + "feed_forward_length"));
  CTXPAR_ASSIGN_OR_RETURN(hp.context_length, ReadPositive(f, a + "context_length"));
  if (hp.dim % hp.num_heads != 0) {
    return HparamError(
        f, a + "embedding_length", hp.dim,
        fmt::format("it must be divisible by {}attention.head_count ({})", a, hp.num_heads));
  }
  if (hp.num_heads % hp.num_kv_heads != 0) {
    return HparamError(
        f, a + "attention.head_count", hp.num_heads,
        fmt::format("it must be a multiple of {}attention.head_count_kv ({})", a, hp.num_kv_heads));
  }
  hp.head_dim = hp.dim / hp.num_heads;
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
  CTXPAR_ASSIGN_OR_RETURN(const GgufTensor* embd, f.FindTensor("token_embd.weight"));
  if (embd->shape.size() != 2 || embd->shape[0] != hp.dim || embd->shape[1] < 1 ||
      embd->shape[1] > (1 << 30)) {
    return HparamError(f, "the shape of tensor token_embd.weight",
                       fmt::format("[{}]", fmt::join(embd->shape, ", ")),
                       fmt::format("it must be [{}, n_vocab] with n_vocab in [1, 2^30]", hp.dim));
  }
  hp.vocab_size = static_cast<int>(embd->shape[1]);
  hp.tied_embeddings = !f.FindTensor("output.weight").ok();
  return hp;
}

LlamaShard MakeLlamaShard(const LlamaHparams& hp, const EngineConfig& config, int tp_rank) {
  const int tp = config.tp_size;
  const int dcp = config.dcp_size;
  const bool replicate_q = config.dcp_replicate_q_proj;
  LlamaShard s;
  s.tp_rank = tp_rank;
  s.dcp_rank = tp_rank % dcp;
  s.group = tp_rank / dcp;
  s.heads = hp.num_heads / tp;
  s.q_heads = replicate_q ? s.heads * dcp : s.heads;
  s.q_first = replicate_q ? s.group * s.heads * dcp : tp_rank * s.heads;
  // The group's query heads [group*h*dcp, (group+1)*h*dcp) read the KV heads below (GQA: query
  // head j reads KV head j / (H / Hkv)); with tp > Hkv they all read one.
  const int group_heads = s.heads * dcp;
  const int per_kv = hp.num_heads / hp.num_kv_heads;
  s.kv_first = s.group * group_heads / per_kv;
  s.kv_heads = GqaKvHeadsPerRank(hp.num_heads, hp.num_kv_heads, tp, dcp);
  const int blocks = hp.ffn_dim / model::kBlock;
  for (int i = 0; i <= tp; ++i) {
    s.ffn_bounds.push_back(static_cast<int>(int64_t{i} * blocks / tp) * model::kBlock);
    s.dim_bounds.push_back(static_cast<int>(int64_t{i} * hp.dim / tp));
  }
  return s;
}

int GqaKvHeadsPerRank(int num_heads, int num_kv_heads, int tp, int dcp) {
  return std::max(1, num_heads / tp * dcp / (num_heads / num_kv_heads));
}

Status CheckGqaLayout(int num_heads, int kv, int tp, int dcp) {
  if (num_heads % tp != 0) {
    return CatalogError("CTXPAR-MODEL-002", {{"num_heads", Int(num_heads)}, {"tp_size", Int(tp)}});
  }
  if (kv % tp != 0 && tp % kv != 0) {
    return CatalogError("CTXPAR-MODEL-003", {{"tp_size", Int(tp)}, {"num_kv_heads", Int(kv)}});
  }
  if (tp > kv && (tp / kv) % dcp != 0) {
    return CatalogError("CTXPAR-MODEL-004", {{"dcp_size", Int(dcp)}, {"replicas", Int(tp / kv)}});
  }
  return Status::Ok();
}

Status CheckLlamaLayout(const LlamaHparams& hp, int tp, int dcp) {
  CTXPAR_RETURN_IF_ERROR(CheckGqaLayout(hp.num_heads, hp.num_kv_heads, tp, dcp));
  auto shape = [&](std::string_view what, int value, std::string_view rule) {
    return CatalogError("CTXPAR-MODEL-006", {{"what", std::string(what)},
                                             {"architecture", "LlamaForCausalLM"},
                                             {"value", Int(value)},
                                             {"rule", std::string(rule)}});
  };
  if (hp.head_dim % model::kBlock != 0) {
    return shape("the head dimension", hp.head_dim, "it must be a multiple of 32");
  }
  if (hp.dim % model::kBlock != 0) {
    return shape("the hidden size", hp.dim, "it must be a multiple of 32");
  }
  if (hp.ffn_dim % model::kBlock != 0 || hp.ffn_dim / model::kBlock < hp.num_heads) {
    return shape("the MLP width", hp.ffn_dim,
                 "it must be a multiple of 32 with at least one 32-block per attention head");
  }
  return Status::Ok();
}

Expected<std::unique_ptr<ModelSource>> OpenGgufSource(const std::string& path) {
  CTXPAR_ASSIGN_OR_RETURN(GgufFile opened, GgufFile::Open(path));
  auto file = std::make_shared<const GgufFile>(std::move(opened));
  CTXPAR_ASSIGN_OR_RETURN(LlamaHparams hp, ReadLlamaHparams(*file));
  if (hp.architecture != "llama") {
    return Unimplemented(fmt::format(
        "{}: general.architecture is '{}'; ctxpar runs GGUF models of the llama architecture", path,
        hp.architecture));
  }
  CTXPAR_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::FromGguf(*file));
  return std::unique_ptr<ModelSource>(
      new LlamaSource(path, std::move(file), std::move(hp), std::move(tokenizer)));
}

}  // namespace ctxpar
