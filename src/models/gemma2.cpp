// Gemma 2 from GGUF (general.architecture "gemma2", HF Gemma2ForCausalLM) as HF transformers'
// Gemma2DecoderLayer and llama.cpp's gemma2 graph compute it: Gemma 3's block (gemma3.h) without
// q/k norms, one RoPE base for every layer, a sliding window on the even layers (HF's
// layer_types, llama.cpp's swa pattern 2), and softcaps s -> c * tanh(s / c) on every attention
// score before the softmax (in the attention kernels, attention.h) and on every logit. Query
// scale query_pre_attn_scalar^-1/2, a key the GGUF lacks: head_dim in the 2B and 9B, hidden /
// heads in the 27B, which llama.cpp (and so this file) knows by its 46 layers.
#include <fmt/format.h>

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ctxpar/gguf_hparams.h"
#include "models/dense_model.h"
#include "models/gguf_dense_source.h"
#include "models/layers/compute_types.h"
#include "models/layers/gguf_weights.h"
#include "models/registry.h"

namespace ctxpar {

namespace {

constexpr std::string_view kArchitecture = "Gemma2ForCausalLM";
constexpr FloatRange kSoftcapRange = {0.0, 1e6, true, false, "in (0, 1e6]"};

struct Gemma2Hparams {
  int vocab_size = 0, dim = 0, num_layers = 0, num_heads = 0, num_kv_heads = 0;
  int head_dim = 0, ffn_dim = 0, context_length = 0;
  float rope_base = 1e4f, rms_eps = 0.0f, attn_softcap = 0.0f, final_softcap = 0.0f;
  int window = 0;
  bool IsWindowLayer(int l) const { return l % 2 == 0; }
};

// The rank's rows of the projections (gguf_weights.h) and the layer's norms.
struct Layer : model::DenseBlockWeights {
  const float *attn_norm = nullptr, *post_attn_norm = nullptr, *ffn_norm = nullptr,
              *post_ffn_norm = nullptr;
};

class Gemma2Model final : public model::DenseModel<Gemma2Hparams, Layer> {
 public:
  Gemma2Model(std::shared_ptr<const GgufFile> file, const Gemma2Hparams& hp, ModelDesc desc,
              Communicator& world, compute::Compute& compute, const model::HeadShard& shard)
      : DenseModel(std::move(file), hp, std::move(desc), world, compute, shard,
                   {.num_heads = hp.num_heads,
                    .head_dim = hp.head_dim,
                    .dim = hp.dim,
                    .scale = 1.0f / std::sqrt(float(hp.num_layers == 46 ? hp.dim / hp.num_heads
                                                                        : hp.head_dim)),
                    .softcap = hp.attn_softcap,
                    .rms_eps = hp.rms_eps,
                    .rope_style = compute::RopeStyle::kNeox},
                   compute::GatedActivation::kGeGlu),
        rope_(compute::RopeAngles::Ggml(hp.head_dim, hp.rope_base)) {}

  Status Init(const EngineConfig& config, const model::HeadShard& shard) {
    for (int l = 0; l < hp_.num_layers; ++l) {
      const std::string b = fmt::format("blk.{}.", l);
      CTXPAR_ASSIGN_OR_RETURN(model::DenseBlockWeights w,
                              model::GgufDenseBlock(*file_, b, model::DenseHeadLayout(hp_), shard,
                                                    tp_.compute().act_format()));
      Layer& layer = layers_.emplace_back(Layer{w});
      CTXPAR_RETURN_IF_ERROR(
          model::GgufVectors(*file_, b,
                             {{&layer.attn_norm, "attn_norm.weight", hp_.dim},
                              {&layer.post_attn_norm, "post_attention_norm.weight", hp_.dim},
                              {&layer.ffn_norm, "ffn_norm.weight", hp_.dim},
                              {&layer.post_ffn_norm, "post_ffw_norm.weight", hp_.dim}}));
    }
    return InitHead(config, /*tied=*/true);
  }

  Status Forward(const Batch& batch, KvPool& kv, std::vector<float>& logits) override {
    CTXPAR_ASSIGN_OR_RETURN(const int n, Embed(batch, std::sqrt(float(hp_.dim))));
    for (int l = 0; l < hp_.num_layers; ++l) {
      const Layer& layer = layers_[l];
      const model::GqaLayer attn_layer{.w = layer, .attn_norm = layer.attn_norm, .rope = rope_};
      CTXPAR_ASSIGN_OR_RETURN(const float* attn,
                              attention_.Forward(attn_layer, l, batch, positions_, x_.data(), kv));
      AddNormed(attn, layer.post_attn_norm, n);
      CTXPAR_ASSIGN_OR_RETURN(const float* mlp, mlp_.Forward(layer, layer.ffn_norm, x_.data(), n));
      AddNormed(mlp, layer.post_ffn_norm, n);
      CTXPAR_RETURN_IF_ERROR(CheckLayer(l));
    }
    CTXPAR_RETURN_IF_ERROR(Logits(batch, logits));
    // Every rank holds the gathered logits, so each caps the same values.
    compute::Softcap(logits.data(), logits.size(), hp_.final_softcap);
    return Status::Ok();
  }

 private:
  compute::RopeAngles rope_;
};

class Gemma2Source final : public GgufDenseSource<Gemma2Hparams> {
 public:
  Gemma2Source(std::string path, std::shared_ptr<const GgufFile> file, Gemma2Hparams hp,
               Tokenizer tokenizer)
      : GgufDenseSource(kArchitecture, "gemma2_layout_rules", std::move(path), std::move(file),
                        std::move(hp), std::move(tokenizer)) {
    SetDenseLayoutHook();
  }

  Expected<std::unique_ptr<Model>> CreateModel(const EngineConfig& config, Communicator& world,
                                               compute::Compute& compute) const override {
    return CreateDenseModel<Gemma2Model>(file_, hp_, desc_, kArchitecture, config, world, compute);
  }
};

constexpr std::string_view kGlobalTensors[] = {"token_embd.weight", "output_norm.weight"};
constexpr std::string_view kBlockTensors[] = {
    "attn_norm.weight", "attn_q.weight",       "attn_k.weight",
    "attn_v.weight",    "attn_output.weight",  "post_attention_norm.weight",
    "ffn_norm.weight",  "ffn_gate.weight",     "ffn_up.weight",
    "ffn_down.weight",  "post_ffw_norm.weight"};
constexpr std::string_view kReadKeys[] = {
    "embedding_length",         "block_count",
    "attention.head_count",     "attention.head_count_kv",
    "feed_forward_length",      "context_length",
    "attention.key_length",     "attention.value_length",
    "rope.freq_base",           "attention.layer_norm_rms_epsilon",
    "attention.sliding_window", "attn_logit_softcapping",
    "final_logit_softcapping"};

// The hyperparameters, then every key and every tensor's name and type (layers/gguf_weights.h).
Expected<Gemma2Hparams> ReadGemma2Hparams(const GgufFile& f) {
  Gemma2Hparams hp;
  const std::string a = "gemma2.";
  CTXPAR_RETURN_IF_ERROR(ReadDenseHparams(f, a, hp));
  CTXPAR_RETURN_IF_ERROR(ReadHeadDim(f, a, hp));
  CTXPAR_RETURN_IF_ERROR(CheckKvHeads(f, a, hp));
  // The layers alternate window and global from layer 0: one layer would leave no global group.
  if (hp.num_layers < 2) {
    return HparamError(f, a + "block_count", hp.num_layers, "it must be at least 2");
  }
  CTXPAR_ASSIGN_OR_RETURN(
      hp.rope_base, ReadFloatHparam(f, a + "rope.freq_base", kRopeFreqBaseRange, hp.rope_base));
  CTXPAR_ASSIGN_OR_RETURN(
      hp.rms_eps, ReadFloatHparam(f, a + "attention.layer_norm_rms_epsilon", kRmsEpsilonRange));
  // A window of 0 or 1 would leave a token nothing or only itself to attend to.
  CTXPAR_ASSIGN_OR_RETURN(hp.window, ReadIntHparam(f, a + "attention.sliding_window", 2, 1 << 30));
  CTXPAR_ASSIGN_OR_RETURN(hp.attn_softcap,
                          ReadFloatHparam(f, a + "attn_logit_softcapping", kSoftcapRange));
  CTXPAR_ASSIGN_OR_RETURN(hp.final_softcap,
                          ReadFloatHparam(f, a + "final_logit_softcapping", kSoftcapRange));
  CTXPAR_RETURN_IF_ERROR(model::CheckGgufKeys(f, kArchitecture, a, kReadKeys));
  CTXPAR_ASSIGN_OR_RETURN(hp.vocab_size, model::GgufVocabSize(f, hp.dim));
  CTXPAR_RETURN_IF_ERROR(
      model::CheckGgufTensors(f, kArchitecture, hp.num_layers, kGlobalTensors, kBlockTensors));
  return hp;
}

}  // namespace

Expected<std::unique_ptr<ModelSource>> OpenGemma2Source(const std::string& path,
                                                        std::shared_ptr<const GgufFile> file) {
  return OpenGgufDenseSource<Gemma2Source, ReadGemma2Hparams>(path, std::move(file));
}

}  // namespace ctxpar
