// The Gemma 3 forward over a Batch: one rank's shard of the weights (gemma3.h says which).
#include "models/gemma3.h"

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
  Status Mlp(const Layer& layer, int n);
  // out = RmsNorm(in) with `weight` over n rows of `dim`.
  void Norm(const float* in, const float* weight, int n, int dim, float* out);
  // x_ += RmsNorm(y) with `weight` (the post-attention and post-FFN norms).
  void AddNormed(const float* y, const float* weight, int n);

  std::shared_ptr<const GgufFile> file_;
  Gemma3Hparams hp_;
  ModelDesc desc_;
  ThreadPool* pool_;
  model::HeadShard shard_;
  model::TpLinear tp_;
  std::unique_ptr<Communicator> dcp_;
  std::unique_ptr<model::BatchAttention> attend_;
  std::vector<Layer> layers_;
  model::QuantMatrix embd_, lm_head_;
  model::VocabShard vocab_shard_;
  const float* out_norm_ = nullptr;

  std::vector<float> x_, xn_, q_, k_, v_, o_, gate_, up_, act_, normed_, rows_;
  std::vector<int> positions_;
};

Status Gemma3Model::Init(const EngineConfig& config) {
  const GgufFile& f = *file_;
  const Gemma3Hparams& hp = hp_;
  const model::ActFormat format = tp_.format();
  const int hd = hp.head_dim;
  const model::HeadShard& s = shard_;
  const model::HeadLayout layout = Gemma3HeadLayout(hp);
  for (int l = 0; l < hp.num_layers; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    CTXPAR_ASSIGN_OR_RETURN(model::DenseBlockWeights w,
                            model::GgufDenseBlock(f, b, layout, s, format));
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
  CTXPAR_ASSIGN_OR_RETURN(embd_, GgufMatrix(f, "token_embd.weight", hp.dim, hp.vocab_size, format));
  vocab_shard_ = model::MakeVocabShard(hp.vocab_size, tp_.size(), s.tp_rank);
  lm_head_ = embd_.RowRange(vocab_shard_.first, vocab_shard_.count);
  CTXPAR_ASSIGN_OR_RETURN(out_norm_, GgufVector(f, "output_norm.weight", hp.dim));

  const int n = config.dcp_size;
  CTXPAR_ASSIGN_OR_RETURN(dcp_, tp_.world().Split(s.tp_rank / n, s.tp_rank));
  DcpOptions o = model::EngineDcpOptions(config, tp_.size(), pool_);
  o.num_heads = hp.num_heads;
  o.head_dim_qk = hd;
  o.head_dim_v = hd;
  o.scale = hp.query_scale;
  CTXPAR_ASSIGN_OR_RETURN(attend_, model::BatchAttention::Create(o, dcp_.get()));
  return Status::Ok();
}

void Gemma3Model::Norm(const float* in, const float* weight, int n, int dim, float* out) {
  model::ForRows(pool_, n, [&](int begin, int end) {
    const std::size_t first = std::size_t(begin) * dim;
    model::RmsNorm(in + first, weight, end - begin, dim, hp_.rms_eps, out + first);
  });
}

void Gemma3Model::AddNormed(const float* y, const float* weight, int n) {
  normed_.resize(std::size_t(n) * hp_.dim);
  Norm(y, weight, n, hp_.dim, normed_.data());
  for (std::size_t i = 0; i < x_.size(); ++i) x_[i] += normed_[i];
}

Status Gemma3Model::Attention(const Layer& layer, int l, const Batch& batch, KvPool& kv) {
  const int hd = hp_.head_dim;
  const int n = static_cast<int>(batch.num_tokens());
  const model::HeadShard& s = shard_;
  Norm(x_.data(), layer.attn_norm, n, hp_.dim, xn_.data());
  const std::size_t q_row = std::size_t(s.q_heads) * hd, kv_row = std::size_t(s.kv_heads) * hd;
  q_.resize(n * q_row);
  k_.resize(n * kv_row);
  v_.resize(n * kv_row);
  const model::MatMulOut qkv[] = {{layer.wq, q_.data(), s.q_heads * hd},
                                  {layer.wk, k_.data(), s.kv_heads * hd},
                                  {layer.wv, v_.data(), s.kv_heads * hd}};
  tp_.ColumnParallel(qkv, xn_.data(), n, hp_.dim);
  Norm(q_.data(), layer.q_norm, n * s.q_heads, hd, q_.data());
  Norm(k_.data(), layer.k_norm, n * s.kv_heads, hd, k_.data());
  model::ForRows(pool_, n, [&](int begin, int end) {
    for (int row = begin; row < end; ++row) {
      const int pos = positions_[row];
      model::Rope(model::RopeStyle::kNeox, q_.data() + row * q_row, s.q_heads, hd, layer.rope, pos);
      model::Rope(model::RopeStyle::kNeox, k_.data() + row * kv_row, s.kv_heads, hd, layer.rope,
                  pos);
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
  AddNormed(y, layer.post_attn_norm, n);
  return Status::Ok();
}

Status Gemma3Model::Mlp(const Layer& layer, int n) {
  const int ffn_shard = layer.gate.rows;
  Norm(x_.data(), layer.ffn_norm, n, hp_.dim, xn_.data());
  gate_.resize(std::size_t(n) * ffn_shard);
  up_.resize(gate_.size());
  act_.resize(gate_.size());
  const model::MatMulOut gate_up[] = {{layer.gate, gate_.data(), ffn_shard},
                                      {layer.up, up_.data(), ffn_shard}};
  tp_.ColumnParallel(gate_up, xn_.data(), n, hp_.dim);
  model::ForRows(pool_, n, [&](int begin, int end) {
    const std::size_t first = std::size_t(begin) * ffn_shard;
    model::GeGlu(gate_.data() + first, up_.data() + first, (end - begin) * ffn_shard,
                 act_.data() + first);
  });
  CTXPAR_ASSIGN_OR_RETURN(const float* y, tp_.RowParallel(layer.down, act_.data(), n,
                                                          shard_.ffn_bounds, shard_.dim_bounds));
  AddNormed(y, layer.post_ffn_norm, n);
  return Status::Ok();
}

Status Gemma3Model::Forward(const Batch& batch, KvPool& kv, std::vector<float>& logits) {
  const Gemma3Hparams& hp = hp_;
  CTXPAR_RETURN_IF_ERROR(model::CheckTokenIds(batch, hp.vocab_size));
  const int n = static_cast<int>(batch.num_tokens());
  model::BatchPositions(batch, positions_);
  x_.resize(std::size_t(n) * hp.dim);
  xn_.resize(x_.size());
  model::EmbedTokens(embd_, batch, std::sqrt(float(hp.dim)), x_.data());
  for (int l = 0; l < hp.num_layers; ++l) {
    CTXPAR_RETURN_IF_ERROR(Attention(layers_[l], l, batch, kv));
    CTXPAR_RETURN_IF_ERROR(Mlp(layers_[l], n));
    CTXPAR_RETURN_IF_ERROR(
        CheckFinite(x_.data(), x_.size(), fmt::format("the output of layer {}", l), file_->path()));
  }
  model::WantedRows(batch, x_.data(), hp.dim, rows_);
  const int rows = static_cast<int>(batch.TotalLogitRows());
  logits.resize(std::size_t(rows) * hp.vocab_size);
  if (rows == 0) return Status::Ok();
  model::RmsNorm(rows_.data(), out_norm_, rows, hp.dim, hp.rms_eps, rows_.data());
  CTXPAR_RETURN_IF_ERROR(
      tp_.VocabLogits(lm_head_, vocab_shard_, hp.vocab_size, rows_.data(), rows, logits.data()));
  return CheckFinite(logits.data(), logits.size(), "the logits", file_->path());
}

}  // namespace

std::vector<KvGroupSpec> Gemma3KvGroups(const Gemma3Hparams& hp) {
  KvGroupSpec global{.layers = {}, .window = 0, .dcp_sharded = true};
  KvGroupSpec window{.layers = {}, .window = hp.window, .dcp_sharded = true};
  for (int l = 0; l < hp.num_layers; ++l)
    (hp.IsWindowLayer(l) ? window : global).layers.push_back(l);
  if (window.layers.empty()) return {};
  return {std::move(global), std::move(window)};
}

model::HeadLayout Gemma3HeadLayout(const Gemma3Hparams& hp) {
  return {.num_heads = hp.num_heads,
          .num_kv_heads = hp.num_kv_heads,
          .head_dim = hp.head_dim,
          .dim = hp.dim,
          .ffn_dim = hp.ffn_dim};
}

Expected<std::unique_ptr<Model>> CreateGemma3Model(std::shared_ptr<const GgufFile> file,
                                                   const Gemma3Hparams& hp, ModelDesc desc,
                                                   const EngineConfig& config, Communicator& world,
                                                   ThreadPool* pool) {
  if (world.size() != config.tp_size) {
    return InvalidArgument(fmt::format("tp_size ({}) must equal the TP communicator's size ({})",
                                       config.tp_size, world.size()));
  }
  const model::HeadLayout layout = Gemma3HeadLayout(hp);
  CTXPAR_RETURN_IF_ERROR(
      model::CheckHeadLayout(layout, "Gemma3ForCausalLM", config.tp_size, config.dcp_size));
  auto model =
      std::make_unique<Gemma3Model>(std::move(file), hp, std::move(desc), config, world, pool,
                                    model::MakeHeadShard(layout, config, world.rank()));
  CTXPAR_RETURN_IF_ERROR(model->Init(config));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace ctxpar
