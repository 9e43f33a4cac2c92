// The GGUF ModelSource of the Llama family: hyperparameters, the layout rules that the model
// hook adds to the resolution pipeline (layers/attention_shard.h), and the factory.
#include <fmt/format.h>

#include <memory>
#include <string>
#include <utility>

#include "ctxpar/gguf_hparams.h"
#include "ctxpar/tokenizer.h"
#include "models/layers/gguf_weights.h"
#include "models/llama.h"
#include "models/registry.h"

namespace ctxpar {

namespace {

constexpr std::string_view kHookName = "llama_layout_rules";

Expected<int> ReadPositive(const GgufFile& f, const std::string& key) {
  return ReadIntHparam(f, key, 1, 1 << 30);
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
      CTXPAR_RETURN_IF_ERROR(
          model::CheckHeadLayout(model::DenseHeadLayout(hp), arch, cfg.tp_size(), cfg.dcp_size()));
      return model::CheckDenseFlags(cfg, arch);
    };
  }

  const std::string& path() const override { return path_; }
  const ModelInfo& info() const override { return info_; }
  const ModelDesc& desc() const override { return desc_; }
  const Tokenizer* tokenizer() const override { return &tokenizer_; }

  KvSpec KvSpecFor(const EngineConfig& c) const override {
    const model::HeadShard shard = model::MakeHeadShard(model::DenseHeadLayout(hp_), c, 0);
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
  CTXPAR_ASSIGN_OR_RETURN(hp.vocab_size, model::GgufVocabSize(f, hp.dim));
  hp.tied_embeddings = !f.FindTensor("output.weight").ok();
  return hp;
}

Expected<std::unique_ptr<ModelSource>> OpenLlamaSource(const std::string& path,
                                                       std::shared_ptr<const GgufFile> file) {
  CTXPAR_ASSIGN_OR_RETURN(LlamaHparams hp, ReadLlamaHparams(*file));
  CTXPAR_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::FromGguf(*file));
  return std::unique_ptr<ModelSource>(
      new LlamaSource(path, std::move(file), std::move(hp), std::move(tokenizer)));
}

}  // namespace ctxpar
