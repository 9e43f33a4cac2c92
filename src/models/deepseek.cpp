// The DeepSeek-V3 forward over a Batch: one rank's shard of the weights (deepseek.h says which).
#include "models/deepseek.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "models/check_finite.h"
#include "models/deepseek_mla.h"
#include "models/deepseek_moe.h"
#include "models/layers/tp_linear.h"
#include "models/layers/vocab.h"
#include "models/layers/vocab_head.h"

namespace ctxpar {

namespace {

// Read row by row in the forward (by token id), not copied at load.
constexpr const char* kEmbedding = "model.embed_tokens.weight";

struct Layer {
  model::MlaWeights attn;
  model::FfnWeights ffn;
};

class DeepseekModel final : public Model {
 public:
  DeepseekModel(std::shared_ptr<const DeepseekWeights> weights, const DeepseekV3Config& c,
                ModelDesc desc, Communicator& world, compute::Compute& compute, DeepseekShard shard)
      : weights_(std::move(weights)),
        c_(c),
        desc_(std::move(desc)),
        tp_(&world, &compute),
        s_(std::move(shard)) {}

  Status Init(const EngineConfig& config);
  const ModelDesc& desc() const override { return desc_; }
  Status Forward(const Batch& batch, KvPool& kv, std::vector<float>& logits) override;
  model::MlaAttention& attention() const { return *attn_; }

 private:
  std::shared_ptr<const DeepseekWeights> weights_;
  DeepseekV3Config c_;
  ModelDesc desc_;
  model::TpLinear tp_;
  DeepseekShard s_;
  std::vector<Layer> layers_;
  std::vector<float> norm_, lm_head_;  // lm_head: the rank's vocab shard [.., hidden]
  model::LmHead head_;
  std::unique_ptr<model::MlaAttention> attn_;
  std::unique_ptr<model::DeepseekFfn> ffn_;
  std::vector<float> x_;
};

Status DeepseekModel::Init(const EngineConfig& config) {
  const DeepseekWeights& ck = *weights_;
  for (int l = 0; l < c_.num_hidden_layers; ++l) {
    Layer layer;
    CTXPAR_ASSIGN_OR_RETURN(layer.attn, model::LoadMlaWeights(ck, c_, s_, l));
    CTXPAR_ASSIGN_OR_RETURN(layer.ffn, model::LoadFfnWeights(ck, c_, s_, l));
    layers_.push_back(std::move(layer));
  }
  const int64_t d = c_.hidden_size, vocab = c_.vocab_size;
  CTXPAR_ASSIGN_OR_RETURN(norm_, model::LoadVector(ck, "model.norm.weight", d));
  const model::VocabShard shard = model::MakeVocabShard(c_.vocab_size, s_.tp_size, s_.tp_rank);
  const std::string head = c_.tie_word_embeddings ? kEmbedding : "lm_head.weight";
  CTXPAR_ASSIGN_OR_RETURN(lm_head_, model::LoadRows(ck, head, vocab, d, shard.first, shard.count));
  head_ = model::LmHead(
      c_.hidden_size, c_.vocab_size, float(c_.rms_norm_eps), norm_.data(),
      compute::F32Matrix{lm_head_.data(), shard.count, c_.hidden_size, c_.hidden_size}, shard);
  CTXPAR_ASSIGN_OR_RETURN(attn_,
                          model::MlaAttention::Create(c_, s_, config, tp_.world(), tp_.compute()));
  ffn_ = std::make_unique<model::DeepseekFfn>(c_, s_, tp_.world(), tp_.compute());
  return Status::Ok();
}

Status DeepseekModel::Forward(const Batch& batch, KvPool& kv, std::vector<float>& logits) {
  CTXPAR_RETURN_IF_ERROR(model::CheckTokenIds(batch, c_.vocab_size));
  const int n = static_cast<int>(batch.num_tokens());
  const int d = c_.hidden_size;
  x_.resize(std::size_t(n) * d);
  for (int t = 0; t < n; ++t) {
    CTXPAR_RETURN_IF_ERROR(weights_->Read(kEmbedding, int64_t{batch.tokens[t]} * d, d,
                                          x_.data() + std::size_t(t) * d));
  }
  for (int l = 0; l < c_.num_hidden_layers; ++l) {
    CTXPAR_RETURN_IF_ERROR(attn_->Run(layers_[l].attn, l, batch, kv, x_.data()));
    CTXPAR_RETURN_IF_ERROR(ffn_->Run(layers_[l].ffn, n, x_.data()));
    CTXPAR_RETURN_IF_ERROR(CheckLayerFinite(x_.data(), x_.size(), l, weights_->path()));
  }
  return head_.Logits(tp_, batch, x_.data(), weights_->path(), logits);
}

}  // namespace

DeepseekGroups GroupsOf(Model& model) {
  model::MlaAttention& a = dynamic_cast<DeepseekModel&>(model).attention();
  return {&a.dcp(), &a.cp()};
}

Expected<std::unique_ptr<Model>> CreateDeepseekModel(std::shared_ptr<const DeepseekWeights> weights,
                                                     const DeepseekV3Config& c, ModelDesc desc,
                                                     const EngineConfig& config,
                                                     Communicator& world,
                                                     compute::Compute& compute) {
  if (world.size() != config.tp_size) {
    return InvalidArgument(fmt::format("tp_size ({}) must equal the TP communicator's size ({})",
                                       config.tp_size, world.size()));
  }
  CTXPAR_RETURN_IF_ERROR(CheckDeepseekLayout(
      c, {.tp = config.tp_size,
          .ep = config.ep_size,
          .dense_tp = config.moe_dense_tp_size,
          .deepep = config.moe_a2a_backend == MoeA2aBackend::kDeepep,
          .moe_flags = config.ep_size != 1 || config.moe_a2a_backend != MoeA2aBackend::kNone}));
  if (config.moe_a2a_backend != MoeA2aBackend::kNone &&
      config.moe_a2a_backend != MoeA2aBackend::kDeepep) {
    return FailedPrecondition(
        fmt::format("--moe-a2a-backend {}: the DeepSeek model runs none and deepep",
                    MoeA2aBackendName(config.moe_a2a_backend)));
  }
  auto model = std::make_unique<DeepseekModel>(std::move(weights), c, std::move(desc), world,
                                               compute, MakeDeepseekShard(c, config, world.rank()));
  CTXPAR_RETURN_IF_ERROR(model->Init(config));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace ctxpar
