// The Gemma 3 forward over a Batch: one rank's shard of the weights (gemma3.h says which).
#include "models/gemma3.h"

#include <fmt/format.h>

#include <cmath>

#include "ctxpar/thread_pool.h"
#include "models/check_finite.h"
#include "models/gguf_dense_source.h"
#include "models/layers/elementwise.h"
#include "models/layers/gated_mlp.h"
#include "models/layers/gguf_weights.h"
#include "models/layers/gqa_attention.h"
#include "models/layers/rows.h"
#include "models/layers/tp_linear.h"
#include "models/layers/vocab.h"
#include "models/layers/vocab_head.h"

namespace ctxpar {

namespace {

using model::GgufVector;

// The rank's rows of the projections (gguf_weights.h), the layer's norms and RoPE angles.
struct Layer : model::DenseBlockWeights {
  const float* attn_norm = nullptr;
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  const float* post_attn_norm = nullptr;
  const float* ffn_norm = nullptr;
  const float* post_ffn_norm = nullptr;
  model::RopeAngles rope = {};
};

class Gemma3Model final : public Model {
 public:
  Gemma3Model(std::shared_ptr<const GgufFile> file, const Gemma3Hparams& hp, ModelDesc desc,
              const EngineConfig& config, Communicator& world, ThreadPool* pool,
              const model::HeadShard& shard)
      : file_(std::move(file)),
        hp_(hp),
        desc_(std::move(desc)),
        pool_(pool),
        tp_(&world, pool, model::ActFormatFor(config)),
        attention_({.num_heads = hp.num_heads,
                    .head_dim = hp.head_dim,
                    .dim = hp.dim,
                    .scale = hp.query_scale,
                    .rms_eps = hp.rms_eps,
                    .rope_style = model::RopeStyle::kNeox},
                   &tp_, shard, pool),
        mlp_(model::GatedActivation::kGeGlu, hp.dim, hp.rms_eps, &tp_, shard, pool) {}

  Status Init(const EngineConfig& config, const model::HeadShard& shard);
  const ModelDesc& desc() const override { return desc_; }
  Status Forward(const Batch& batch, KvPool& kv, std::vector<float>& logits) override;

 private:
  std::shared_ptr<const GgufFile> file_;
  Gemma3Hparams hp_;
  ModelDesc desc_;
  ThreadPool* pool_;
  model::TpLinear tp_;
  model::GqaAttention attention_;
  model::GatedMlp mlp_;
  std::vector<Layer> layers_;
  model::VocabHead head_;

  std::vector<float> x_, normed_;
  std::vector<int> positions_;
};

Status Gemma3Model::Init(const EngineConfig& config, const model::HeadShard& shard) {
  const GgufFile& f = *file_;
  const Gemma3Hparams& hp = hp_;
  const int hd = hp.head_dim;
  const model::HeadLayout layout = model::DenseHeadLayout(hp);
  for (int l = 0; l < hp.num_layers; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    CTXPAR_ASSIGN_OR_RETURN(model::DenseBlockWeights w,
                            model::GgufDenseBlock(f, b, layout, shard, tp_.format()));
    Layer layer{w};
    CTXPAR_ASSIGN_OR_RETURN(layer.attn_norm, GgufVector(f, b + "attn_norm.weight", hp.dim));
    CTXPAR_ASSIGN_OR_RETURN(layer.q_norm, GgufVector(f, b + "attn_q_norm.weight", hd));
    CTXPAR_ASSIGN_OR_RETURN(layer.k_norm, GgufVector(f, b + "attn_k_norm.weight", hd));
    CTXPAR_ASSIGN_OR_RETURN(layer.post_attn_norm,
                            GgufVector(f, b + "post_attention_norm.weight", hp.dim));
    CTXPAR_ASSIGN_OR_RETURN(layer.ffn_norm, GgufVector(f, b + "ffn_norm.weight", hp.dim));
    CTXPAR_ASSIGN_OR_RETURN(layer.post_ffn_norm, GgufVector(f, b + "post_ffw_norm.weight", hp.dim));
    layer.rope =
        model::RopeAngles::Ggml(hd, hp.IsWindowLayer(l) ? hp.rope_base_window : hp.rope_base);
    layers_.push_back(std::move(layer));
  }
  CTXPAR_ASSIGN_OR_RETURN(head_, model::VocabHead::FromGguf(f, hp.dim, hp.vocab_size,
                                                            /*tied=*/true, hp.rms_eps, tp_));
  return attention_.Init(config);
}

Status Gemma3Model::Forward(const Batch& batch, KvPool& kv, std::vector<float>& logits) {
  const Gemma3Hparams& hp = hp_;
  CTXPAR_RETURN_IF_ERROR(model::CheckTokenIds(batch, hp.vocab_size));
  const int n = static_cast<int>(batch.num_tokens());
  model::BatchPositions(batch, positions_);
  x_.resize(std::size_t(n) * hp.dim);
  head_.Embed(batch, std::sqrt(float(hp.dim)), x_.data());
  for (int l = 0; l < hp.num_layers; ++l) {
    const Layer& layer = layers_[l];
    const model::GqaLayer attn_layer{.w = layer,
                                     .attn_norm = layer.attn_norm,
                                     .rope = layer.rope,
                                     .q_norm = layer.q_norm,
                                     .k_norm = layer.k_norm};
    CTXPAR_ASSIGN_OR_RETURN(const float* attn,
                            attention_.Forward(attn_layer, l, batch, positions_, x_.data(), kv));
    model::AddRmsNormRows(pool_, attn, layer.post_attn_norm, n, hp.dim, hp.rms_eps, normed_,
                          x_.data());
    CTXPAR_ASSIGN_OR_RETURN(const float* mlp, mlp_.Forward(layer, layer.ffn_norm, x_.data(), n));
    model::AddRmsNormRows(pool_, mlp, layer.post_ffn_norm, n, hp.dim, hp.rms_eps, normed_,
                          x_.data());
    CTXPAR_RETURN_IF_ERROR(
        CheckFinite(x_.data(), x_.size(), fmt::format("the output of layer {}", l), file_->path()));
  }
  return head_.Logits(tp_, batch, x_.data(), file_->path(), logits);
}

}  // namespace

std::vector<KvGroupSpec> Gemma3KvGroups(const Gemma3Hparams& hp) { return WindowKvGroups(hp); }

Expected<std::unique_ptr<Model>> CreateGemma3Model(std::shared_ptr<const GgufFile> file,
                                                   const Gemma3Hparams& hp, ModelDesc desc,
                                                   const EngineConfig& config, Communicator& world,
                                                   ThreadPool* pool) {
  return CreateDenseModel<Gemma3Model>(std::move(file), hp, std::move(desc), "Gemma3ForCausalLM",
                                       config, world, pool);
}

}  // namespace ctxpar
