// The Llama forward over a Batch: one rank's shard of the weights (llama.h says which).
#include "models/llama.h"

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

// The rank's rows of the projections (gguf_weights.h) and the layer's norms.
struct Layer : model::DenseBlockWeights {
  const float* attn_norm = nullptr;
  const float* ffn_norm = nullptr;
};

class LlamaModel final : public Model {
 public:
  LlamaModel(std::shared_ptr<const GgufFile> file, const LlamaHparams& hp, ModelDesc desc,
             const EngineConfig& config, Communicator& world, ThreadPool* pool,
             const model::HeadShard& shard)
      : file_(std::move(file)),
        hp_(hp),
        desc_(std::move(desc)),
        tp_(&world, pool, model::ActFormatFor(config)),
        attention_({.num_heads = hp.num_heads,
                    .head_dim = hp.head_dim,
                    .dim = hp.dim,
                    .scale = 1.0f / std::sqrt(float(hp.head_dim)),
                    .rms_eps = hp.rms_eps,
                    .rope_style = model::RopeStyle::kNormal},
                   &tp_, shard, pool),
        mlp_(model::GatedActivation::kSwiGlu, hp.dim, hp.rms_eps, &tp_, shard, pool) {}

  Status Init(const EngineConfig& config, const model::HeadShard& shard);
  const ModelDesc& desc() const override { return desc_; }
  Status Forward(const Batch& batch, KvPool& kv, std::vector<float>& logits) override;

 private:
  // x_ += y [n, dim].
  void AddResidual(const float* y) {
    for (std::size_t i = 0; i < x_.size(); ++i) x_[i] += y[i];
  }

  std::shared_ptr<const GgufFile> file_;
  LlamaHparams hp_;
  ModelDesc desc_;
  model::TpLinear tp_;
  model::GqaAttention attention_;
  model::GatedMlp mlp_;
  std::vector<Layer> layers_;
  model::RopeAngles rope_;
  model::VocabHead head_;

  std::vector<float> x_;
  std::vector<int> positions_;  // of the batch's rows
};

Status LlamaModel::Init(const EngineConfig& config, const model::HeadShard& shard) {
  const GgufFile& f = *file_;
  const LlamaHparams& hp = hp_;
  const model::HeadLayout layout = model::DenseHeadLayout(hp);
  for (int l = 0; l < hp.num_layers; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    CTXPAR_ASSIGN_OR_RETURN(model::DenseBlockWeights w,
                            model::GgufDenseBlock(f, b, layout, shard, tp_.format()));
    Layer layer{w};
    CTXPAR_ASSIGN_OR_RETURN(layer.attn_norm, GgufVector(f, b + "attn_norm.weight", hp.dim));
    CTXPAR_ASSIGN_OR_RETURN(layer.ffn_norm, GgufVector(f, b + "ffn_norm.weight", hp.dim));
    layers_.push_back(std::move(layer));
  }
  rope_ = model::RopeAngles::Ggml(hp.rope_dims, hp.rope_base);
  CTXPAR_ASSIGN_OR_RETURN(head_, model::VocabHead::FromGguf(f, hp.dim, hp.vocab_size,
                                                            hp.tied_embeddings, hp.rms_eps, tp_));
  return attention_.Init(config);
}

Status LlamaModel::Forward(const Batch& batch, KvPool& kv, std::vector<float>& logits) {
  const LlamaHparams& hp = hp_;
  CTXPAR_RETURN_IF_ERROR(model::CheckTokenIds(batch, hp.vocab_size));
  const int n = static_cast<int>(batch.num_tokens());
  model::BatchPositions(batch, positions_);
  x_.resize(std::size_t(n) * hp.dim);
  head_.Embed(batch, 1.0f, x_.data());
  for (int l = 0; l < hp.num_layers; ++l) {
    const Layer& layer = layers_[l];
    CTXPAR_ASSIGN_OR_RETURN(
        const float* attn,
        attention_.Forward({.w = layer, .attn_norm = layer.attn_norm, .rope = rope_}, l, batch,
                           positions_, x_.data(), kv));
    AddResidual(attn);
    CTXPAR_ASSIGN_OR_RETURN(const float* mlp, mlp_.Forward(layer, layer.ffn_norm, x_.data(), n));
    AddResidual(mlp);
    CTXPAR_RETURN_IF_ERROR(
        CheckFinite(x_.data(), x_.size(), fmt::format("the output of layer {}", l), file_->path()));
  }
  return head_.Logits(tp_, batch, x_.data(), file_->path(), logits);
}

}  // namespace

Expected<std::unique_ptr<Model>> CreateLlamaModel(std::shared_ptr<const GgufFile> file,
                                                  const LlamaHparams& hp, ModelDesc desc,
                                                  const EngineConfig& config, Communicator& world,
                                                  ThreadPool* pool) {
  return CreateDenseModel<LlamaModel>(std::move(file), hp, std::move(desc), "LlamaForCausalLM",
                                      config, world, pool);
}

}  // namespace ctxpar
