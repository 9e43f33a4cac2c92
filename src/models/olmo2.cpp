// OLMo 2 from GGUF: the Llama family's hyperparameters and source (llama.h) with OLMo 2's block,
// as HF transformers' Olmo2DecoderLayer and llama.cpp's olmo2 graph compute it:
//   h = x + RmsNorm(o(attn(rope(RmsNorm(q(x))), rope(RmsNorm(k(x))), v(x))))  (post_attention_norm)
//   x = h + RmsNorm(down(silu(gate(h)) * up(h)))                              (post_ffw_norm)
// No norm before the attention or the MLP; the q and k norms span all the model's heads, which
// the TP group holds in parts (layers/head_split_norm.h); RoPE in the NeoX pairing.
#include <fmt/format.h>

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/dense_model.h"
#include "models/gguf_dense_source.h"
#include "models/layers/gguf_weights.h"
#include "models/llama.h"
#include "models/registry.h"

namespace ctxpar {

namespace {

struct Layer : model::DenseBlockWeights {
  const float* q_norm = nullptr;  // [num_heads * head_dim]
  const float* k_norm = nullptr;  // [num_kv_heads * head_dim]
  const float* post_attn_norm = nullptr;
  const float* post_ffn_norm = nullptr;
};

constexpr std::string_view kGlobalTensors[] = {"token_embd.weight", "output_norm.weight",
                                               "output.weight"};
constexpr std::string_view kBlockTensors[] = {"attn_q.weight",       "attn_k.weight",
                                              "attn_v.weight",       "attn_output.weight",
                                              "attn_q_norm.weight",  "attn_k_norm.weight",
                                              "ffn_gate.weight",     "ffn_up.weight",
                                              "ffn_down.weight",     "post_attention_norm.weight",
                                              "post_ffw_norm.weight"};

Status LoadLayers(const GgufFile& f, const LlamaHparams& hp, const model::HeadShard& shard,
                  compute::ActFormat format, std::vector<Layer>& layers) {
  const model::HeadLayout layout = model::DenseHeadLayout(hp);
  for (int l = 0; l < hp.num_layers; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    CTXPAR_ASSIGN_OR_RETURN(model::DenseBlockWeights w,
                            model::GgufDenseBlock(f, b, layout, shard, format));
    Layer layer{w};
    CTXPAR_RETURN_IF_ERROR(
        model::GgufVectors(f, b,
                           {{&layer.q_norm, "attn_q_norm.weight", hp.num_heads * hp.head_dim},
                            {&layer.k_norm, "attn_k_norm.weight", hp.num_kv_heads * hp.head_dim},
                            {&layer.post_attn_norm, "post_attention_norm.weight", hp.dim},
                            {&layer.post_ffn_norm, "post_ffw_norm.weight", hp.dim}}));
    layers.push_back(std::move(layer));
  }
  return Status::Ok();
}

class Olmo2Model final : public model::DenseModel<LlamaHparams, Layer> {
 public:
  Olmo2Model(std::shared_ptr<const GgufFile> file, const LlamaHparams& hp, ModelDesc desc,
             Communicator& world, compute::Compute& compute, const model::HeadShard& shard)
      : DenseModel(std::move(file), hp, std::move(desc), world, compute, shard,
                   {.num_heads = hp.num_heads,
                    .head_dim = hp.head_dim,
                    .dim = hp.dim,
                    .scale = 1.0f / std::sqrt(float(hp.head_dim)),
                    .rms_eps = hp.rms_eps,
                    .rope_style = compute::RopeStyle::kNeox,
                    .whole_row_qk_norm = true,
                    .num_kv_heads = hp.num_kv_heads},
                   compute::GatedActivation::kSwiGlu) {}

  Status Init(const EngineConfig& config, const model::HeadShard& shard) {
    CTXPAR_RETURN_IF_ERROR(LoadLayers(*file_, hp_, shard, tp_.compute().act_format(), layers_));
    rope_ = compute::RopeAngles::Ggml(hp_.rope_dims, hp_.rope_base, hp_.rope_scaling);
    return InitHead(config, hp_.tied_embeddings);
  }

  Status Forward(const Batch& batch, KvPool& kv, std::vector<float>& logits) override {
    CTXPAR_ASSIGN_OR_RETURN(const int n, Embed(batch, 1.0f));
    for (int l = 0; l < hp_.num_layers; ++l) {
      const Layer& layer = layers_[l];
      const model::GqaLayer attn_layer{.w = layer,
                                       .attn_norm = nullptr,
                                       .rope = rope_,
                                       .q_norm = layer.q_norm,
                                       .k_norm = layer.k_norm};
      CTXPAR_ASSIGN_OR_RETURN(const float* attn,
                              attention_.Forward(attn_layer, l, batch, positions_, x_.data(), kv));
      AddNormed(attn, layer.post_attn_norm, n);
      CTXPAR_ASSIGN_OR_RETURN(const float* mlp, mlp_.Forward(layer, nullptr, x_.data(), n));
      AddNormed(mlp, layer.post_ffn_norm, n);
      CTXPAR_RETURN_IF_ERROR(CheckLayer(l));
    }
    return Logits(batch, logits);
  }

 private:
  compute::RopeAngles rope_;
};

Status CheckOlmo2Tensors(const GgufFile& f, const LlamaHparams& hp) {
  return model::CheckDenseTensors<Layer>(f, hp, hp.variant.hf_name, kGlobalTensors, kBlockTensors,
                                         LoadLayers);
}

Expected<std::unique_ptr<Model>> CreateOlmo2Model(std::shared_ptr<const GgufFile> file,
                                                  const LlamaHparams& hp, ModelDesc desc,
                                                  const EngineConfig& config, Communicator& world,
                                                  compute::Compute& compute) {
  return CreateDenseModel<Olmo2Model>(std::move(file), hp, std::move(desc), hp.variant.hf_name,
                                      config, world, compute);
}

constexpr LlamaVariant kOlmo2 = {.gguf_name = "olmo2",
                                 .hf_name = "Olmo2ForCausalLM",
                                 .rope_style = compute::RopeStyle::kNeox,
                                 .check_tensors = CheckOlmo2Tensors,
                                 .create = CreateOlmo2Model};

}  // namespace

Expected<std::unique_ptr<ModelSource>> OpenOlmo2Source(const std::string& path,
                                                       std::shared_ptr<const GgufFile> file) {
  return OpenLlamaFamilySource(path, std::move(file), kOlmo2);
}

}  // namespace ctxpar
