// The GGUF ModelSource of the Llama family: hyperparameters, the layout rules that the model
// hook adds to the resolution pipeline (layers/attention_shard.h), and the factory.
#include <fmt/format.h>

#include <memory>
#include <string>
#include <utility>

#include "ctxpar/gguf_hparams.h"
#include "models/gguf_dense_source.h"
#include "models/layers/gguf_weights.h"
#include "models/llama.h"
#include "models/registry.h"

namespace ctxpar {

namespace {

constexpr std::string_view kHookName = "llama_layout_rules";

class LlamaSource final : public GgufDenseSource<LlamaHparams> {
 public:
  LlamaSource(std::string path, std::shared_ptr<const GgufFile> file, LlamaHparams hp,
              Tokenizer tokenizer)
      : GgufDenseSource("LlamaForCausalLM", kHookName, std::move(path), std::move(file),
                        std::move(hp), std::move(tokenizer)) {
    info_.hook = [hp = hp_, arch = desc_.architecture](Resolution& r, const ResolveContext&) {
      ResolvingView cfg = r.view();
      CTXPAR_RETURN_IF_ERROR(
          model::CheckHeadLayout(model::DenseHeadLayout(hp), arch, cfg.tp_size(), cfg.dcp_size()));
      return model::CheckDenseFlags(cfg, arch);
    };
  }

  Expected<std::unique_ptr<Model>> CreateModel(const EngineConfig& config, Communicator& world,
                                               ThreadPool* pool) const override {
    return CreateLlamaModel(file_, hp_, desc_, config, world, pool);
  }
};

}  // namespace

Expected<LlamaHparams> ReadLlamaHparams(const GgufFile& f) {
  LlamaHparams hp;
  CTXPAR_ASSIGN_OR_RETURN(hp.architecture, f.GetString("general.architecture"));
  const std::string a = hp.architecture + ".";
  CTXPAR_RETURN_IF_ERROR(ReadDenseHparams(f, a, hp));
  if (hp.dim % hp.num_heads != 0) {
    return HparamError(
        f, a + "embedding_length", hp.dim,
        fmt::format("it must be divisible by {}attention.head_count ({})", a, hp.num_heads));
  }
  CTXPAR_RETURN_IF_ERROR(CheckKvHeads(f, a, hp));
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
  return OpenGgufDenseSource<LlamaSource, ReadLlamaHparams>(path, std::move(file));
}

}  // namespace ctxpar
