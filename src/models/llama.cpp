// The Llama forward over a Batch: one rank's shard of the weights (llama.h says which).
#include "models/llama.h"

#include <fmt/format.h>

#include <cmath>

#include "ctxpar/thread_pool.h"
#include "models/batch_attention.h"
#include "models/check_finite.h"
#include "models/layers/elementwise.h"
#include "models/layers/gguf_weights.h"
#include "models/layers/rows.h"
#include "models/layers/tp_linear.h"
#include "models/layers/vocab.h"
#include "models/linear.h"

namespace ctxpar {

namespace {

using model::GgufMatrix;
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
             model::HeadShard shard)
      : file_(std::move(file)),
        hp_(hp),
        desc_(std::move(desc)),
        pool_(pool),
        shard_(std::move(shard)),
        tp_(&world, pool,
            config.llama_cpp_numerics ? model::ActFormat::kQ8 : model::ActFormat::kF32) {}

  Status Init(const EngineConfig& config);
  const ModelDesc& desc() const override { return desc_; }
  Status Forward(const Batch& batch, KvPool& kv, std::vector<float>& logits) override;

 private:
  Status Attention(const Layer& layer, int l, const Batch& batch, KvPool& kv);
  Status Logits(const Batch& batch, std::vector<float>& logits);
  // xn_ = RmsNorm(x_) with `weight`, over n rows.
  void Norm(const float* weight, int n);
  // x_ += y [n, dim].
  void AddResidual(const float* y) {
    for (std::size_t i = 0; i < x_.size(); ++i) x_[i] += y[i];
  }

  std::shared_ptr<const GgufFile> file_;
  LlamaHparams hp_;
  ModelDesc desc_;
  ThreadPool* pool_;
  model::HeadShard shard_;
  model::TpLinear tp_;
  std::unique_ptr<Communicator> dcp_;
  std::unique_ptr<model::BatchAttention> attend_;
  std::vector<Layer> layers_;
  model::RopeAngles rope_;
  model::QuantMatrix embd_, lm_head_;
  model::VocabShard vocab_shard_;
  const float* out_norm_ = nullptr;

  std::vector<float> x_, xn_, q_, k_, v_, o_, gate_, up_, act_, rows_;
  std::vector<int> positions_;  // of the batch's rows
};

Status LlamaModel::Init(const EngineConfig& config) {
  const GgufFile& f = *file_;
  const LlamaHparams& hp = hp_;
  const model::ActFormat format = tp_.format();
  const int hd = hp.head_dim;
  const model::HeadShard& s = shard_;
  const model::HeadLayout layout = LlamaHeadLayout(hp);
  for (int l = 0; l < hp.num_layers; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    CTXPAR_ASSIGN_OR_RETURN(model::DenseBlockWeights w,
                            model::GgufDenseBlock(f, b, layout, s, format));
    Layer layer{w};
    CTXPAR_ASSIGN_OR_RETURN(layer.attn_norm, GgufVector(f, b + "attn_norm.weight", hp.dim));
    CTXPAR_ASSIGN_OR_RETURN(layer.ffn_norm, GgufVector(f, b + "ffn_norm.weight", hp.dim));
    layers_.push_back(std::move(layer));
  }
  rope_ = model::RopeAngles::Ggml(hp.rope_dims, hp.rope_base);
  CTXPAR_ASSIGN_OR_RETURN(embd_, GgufMatrix(f, "token_embd.weight", hp.dim, hp.vocab_size, format));
  model::QuantMatrix head = embd_;
  if (!hp.tied_embeddings) {
    CTXPAR_ASSIGN_OR_RETURN(head, GgufMatrix(f, "output.weight", hp.dim, hp.vocab_size, format));
  }
  vocab_shard_ = model::MakeVocabShard(hp.vocab_size, tp_.size(), s.tp_rank);
  lm_head_ = head.RowRange(vocab_shard_.first, vocab_shard_.count);
  CTXPAR_ASSIGN_OR_RETURN(out_norm_, GgufVector(f, "output_norm.weight", hp.dim));

  const int n = config.dcp_size;
  CTXPAR_ASSIGN_OR_RETURN(dcp_, tp_.world().Split(s.tp_rank / n, s.tp_rank));
  DcpOptions o = model::EngineDcpOptions(config, tp_.size(), pool_);
  o.num_heads = hp.num_heads;
  o.head_dim_qk = hd;
  o.head_dim_v = hd;
  o.scale = 1.0f / std::sqrt(float(hd));
  CTXPAR_ASSIGN_OR_RETURN(attend_, model::BatchAttention::Create(o, dcp_.get()));
  return Status::Ok();
}

void LlamaModel::Norm(const float* weight, int n) {
  const int dim = hp_.dim;
  model::ForRows(pool_, n, [&](int begin, int end) {
    const std::size_t first = std::size_t(begin) * dim;
    model::RmsNorm(x_.data() + first, weight, end - begin, dim, hp_.rms_eps, xn_.data() + first);
  });
}

Status LlamaModel::Attention(const Layer& layer, int l, const Batch& batch, KvPool& kv) {
  const int hd = hp_.head_dim;
  const int n = static_cast<int>(batch.num_tokens());
  const model::HeadShard& s = shard_;
  Norm(layer.attn_norm, n);
  const std::size_t q_row = std::size_t(s.q_heads) * hd, kv_row = std::size_t(s.kv_heads) * hd;
  q_.resize(n * q_row);
  k_.resize(n * kv_row);
  v_.resize(n * kv_row);
  const model::MatMulOut qkv[] = {{layer.wq, q_.data(), s.q_heads * hd},
                                  {layer.wk, k_.data(), s.kv_heads * hd},
                                  {layer.wv, v_.data(), s.kv_heads * hd}};
  tp_.ColumnParallel(qkv, xn_.data(), n, hp_.dim);
  model::ForRows(pool_, n, [&](int begin, int end) {
    for (int row = begin; row < end; ++row) {
      const int pos = positions_[row];
      model::Rope(model::RopeStyle::kNormal, q_.data() + row * q_row, s.q_heads, hd, rope_, pos);
      model::Rope(model::RopeStyle::kNormal, k_.data() + row * kv_row, s.kv_heads, hd, rope_, pos);
    }
  });
  for (const BatchSeq& seq : batch.seqs) {
    CTXPAR_RETURN_IF_ERROR(kv.Write(l, seq.slot, seq.pos0, seq.num_tokens,
                                    k_.data() + seq.token_offset * kv_row,
                                    v_.data() + seq.token_offset * kv_row));
  }
  o_.resize(std::size_t(n) * s.heads * hd);
  CTXPAR_RETURN_IF_ERROR(attend_->Run(batch, kv, l, q_.data(), o_.data()));
  CTXPAR_ASSIGN_OR_RETURN(const float* y,
                          tp_.RowParallel(layer.wo, o_.data(), n, s.head_bounds, s.dim_bounds));
  AddResidual(y);
  return Status::Ok();
}

Status LlamaModel::Logits(const Batch& batch, std::vector<float>& logits) {
  const int dim = hp_.dim, vocab = hp_.vocab_size;
  model::WantedRows(batch, x_.data(), dim, rows_);
  const int n = static_cast<int>(batch.TotalLogitRows());
  logits.resize(std::size_t(n) * vocab);
  if (n == 0) return Status::Ok();
  model::RmsNorm(rows_.data(), out_norm_, n, dim, hp_.rms_eps, rows_.data());
  CTXPAR_RETURN_IF_ERROR(
      tp_.VocabLogits(lm_head_, vocab_shard_, vocab, rows_.data(), n, logits.data()));
  return CheckFinite(logits.data(), logits.size(), "the logits", file_->path());
}

Status LlamaModel::Forward(const Batch& batch, KvPool& kv, std::vector<float>& logits) {
  const LlamaHparams& hp = hp_;
  CTXPAR_RETURN_IF_ERROR(model::CheckTokenIds(batch, hp.vocab_size));
  const int n = static_cast<int>(batch.num_tokens());
  model::BatchPositions(batch, positions_);
  const int dim = hp.dim;
  x_.resize(std::size_t(n) * dim);
  xn_.resize(x_.size());
  model::EmbedTokens(embd_, batch, 1.0f, x_.data());
  const int ffn_shard = layers_.empty() ? 0 : layers_[0].gate.rows;
  for (int l = 0; l < hp.num_layers; ++l) {
    const Layer& layer = layers_[l];
    CTXPAR_RETURN_IF_ERROR(Attention(layer, l, batch, kv));
    Norm(layer.ffn_norm, n);
    gate_.resize(std::size_t(n) * ffn_shard);
    up_.resize(gate_.size());
    act_.resize(gate_.size());
    const model::MatMulOut gate_up[] = {{layer.gate, gate_.data(), ffn_shard},
                                        {layer.up, up_.data(), ffn_shard}};
    tp_.ColumnParallel(gate_up, xn_.data(), n, dim);
    model::ForRows(pool_, n, [&](int begin, int end) {
      const std::size_t first = std::size_t(begin) * ffn_shard;
      model::SwiGlu(gate_.data() + first, up_.data() + first, (end - begin) * ffn_shard,
                    act_.data() + first);
    });
    CTXPAR_ASSIGN_OR_RETURN(const float* y, tp_.RowParallel(layer.down, act_.data(), n,
                                                            shard_.ffn_bounds, shard_.dim_bounds));
    AddResidual(y);
    CTXPAR_RETURN_IF_ERROR(
        CheckFinite(x_.data(), x_.size(), fmt::format("the output of layer {}", l), file_->path()));
  }
  return Logits(batch, logits);
}

}  // namespace

model::HeadLayout LlamaHeadLayout(const LlamaHparams& hp) {
  return {.num_heads = hp.num_heads,
          .num_kv_heads = hp.num_kv_heads,
          .head_dim = hp.head_dim,
          .dim = hp.dim,
          .ffn_dim = hp.ffn_dim};
}

Expected<std::unique_ptr<Model>> CreateLlamaModel(std::shared_ptr<const GgufFile> file,
                                                  const LlamaHparams& hp, ModelDesc desc,
                                                  const EngineConfig& config, Communicator& world,
                                                  ThreadPool* pool) {
  if (world.size() != config.tp_size) {
    return InvalidArgument(fmt::format("tp_size ({}) must equal the TP communicator's size ({})",
                                       config.tp_size, world.size()));
  }
  const model::HeadLayout layout = LlamaHeadLayout(hp);
  CTXPAR_RETURN_IF_ERROR(
      model::CheckHeadLayout(layout, "LlamaForCausalLM", config.tp_size, config.dcp_size));
  model::HeadShard shard = model::MakeHeadShard(layout, config, world.rank());
  auto model = std::make_unique<LlamaModel>(std::move(file), hp, std::move(desc), config, world,
                                            pool, std::move(shard));
  CTXPAR_RETURN_IF_ERROR(model->Init(config));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace ctxpar
