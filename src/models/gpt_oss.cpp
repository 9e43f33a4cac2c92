// OpenAI's gpt-oss from GGUF (general.architecture "gpt-oss", HF GptOssForCausalLM): the Llama
// family's hyperparameters and source (llama.h; YaRN as llama.cpp scales it, the expert keys)
// with gpt-oss's block, as HF transformers' GptOssDecoderLayer and llama.cpp's openai-moe graph
// compute it:
//   h = x + o(attn_sinks(rope(q(n(x)) + bq), rope(k(n(x)) + bk), v(n(x)) + bv)) + bo
//   x = h + moe(post_attention_norm(h))
// NeoX RoPE pairs; a learned sink per head, exp(sink_h) in every softmax's denominator
// (gqa_attention.h scales o by 1 / (1 + exp(sink_h - lse))); the even layers in a window of
// attention.sliding_window positions (the pool's window group), the odd ones global; routed
// experts with biases, the top experts_used of the router's logits weighted by a softmax over
// those alone, SwiGLU-OAI (layers/routed_moe.h). Expert parallelism as Qwen3-MoE's.
#include <fmt/format.h>

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ctxpar/gguf_hparams.h"
#include "models/dense_model.h"
#include "models/gguf_dense_source.h"
#include "models/layers/gguf_weights.h"
#include "models/layers/routed_moe.h"
#include "models/llama.h"
#include "models/registry.h"

namespace ctxpar {

namespace {

struct Layer : model::DenseBlockWeights {
  const float* attn_norm = nullptr;
  const float* post_attn_norm = nullptr;  // the experts' input norm
  const float *q_bias = nullptr, *k_bias = nullptr, *v_bias = nullptr, *o_bias = nullptr;
  const float* sinks = nullptr;  // [num_heads]
  model::MoeWeights moe{};       // the router and the rank's experts
};

model::MoeShape MoeShapeOf(const LlamaHparams& hp) {
  return {.dim = hp.dim,
          .experts = hp.experts,
          .experts_used = hp.experts_used,
          .expert_ffn = hp.expert_ffn,
          .routing = model::MoeRouting::kTopKSoftmax,
          .activation = compute::GatedActivation::kSwiGluOai,
          .biases = true};
}

constexpr std::string_view kGlobalTensors[] = {"token_embd.weight", "output_norm.weight",
                                               "output.weight"};

std::vector<std::string_view> BlockTensors(const LlamaHparams& hp) {
  std::vector<std::string_view> names = {"attn_norm.weight",
                                         "attn_q.weight",
                                         "attn_k.weight",
                                         "attn_v.weight",
                                         "attn_output.weight",
                                         "attn_q.bias",
                                         "attn_k.bias",
                                         "attn_v.bias",
                                         "attn_output.bias",
                                         "attn_sinks.weight",
                                         "post_attention_norm.weight"};
  for (std::string_view name : model::MoeTensors(MoeShapeOf(hp))) names.push_back(name);
  return names;
}

// Every layer's weights: the rank's rows of the attention and its experts.
Status LoadLayers(const GgufFile& f, const LlamaHparams& hp, const model::HeadShard& shard,
                  compute::ActFormat format, std::vector<Layer>& layers) {
  const model::HeadLayout layout = model::DenseHeadLayout(hp);
  const int tp = static_cast<int>(shard.head_bounds.size()) - 1;
  const int first = model::FirstExpert(hp.experts, tp, shard.tp_rank);
  const int count = model::FirstExpert(hp.experts, tp, shard.tp_rank + 1) - first;
  const int q_width = hp.num_heads * hp.head_dim, kv_width = hp.num_kv_heads * hp.head_dim;
  for (int l = 0; l < hp.num_layers; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    CTXPAR_ASSIGN_OR_RETURN(
        model::DenseBlockWeights w,
        model::GgufDenseBlock(f, b, layout, shard, format, /*fused=*/false, /*with_mlp=*/false));
    Layer layer{w};
    CTXPAR_ASSIGN_OR_RETURN(layer.moe,
                            model::GgufMoeWeights(f, b, MoeShapeOf(hp), first, count, format));
    CTXPAR_RETURN_IF_ERROR(
        model::GgufVectors(f, b,
                           {{&layer.attn_norm, "attn_norm.weight", hp.dim},
                            {&layer.post_attn_norm, "post_attention_norm.weight", hp.dim},
                            {&layer.q_bias, "attn_q.bias", q_width},
                            {&layer.k_bias, "attn_k.bias", kv_width},
                            {&layer.v_bias, "attn_v.bias", kv_width},
                            {&layer.o_bias, "attn_output.bias", hp.dim},
                            {&layer.sinks, "attn_sinks.weight", hp.num_heads}}));
    layers.push_back(std::move(layer));
  }
  return Status::Ok();
}

class GptOssModel final : public model::DenseModel<LlamaHparams, Layer> {
 public:
  GptOssModel(std::shared_ptr<const GgufFile> file, const LlamaHparams& hp, ModelDesc desc,
              Communicator& world, compute::Compute& compute, const model::HeadShard& shard)
      : DenseModel(std::move(file), hp, std::move(desc), world, compute, shard,
                   {.num_heads = hp.num_heads,
                    .head_dim = hp.head_dim,
                    .dim = hp.dim,
                    .scale = 1.0f / std::sqrt(float(hp.head_dim)),
                    .rms_eps = hp.rms_eps,
                    .rope_style = compute::RopeStyle::kNeox},
                   compute::GatedActivation::kSwiGluOai),
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
                                                  .q_bias = layer.q_bias,
                                                  .k_bias = layer.k_bias,
                                                  .v_bias = layer.v_bias,
                                                  .sinks = layer.sinks},
                                                 l, batch, positions_, x_.data(), kv));
      AddResidual(attn, layer.o_bias);
      CTXPAR_ASSIGN_OR_RETURN(const float* moe,
                              moe_.Forward(layer.moe, layer.post_attn_norm, x_.data(), n));
      AddResidual(moe);
      CTXPAR_RETURN_IF_ERROR(CheckLayer(l));
    }
    return Logits(batch, logits);
  }

 private:
  model::RoutedMoe moe_;
  compute::RopeAngles rope_;
};

// The tensors the loading reads, their shapes and types; at least 2 layers, so that the global
// group of the alternation has one.
Status CheckGptOssTensors(const GgufFile& f, const LlamaHparams& hp) {
  if (hp.num_layers < 2) {
    return HparamError(f, hp.architecture + ".block_count", hp.num_layers,
                       "it must be at least 2 (window and global layers alternate)");
  }
  return model::CheckDenseTensors<Layer>(f, hp, hp.variant.hf_name, kGlobalTensors,
                                         BlockTensors(hp), LoadLayers);
}

Expected<std::unique_ptr<Model>> CreateGptOssModel(std::shared_ptr<const GgufFile> file,
                                                   const LlamaHparams& hp, ModelDesc desc,
                                                   const EngineConfig& config, Communicator& world,
                                                   compute::Compute& compute) {
  return CreateDenseModel<GptOssModel>(std::move(file), hp, std::move(desc), hp.variant.hf_name,
                                       config, world, compute);
}

constexpr LlamaVariant kGptOss = {.gguf_name = "gpt-oss",
                                  .hf_name = "GptOssForCausalLM",
                                  .rope_style = compute::RopeStyle::kNeox,
                                  .moe = true,
                                  .alternating_window = true,
                                  .yarn_exact_range = true,
                                  .check_tensors = CheckGptOssTensors,
                                  .create = CreateGptOssModel};

}  // namespace

Expected<std::unique_ptr<ModelSource>> OpenGptOssSource(const std::string& path,
                                                        std::shared_ptr<const GgufFile> file) {
  return OpenLlamaFamilySource(path, std::move(file), kGptOss);
}

}  // namespace ctxpar
