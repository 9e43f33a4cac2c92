// The Gemma 3 forward over a Batch: one rank's shard of the weights (gemma3.h says which).
#include "models/gemma3.h"

#include <fmt/format.h>

#include <cmath>

#include "models/dense_model.h"
#include "models/gguf_dense_source.h"
#include "models/layers/compute_types.h"
#include "models/layers/gguf_weights.h"

namespace ctxpar {

namespace {

// The rank's rows of the projections (gguf_weights.h), the layer's norms and RoPE angles.
struct Layer : model::DenseBlockWeights {
  const float* attn_norm = nullptr;
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  const float* post_attn_norm = nullptr;
  const float* ffn_norm = nullptr;
  const float* post_ffn_norm = nullptr;
  compute::RopeAngles rope = {};
};

class Gemma3Model final : public model::DenseModel<Gemma3Hparams, Layer> {
 public:
  Gemma3Model(std::shared_ptr<const GgufFile> file, const Gemma3Hparams& hp, ModelDesc desc,
              Communicator& world, compute::Compute& compute, const model::HeadShard& shard)
      : DenseModel(std::move(file), hp, std::move(desc), world, compute, shard,
                   {.num_heads = hp.num_heads,
                    .head_dim = hp.head_dim,
                    .dim = hp.dim,
                    .scale = hp.query_scale,
                    .rms_eps = hp.rms_eps,
                    .rope_style = compute::RopeStyle::kNeox},
                   compute::GatedActivation::kGeGlu) {}

  Status Init(const EngineConfig& config, const model::HeadShard& shard) {
    const Gemma3Hparams& hp = hp_;
    const int hd = hp.head_dim;
    const model::HeadLayout layout = model::DenseHeadLayout(hp);
    for (int l = 0; l < hp.num_layers; ++l) {
      const std::string b = fmt::format("blk.{}.", l);
      CTXPAR_ASSIGN_OR_RETURN(
          model::DenseBlockWeights w,
          model::GgufDenseBlock(*file_, b, layout, shard, tp_.compute().act_format()));
      Layer layer{w};
      CTXPAR_RETURN_IF_ERROR(
          model::GgufVectors(*file_, b,
                             {{&layer.attn_norm, "attn_norm.weight", hp.dim},
                              {&layer.q_norm, "attn_q_norm.weight", hd},
                              {&layer.k_norm, "attn_k_norm.weight", hd},
                              {&layer.post_attn_norm, "post_attention_norm.weight", hp.dim},
                              {&layer.ffn_norm, "ffn_norm.weight", hp.dim},
                              {&layer.post_ffn_norm, "post_ffw_norm.weight", hp.dim}}));
      layer.rope =
          compute::RopeAngles::Ggml(hd, hp.IsWindowLayer(l) ? hp.rope_base_window : hp.rope_base);
      layers_.push_back(std::move(layer));
    }
    return InitHead(config, /*tied=*/true);
  }

  Status Forward(const Batch& batch, KvPool& kv, std::vector<float>& logits) override {
    CTXPAR_ASSIGN_OR_RETURN(const int n, Embed(batch, std::sqrt(float(hp_.dim))));
    for (int l = 0; l < hp_.num_layers; ++l) {
      const Layer& layer = layers_[l];
      const model::GqaLayer attn_layer{.w = layer,
                                       .attn_norm = layer.attn_norm,
                                       .rope = layer.rope,
                                       .q_norm = layer.q_norm,
                                       .k_norm = layer.k_norm};
      CTXPAR_ASSIGN_OR_RETURN(const float* attn,
                              attention_.Forward(attn_layer, l, batch, positions_, x_.data(), kv));
      AddNormed(attn, layer.post_attn_norm, n);
      CTXPAR_ASSIGN_OR_RETURN(const float* mlp, mlp_.Forward(layer, layer.ffn_norm, x_.data(), n));
      AddNormed(mlp, layer.post_ffn_norm, n);
      CTXPAR_RETURN_IF_ERROR(CheckLayer(l));
    }
    return Logits(batch, logits);
  }
};

}  // namespace

std::vector<KvGroupSpec> Gemma3KvGroups(const Gemma3Hparams& hp) { return WindowKvGroups(hp); }

Expected<std::unique_ptr<Model>> CreateGemma3Model(std::shared_ptr<const GgufFile> file,
                                                   const Gemma3Hparams& hp, ModelDesc desc,
                                                   const EngineConfig& config, Communicator& world,
                                                   compute::Compute& compute) {
  return CreateDenseModel<Gemma3Model>(std::move(file), hp, std::move(desc), "Gemma3ForCausalLM",
                                       config, world, compute);
}

}  // namespace ctxpar
