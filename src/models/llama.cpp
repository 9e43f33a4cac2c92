// The Llama forward over a Batch: one rank's shard of the weights (llama.h says which).
#include "models/llama.h"

#include <fmt/format.h>

#include <cmath>

#include "models/dense_model.h"
#include "models/gguf_dense_source.h"
#include "models/layers/compute_types.h"
#include "models/layers/gguf_weights.h"
#include "models/layers/routed_moe.h"

namespace ctxpar {

namespace {

// The rank's rows of the projections (gguf_weights.h), the layer's norms and the variant's
// biases and per-head norms (null where it has none).
struct Layer : model::DenseBlockWeights {
  const float* attn_norm = nullptr;
  const float* ffn_norm = nullptr;
  const float* q_bias = nullptr;
  const float* k_bias = nullptr;
  const float* v_bias = nullptr;
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  model::MoeWeights moe{};  // variant.moe: the router and the rank's experts
};

model::MoeShape MoeShapeOf(const LlamaHparams& hp) {
  return {.dim = hp.dim,
          .experts = hp.experts,
          .experts_used = hp.experts_used,
          .expert_ffn = hp.expert_ffn};
}

// The tensors of a variant's blocks (blk.N. + these): the Llama block's (or Phi-3's fused ones),
// the variant's biases and norms. Any other is refused (CheckGgufTensors).
std::vector<std::string_view> BlockTensors(const LlamaVariant& v) {
  std::vector<std::string_view> names = {"attn_norm.weight", "attn_output.weight",
                                         "ffn_norm.weight"};
  if (v.fused) {
    names.insert(names.end(), {"attn_qkv.weight", "ffn_up.weight", "ffn_down.weight"});
  } else {
    names.insert(names.end(), {"attn_q.weight", "attn_k.weight", "attn_v.weight"});
  }
  if (v.moe) {
    names.insert(names.end(), {"ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight",
                               "ffn_down_exps.weight"});
  } else if (!v.fused) {
    names.insert(names.end(), {"ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"});
  }
  if (v.qkv_bias) names.insert(names.end(), {"attn_q.bias", "attn_k.bias", "attn_v.bias"});
  if (v.qk_norm) names.insert(names.end(), {"attn_q_norm.weight", "attn_k_norm.weight"});
  return names;
}
constexpr std::string_view kGlobalTensors[] = {
    "token_embd.weight", "output_norm.weight",       "output.weight",
    "rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight"};

// Every layer's weights, the rank's rows of the projections (`shard`).
Status LoadLayers(const GgufFile& f, const LlamaHparams& hp, const model::HeadShard& shard,
                  compute::ActFormat format, std::vector<Layer>& layers) {
  const model::HeadLayout layout = model::DenseHeadLayout(hp);
  for (int l = 0; l < hp.num_layers; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    CTXPAR_ASSIGN_OR_RETURN(
        model::DenseBlockWeights w,
        model::GgufDenseBlock(f, b, layout, shard, format, hp.variant.fused, !hp.variant.moe));
    Layer layer{w};
    if (hp.variant.moe) {
      const int tp = static_cast<int>(shard.head_bounds.size()) - 1;
      const int first = model::FirstExpert(hp.experts, tp, shard.tp_rank);
      CTXPAR_ASSIGN_OR_RETURN(
          layer.moe, model::GgufMoeWeights(
                         f, b, MoeShapeOf(hp), first,
                         model::FirstExpert(hp.experts, tp, shard.tp_rank + 1) - first, format));
    }
    CTXPAR_RETURN_IF_ERROR(model::GgufVectors(f, b,
                                              {{&layer.attn_norm, "attn_norm.weight", hp.dim},
                                               {&layer.ffn_norm, "ffn_norm.weight", hp.dim}}));
    if (hp.variant.qkv_bias) {
      const int q_width = hp.num_heads * hp.head_dim, kv_width = hp.num_kv_heads * hp.head_dim;
      CTXPAR_RETURN_IF_ERROR(model::GgufVectors(f, b,
                                                {{&layer.q_bias, "attn_q.bias", q_width},
                                                 {&layer.k_bias, "attn_k.bias", kv_width},
                                                 {&layer.v_bias, "attn_v.bias", kv_width}}));
    }
    if (hp.variant.qk_norm) {
      CTXPAR_RETURN_IF_ERROR(
          model::GgufVectors(f, b,
                             {{&layer.q_norm, "attn_q_norm.weight", hp.head_dim},
                              {&layer.k_norm, "attn_k_norm.weight", hp.head_dim}}));
    }
    layers.push_back(std::move(layer));
  }
  return Status::Ok();
}

class LlamaModel final : public model::DenseModel<LlamaHparams, Layer> {
 public:
  LlamaModel(std::shared_ptr<const GgufFile> file, const LlamaHparams& hp, ModelDesc desc,
             Communicator& world, compute::Compute& compute, const model::HeadShard& shard)
      : DenseModel(std::move(file), hp, std::move(desc), world, compute, shard,
                   {.num_heads = hp.num_heads,
                    .head_dim = hp.head_dim,
                    .dim = hp.dim,
                    .scale = 1.0f / std::sqrt(float(hp.head_dim)),
                    .rms_eps = hp.rms_eps,
                    .rope_style = hp.variant.rope_style,
                    .window = hp.window,
                    .temperature_beta = hp.temperature_beta,
                    .temperature_floor = hp.temperature_floor},
                   compute::GatedActivation::kSwiGlu),
        moe_(MoeShapeOf(hp), hp.rms_eps, &tp_) {}

  Status Init(const EngineConfig& config, const model::HeadShard& shard) {
    CTXPAR_RETURN_IF_ERROR(LoadLayers(*file_, hp_, shard, tp_.compute().act_format(), layers_));
    rope_ = compute::RopeAngles::Ggml(hp_.rope_dims, hp_.rope_base, hp_.rope_scaling);
    return InitHead(config, hp_.tied_embeddings);
  }

  Status Forward(const Batch& batch, KvPool& kv, std::vector<float>& logits) override {
    CTXPAR_ASSIGN_OR_RETURN(const int n, Embed(batch, 1.0f));
    for (int l = 0; l < hp_.num_layers; ++l) {
      const Layer& layer = layers_[l];
      CTXPAR_ASSIGN_OR_RETURN(const float* attn,
                              attention_.Forward({.w = layer,
                                                  .attn_norm = layer.attn_norm,
                                                  .rope = rope_,
                                                  .q_norm = layer.q_norm,
                                                  .k_norm = layer.k_norm,
                                                  .q_bias = layer.q_bias,
                                                  .k_bias = layer.k_bias,
                                                  .v_bias = layer.v_bias},
                                                 l, batch, positions_, x_.data(), kv));
      AddResidual(attn);
      CTXPAR_ASSIGN_OR_RETURN(
          const float* mlp, hp_.variant.moe ? moe_.Forward(layer.moe, layer.ffn_norm, x_.data(), n)
                                            : mlp_.Forward(layer, layer.ffn_norm, x_.data(), n));
      AddResidual(mlp);
      CTXPAR_RETURN_IF_ERROR(CheckLayer(l));
    }
    return Logits(batch, logits);
  }

 private:
  model::RoutedMoe moe_;
  compute::RopeAngles rope_;
};

}  // namespace

Status CheckLlamaTensors(const GgufFile& f, const LlamaHparams& hp) {
  return model::CheckDenseTensors<Layer>(f, hp, hp.variant.hf_name, kGlobalTensors,
                                         BlockTensors(hp.variant), LoadLayers);
}

Expected<std::unique_ptr<Model>> CreateLlamaModel(std::shared_ptr<const GgufFile> file,
                                                  const LlamaHparams& hp, ModelDesc desc,
                                                  const EngineConfig& config, Communicator& world,
                                                  compute::Compute& compute) {
  return CreateDenseModel<LlamaModel>(std::move(file), hp, std::move(desc), hp.variant.hf_name,
                                      config, world, compute);
}

}  // namespace ctxpar
