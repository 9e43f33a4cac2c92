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
    SetDenseLayoutHook();
  }

  Expected<std::unique_ptr<Model>> CreateModel(const EngineConfig& config, Communicator& world,
                                               compute::Compute& compute) const override {
    return CreateGemma3Model(file_, hp_, desc_, config, world, compute);
  }
};

}  // namespace

Expected<Gemma3Hparams> ReadGemma3Hparams(const GgufFile& f) {
  Gemma3Hparams hp;
  const std::string a = "gemma3.";
  CTXPAR_RETURN_IF_ERROR(ReadDenseHparams(f, a, hp));
  CTXPAR_RETURN_IF_ERROR(ReadHeadDim(f, a, hp));
  CTXPAR_RETURN_IF_ERROR(CheckKvHeads(f, a, hp));
  CTXPAR_ASSIGN_OR_RETURN(
      hp.rope_base, ReadFloatHparam(f, a + "rope.freq_base", kRopeFreqBaseRange, hp.rope_base));
  CTXPAR_ASSIGN_OR_RETURN(
      hp.rms_eps, ReadFloatHparam(f, a + "attention.layer_norm_rms_epsilon", kRmsEpsilonRange));
  // Absent: every layer global. A window of 0 or 1 would leave a window layer's token nothing or
  // only itself to attend to: refused rather than read as "no window".
  CTXPAR_ASSIGN_OR_RETURN(hp.window,
                          ReadIntHparam(f, a + "attention.sliding_window", 2, 1 << 30, 0));
  if (hp.window > 0 && hp.num_layers < hp.window_pattern) {
    // Every layer would be a window layer: the KV pool keeps the global layers' group first.
    return HparamError(f, a + "block_count", hp.num_layers,
                       fmt::format("with a sliding window it must be at least {} (every {}th "
                                   "layer is global)",
                                   hp.window_pattern, hp.window_pattern));
  }
  hp.query_scale = 1.0f / std::sqrt(float(hp.head_dim));
  CTXPAR_ASSIGN_OR_RETURN(hp.vocab_size, model::GgufVocabSize(f, hp.dim));
  return hp;
}

namespace {

constexpr std::string_view kGlobalTensors[] = {"token_embd.weight", "output_norm.weight"};
constexpr std::string_view kBlockTensors[] = {
    "attn_norm.weight",    "attn_q.weight",      "attn_k.weight",      "attn_v.weight",
    "attn_output.weight",  "attn_q_norm.weight", "attn_k_norm.weight", "post_attention_norm.weight",
    "ffn_norm.weight",     "ffn_gate.weight",    "ffn_up.weight",      "ffn_down.weight",
    "post_ffw_norm.weight"};

// The keys under "gemma3." that ReadGemma3Hparams reads.
constexpr std::string_view kReadKeys[] = {
    "embedding_length",        "block_count",
    "attention.head_count",    "attention.head_count_kv",
    "feed_forward_length",     "context_length",
    "attention.key_length",    "attention.value_length",
    "rope.freq_base",          "attention.layer_norm_rms_epsilon",
    "attention.sliding_window"};

// The hyperparameters, then every key and every tensor's name and type (layers/gguf_weights.h).
Expected<Gemma3Hparams> ReadAndCheckGemma3(const GgufFile& f) {
  CTXPAR_ASSIGN_OR_RETURN(Gemma3Hparams hp, ReadGemma3Hparams(f));
  CTXPAR_RETURN_IF_ERROR(model::CheckGgufKeys(f, kArchitecture, "gemma3.", kReadKeys));
  CTXPAR_RETURN_IF_ERROR(
      model::CheckGgufTensors(f, kArchitecture, hp.num_layers, kGlobalTensors, kBlockTensors));
  return hp;
}

}  // namespace

Expected<std::unique_ptr<ModelSource>> OpenGemma3Source(const std::string& path,
                                                        std::shared_ptr<const GgufFile> file) {
  return OpenGgufDenseSource<Gemma3Source, ReadAndCheckGemma3>(path, std::move(file));
}

}  // namespace ctxpar
