// The GGUF ModelSource of Gemma 3: hyperparameters, the layout rules the model hook adds to the
// resolution pipeline, and the factory.
#include <fmt/format.h>

#include <cmath>
#include <memory>
#include <string>
#include <utility>

#include "ctxpar/error_catalog.h"
#include "ctxpar/gguf_hparams.h"
#include "models/gemma3.h"
#include "models/gguf_dense_source.h"
#include "models/layers/gguf_weights.h"
#include "models/registry.h"

namespace ctxpar {

namespace {

constexpr std::string_view kHookName = "gemma3_layout_rules";
constexpr std::string_view kArchitecture = "Gemma3ForCausalLM";

class Gemma3Source final : public GgufDenseSource<Gemma3Hparams> {
 public:
  Gemma3Source(std::string path, std::shared_ptr<const GgufFile> file, Gemma3Hparams hp,
               Tokenizer tokenizer)
      : GgufDenseSource(kArchitecture, kHookName, std::move(path), std::move(file), std::move(hp),
                        std::move(tokenizer)) {
    // int8 activations exist for Q4_1 and Q8_0 weights only (linear.h): refused at check time
    // rather than when the first K-quant tensor loads.
    bool int8_weights = true;
    for (const GgufTensor& t : file_->tensors()) {
      if (t.shape.size() == 2 && t.type != GgmlType::kQ4_1 && t.type != GgmlType::kQ8_0) {
        int8_weights = false;
      }
    }
    info_.hook = [hp = hp_, int8_weights](Resolution& r, const ResolveContext&) {
      ResolvingView cfg = r.view();
      CTXPAR_RETURN_IF_ERROR(model::CheckHeadLayout(model::DenseHeadLayout(hp), kArchitecture,
                                                    cfg.tp_size(), cfg.dcp_size()));
      if (cfg.llama_cpp_numerics() && !int8_weights) {
        return CatalogError(
            "CTXPAR-MODEL-005",
            {{"flag", "--llama-cpp-numerics"},
             {"feature", "files whose weights are all Q4_1 or Q8_0 (int8 activations)"},
             {"architecture", "this Gemma3ForCausalLM file (K-quant and Q5_0 weights)"}});
      }
      return model::CheckDenseFlags(cfg, kArchitecture);
    };
  }

  // The pool applies each layer's window in BatchAttention.
  KvSpec KvSpecFor(const EngineConfig& c) const override {
    KvSpec spec = GgufDenseSource::KvSpecFor(c);
    spec.groups = Gemma3KvGroups(hp_);
    return spec;
  }

  Expected<std::unique_ptr<Model>> CreateModel(const EngineConfig& config, Communicator& world,
                                               ThreadPool* pool) const override {
    return CreateGemma3Model(file_, hp_, desc_, config, world, pool);
  }
};

}  // namespace

Expected<Gemma3Hparams> ReadGemma3Hparams(const GgufFile& f) {
  Gemma3Hparams hp;
  const std::string a = "gemma3.";
  CTXPAR_RETURN_IF_ERROR(ReadDenseHparams(f, a, hp));
  CTXPAR_ASSIGN_OR_RETURN(hp.head_dim, ReadIntHparam(f, a + "attention.key_length", 2, 512));
  CTXPAR_ASSIGN_OR_RETURN(const int value_length,
                          ReadIntHparam(f, a + "attention.value_length", 1, 1 << 30, hp.head_dim));
  if (value_length != hp.head_dim) {
    return HparamError(f, a + "attention.value_length", value_length,
                       fmt::format("it must equal {}attention.key_length ({})", a, hp.head_dim));
  }
  if (hp.head_dim % 2 != 0) {
    return HparamError(f, a + "attention.key_length", hp.head_dim, "it must be even (RoPE pairs)");
  }
  CTXPAR_RETURN_IF_ERROR(CheckKvHeads(f, a, hp));
  CTXPAR_ASSIGN_OR_RETURN(
      hp.rope_base, ReadFloatHparam(f, a + "rope.freq_base", kRopeFreqBaseRange, hp.rope_base));
  CTXPAR_ASSIGN_OR_RETURN(
      hp.rms_eps, ReadFloatHparam(f, a + "attention.layer_norm_rms_epsilon", kRmsEpsilonRange));
  CTXPAR_ASSIGN_OR_RETURN(hp.window,
                          ReadIntHparam(f, a + "attention.sliding_window", 0, 1 << 30, 0));
  hp.query_scale = 1.0f / std::sqrt(float(hp.head_dim));
  CTXPAR_ASSIGN_OR_RETURN(hp.vocab_size, model::GgufVocabSize(f, hp.dim));
  return hp;
}

Expected<std::unique_ptr<ModelSource>> OpenGemma3Source(const std::string& path,
                                                        std::shared_ptr<const GgufFile> file) {
  return OpenGgufDenseSource<Gemma3Source, ReadGemma3Hparams>(path, std::move(file));
}

}  // namespace ctxpar
