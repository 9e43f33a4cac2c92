// The Llama forward over a Batch: one rank's shard of the weights (llama.h says which).
#include "models/llama.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "ctxpar/thread_pool.h"
#include "models/batch_attention.h"
#include "models/check_finite.h"
#include "models/linear.h"
#include "models/llama_ops.h"
#include "models/logits.h"

namespace ctxpar {

namespace {

Expected<model::QuantMatrix> Matrix(const GgufFile& f, const std::string& name, int64_t cols,
                                    int64_t rows) {
  CTXPAR_ASSIGN_OR_RETURN(const GgufTensor* t, f.FindTensor(name));
  if (t->shape.size() != 2 || t->shape[0] != cols || t->shape[1] != rows) {
    return InvalidArgument(
        fmt::format("tensor {} must have shape [{}, {}] (ne0, ne1)", name, cols, rows));
  }
  model::QuantMatrix m;
  if (t->type == GgmlType::kQ4_1) {
    m.type = model::WeightType::kQ4_1;
  } else if (t->type == GgmlType::kQ8_0) {
    m.type = model::WeightType::kQ8_0;
  } else {
    return Unimplemented(fmt::format("tensor {} has type {}; the Llama matmuls take Q4_1 or Q8_0",
                                     name, GgmlTypeName(t->type)));
  }
  m.data = t->data;
  m.rows = static_cast<int>(rows);
  m.cols = static_cast<int>(cols);
  m.row_stride = t->row_bytes();
  return m;
}

Expected<const float*> NormWeight(const GgufFile& f, const std::string& name, int64_t dim) {
  CTXPAR_ASSIGN_OR_RETURN(const GgufTensor* t, f.FindTensor(name));
  if (t->type != GgmlType::kF32 || t->num_elements() != dim) {
    return InvalidArgument(fmt::format("tensor {} must be F32 with {} elements", name, dim));
  }
  return reinterpret_cast<const float*>(t->data);
}

// Rows of an elementwise step (norms, RoPE, SwiGLU) are split over the pool when there are
// enough of them to pay for waking it: a prefill chunk otherwise leaves the pool idle for about
// a tenth of its time. Each row's bits do not depend on the split.
constexpr int kParallelRows = 32;

template <class F>
void ForRows(ThreadPool* pool, int n, const F& f) {
  if (pool == nullptr || n < kParallelRows) return f(0, n);
  pool->ParallelFor(n, [&](std::int64_t begin, std::int64_t end) {
    f(static_cast<int>(begin), static_cast<int>(end));
  });
}

struct Layer {
  const float* attn_norm = nullptr;
  const float* ffn_norm = nullptr;
  // The rank's rows: wq, wk, wv by head, gate and up by shard_.ffn_bounds, wo and down (all of
  // their columns) by shard_.dim_bounds.
  model::QuantMatrix wq, wk, wv, gate, up, wo, down;
};

class LlamaModel final : public Model {
 public:
  LlamaModel(std::shared_ptr<const GgufFile> file, const LlamaHparams& hp, ModelDesc desc,
             const EngineConfig& config, Communicator& world, ThreadPool* pool, LlamaShard shard)
      : file_(std::move(file)),
        hp_(hp),
        desc_(std::move(desc)),
        tp_size_(config.tp_size),
        world_(&world),
        pool_(pool),
        shard_(std::move(shard)),
        act_format_(config.llama_cpp_numerics ? model::ActFormat::kQ8 : model::ActFormat::kF32) {}

  Status Init(const EngineConfig& config);
  const ModelDesc& desc() const override { return desc_; }
  Status Forward(const Batch& batch, KvPool& kv, std::vector<float>& logits) override;

 private:
  Status Attention(const Layer& layer, int l, const Batch& batch, KvPool& kv);
  // out [n, bounds.back()]: columns [bounds[r], bounds[r + 1]) from rank r's `mine` [n, its
  // width] (collective over world_).
  Status GatherColumns(const float* mine, int n, const std::vector<int>& bounds,
                       std::vector<float>& out);
  // x += in w^T for in [n, w.cols], the rank computing its rows of w (dim_bounds): every output
  // is one dot product over all of w's columns whatever tp, so that tp changes no bit.
  Status AddProjection(const model::QuantMatrix& w, const float* in, int n);
  Status Logits(const Batch& batch, std::vector<float>& logits);
  // xn_ = RmsNorm(x_) with `weight`, over n rows.
  void Norm(const float* weight, int n);

  std::shared_ptr<const GgufFile> file_;
  LlamaHparams hp_;
  ModelDesc desc_;
  int tp_size_;
  Communicator* world_;
  ThreadPool* pool_;
  LlamaShard shard_;
  model::ActFormat act_format_;
  std::unique_ptr<Communicator> dcp_;
  std::unique_ptr<model::BatchAttention> attend_;
  std::vector<Layer> layers_;
  model::QuantMatrix embd_, lm_head_;
  int vocab_shard_ = 0;  // rows of lm_head per rank (the last rank's may be fewer)
  const float* out_norm_ = nullptr;

  std::vector<float> x_, xn_, q_, k_, v_, o_, gate_, up_, act_, rows_;
  std::vector<float> full_, y_, y_full_, send_, gathered_;
  std::vector<float> shard_logits_, all_logits_;
  std::vector<int> head_bounds_;  // tp + 1 columns of the attention output: rank r's heads
  std::vector<int> positions_;    // of the batch's rows
  model::Acts qa_;
};

Status LlamaModel::Init(const EngineConfig& config) {
  const GgufFile& f = *file_;
  const LlamaHparams& hp = hp_;
  const int hd = hp.head_dim;
  const LlamaShard& s = shard_;
  for (int r = 0; r <= tp_size_; ++r) head_bounds_.push_back(r * s.heads * hd);
  const int ffn_first = s.ffn_bounds[s.tp_rank];
  const int ffn_count = s.ffn_bounds[s.tp_rank + 1] - ffn_first;
  const int dim_first = s.dim_bounds[s.tp_rank];
  const int dim_count = s.dim_bounds[s.tp_rank + 1] - dim_first;
  for (int l = 0; l < hp.num_layers; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    Layer layer;
    CTXPAR_ASSIGN_OR_RETURN(layer.attn_norm, NormWeight(f, b + "attn_norm.weight", hp.dim));
    CTXPAR_ASSIGN_OR_RETURN(layer.ffn_norm, NormWeight(f, b + "ffn_norm.weight", hp.dim));
    CTXPAR_ASSIGN_OR_RETURN(auto wq, Matrix(f, b + "attn_q.weight", hp.dim, hp.num_heads * hd));
    CTXPAR_ASSIGN_OR_RETURN(auto wk, Matrix(f, b + "attn_k.weight", hp.dim, hp.num_kv_heads * hd));
    CTXPAR_ASSIGN_OR_RETURN(auto wv, Matrix(f, b + "attn_v.weight", hp.dim, hp.num_kv_heads * hd));
    CTXPAR_ASSIGN_OR_RETURN(auto wo, Matrix(f, b + "attn_output.weight", hp.dim, hp.dim));
    CTXPAR_ASSIGN_OR_RETURN(auto gate, Matrix(f, b + "ffn_gate.weight", hp.dim, hp.ffn_dim));
    CTXPAR_ASSIGN_OR_RETURN(auto up, Matrix(f, b + "ffn_up.weight", hp.dim, hp.ffn_dim));
    CTXPAR_ASSIGN_OR_RETURN(auto down, Matrix(f, b + "ffn_down.weight", hp.ffn_dim, hp.dim));
    layer.wq = wq.RowRange(s.q_first * hd, s.q_heads * hd);
    layer.wk = wk.RowRange(s.kv_first * hd, s.kv_heads * hd);
    layer.wv = wv.RowRange(s.kv_first * hd, s.kv_heads * hd);
    layer.gate = gate.RowRange(ffn_first, ffn_count);
    layer.up = up.RowRange(ffn_first, ffn_count);
    layer.wo = wo.RowRange(dim_first, dim_count);
    layer.down = down.RowRange(dim_first, dim_count);
    layers_.push_back(std::move(layer));
  }
  CTXPAR_ASSIGN_OR_RETURN(embd_, Matrix(f, "token_embd.weight", hp.dim, hp.vocab_size));
  model::QuantMatrix head = embd_;
  if (!hp.tied_embeddings) {
    CTXPAR_ASSIGN_OR_RETURN(head, Matrix(f, "output.weight", hp.dim, hp.vocab_size));
  }
  vocab_shard_ = (hp.vocab_size + tp_size_ - 1) / tp_size_;
  const int vocab_first = std::min(hp.vocab_size, s.tp_rank * vocab_shard_);
  lm_head_ = head.RowRange(vocab_first, std::min(hp.vocab_size - vocab_first, vocab_shard_));
  CTXPAR_ASSIGN_OR_RETURN(out_norm_, NormWeight(f, "output_norm.weight", hp.dim));

  const int n = config.dcp_size;
  CTXPAR_ASSIGN_OR_RETURN(dcp_, world_->Split(s.tp_rank / n, s.tp_rank));
  DcpOptions o = model::EngineDcpOptions(config, tp_size_, pool_);
  o.num_heads = hp.num_heads;
  o.head_dim_qk = hd;
  o.head_dim_v = hd;
  o.scale = 1.0f / std::sqrt(float(hd));
  CTXPAR_ASSIGN_OR_RETURN(attend_, model::BatchAttention::Create(o, dcp_.get()));
  return Status::Ok();
}

void LlamaModel::Norm(const float* weight, int n) {
  const int dim = hp_.dim;
  ForRows(pool_, n, [&](int begin, int end) {
    const std::size_t first = std::size_t(begin) * dim;
    model::RmsNorm(x_.data() + first, weight, end - begin, dim, hp_.rms_eps, xn_.data() + first);
  });
}

Status LlamaModel::GatherColumns(const float* mine, int n, const std::vector<int>& bounds,
                                 std::vector<float>& out) {
  const int total = bounds.back();
  int width = 0;
  for (int r = 0; r < tp_size_; ++r) width = std::max(width, bounds[r + 1] - bounds[r]);
  const int own = bounds[shard_.tp_rank + 1] - bounds[shard_.tp_rank];
  // Uneven shards travel padded to the widest.
  send_.assign(std::size_t(n) * width, 0.0f);
  for (int t = 0; t < n; ++t) {
    std::copy_n(mine + std::size_t(t) * own, own, send_.begin() + std::size_t(t) * width);
  }
  gathered_.resize(send_.size() * tp_size_);
  CTXPAR_RETURN_IF_ERROR(
      world_->AllGather(send_.data(), gathered_.data(), send_.size(), DataType::kF32));
  out.resize(std::size_t(n) * total);
  for (int r = 0; r < tp_size_; ++r) {
    for (int t = 0; t < n; ++t) {
      std::copy_n(gathered_.begin() + (std::size_t(r) * n + t) * width, bounds[r + 1] - bounds[r],
                  out.begin() + std::size_t(t) * total + bounds[r]);
    }
  }
  return Status::Ok();
}

Status LlamaModel::AddProjection(const model::QuantMatrix& w, const float* in, int n) {
  model::PrepareActs(act_format_, w.type, in, n, w.cols, w.cols, &qa_);
  y_.resize(std::size_t(n) * w.rows);
  model::MatMul(w, qa_, y_.data(), w.rows, pool_);
  const float* y = y_.data();
  if (tp_size_ > 1) {
    CTXPAR_RETURN_IF_ERROR(GatherColumns(y_.data(), n, shard_.dim_bounds, y_full_));
    y = y_full_.data();
  }
  for (std::size_t i = 0; i < x_.size(); ++i) x_[i] += y[i];
  return Status::Ok();
}

Status LlamaModel::Attention(const Layer& layer, int l, const Batch& batch, KvPool& kv) {
  const int hd = hp_.head_dim;
  const int n = static_cast<int>(batch.num_tokens());
  const LlamaShard& s = shard_;
  Norm(layer.attn_norm, n);
  model::PrepareActs(act_format_, layer.wq.type, xn_.data(), n, hp_.dim, hp_.dim, &qa_);
  const std::size_t q_row = std::size_t(s.q_heads) * hd, kv_row = std::size_t(s.kv_heads) * hd;
  q_.resize(n * q_row);
  k_.resize(n * kv_row);
  v_.resize(n * kv_row);
  const model::MatMulOut qkv[] = {{layer.wq, q_.data(), s.q_heads * hd},
                                  {layer.wk, k_.data(), s.kv_heads * hd},
                                  {layer.wv, v_.data(), s.kv_heads * hd}};
  model::MatMulMany(qkv, qa_, pool_);
  ForRows(pool_, n, [&](int begin, int end) {
    for (int row = begin; row < end; ++row) {
      const int pos = positions_[row];
      model::RopeNormal(q_.data() + row * q_row, s.q_heads, hd, hp_.rope_dims, hp_.rope_base, pos);
      model::RopeNormal(k_.data() + row * kv_row, s.kv_heads, hd, hp_.rope_dims, hp_.rope_base,
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
  if (tp_size_ == 1) return AddProjection(layer.wo, o_.data(), n);
  CTXPAR_RETURN_IF_ERROR(GatherColumns(o_.data(), n, head_bounds_, full_));
  return AddProjection(layer.wo, full_.data(), n);
}

Status LlamaModel::Logits(const Batch& batch, std::vector<float>& logits) {
  const int dim = hp_.dim, vocab = hp_.vocab_size;
  model::WantedRows(batch, x_.data(), dim, rows_);
  const int n = static_cast<int>(batch.TotalLogitRows());
  logits.resize(std::size_t(n) * vocab);
  if (n == 0) return Status::Ok();
  model::RmsNorm(rows_.data(), out_norm_, n, dim, hp_.rms_eps, rows_.data());
  model::PrepareActs(act_format_, lm_head_.type, rows_.data(), n, dim, dim, &qa_);
  if (tp_size_ == 1) {
    model::MatMul(lm_head_, qa_, logits.data(), vocab, pool_);
  } else {
    shard_logits_.assign(std::size_t(n) * vocab_shard_, 0.0f);
    model::MatMul(lm_head_, qa_, shard_logits_.data(), vocab_shard_, pool_);
    CTXPAR_RETURN_IF_ERROR(model::GatherVocabShards(*world_, shard_logits_.data(), n, vocab_shard_,
                                                    vocab, all_logits_, logits.data()));
  }
  return CheckFinite(logits.data(), logits.size(), "the logits", file_->path());
}

Status LlamaModel::Forward(const Batch& batch, KvPool& kv, std::vector<float>& logits) {
  const LlamaHparams& hp = hp_;
  const int n = static_cast<int>(batch.num_tokens());
  if (n < 1) return InvalidArgument("Forward: the batch has no token");
  for (int t = 0; t < n; ++t) {
    if (batch.tokens[t] < 0 || batch.tokens[t] >= hp.vocab_size) {
      return InvalidArgument(
          fmt::format("token id {} at index {} is outside the vocabulary [0, {})", batch.tokens[t],
                      t, hp.vocab_size));
    }
  }
  positions_.resize(n);
  for (const BatchSeq& seq : batch.seqs) {
    for (int32_t t = 0; t < seq.num_tokens; ++t) {
      positions_[seq.token_offset + t] = static_cast<int>(seq.pos0 + t);
    }
  }
  const int dim = hp.dim;
  x_.resize(std::size_t(n) * dim);
  xn_.resize(x_.size());
  for (int t = 0; t < n; ++t) model::DequantizeRow(embd_, batch.tokens[t], x_.data() + t * dim);
  const int ffn_shard = layers_.empty() ? 0 : layers_[0].gate.rows;
  for (int l = 0; l < hp.num_layers; ++l) {
    const Layer& layer = layers_[l];
    CTXPAR_RETURN_IF_ERROR(Attention(layer, l, batch, kv));
    Norm(layer.ffn_norm, n);
    model::PrepareActs(act_format_, layer.gate.type, xn_.data(), n, dim, dim, &qa_);
    gate_.resize(std::size_t(n) * ffn_shard);
    up_.resize(gate_.size());
    act_.resize(gate_.size());
    const model::MatMulOut gate_up[] = {{layer.gate, gate_.data(), ffn_shard},
                                        {layer.up, up_.data(), ffn_shard}};
    model::MatMulMany(gate_up, qa_, pool_);
    ForRows(pool_, n, [&](int begin, int end) {
      const std::size_t first = std::size_t(begin) * ffn_shard;
      model::SwiGlu(gate_.data() + first, up_.data() + first, (end - begin) * ffn_shard,
                    act_.data() + first);
    });
    const float* act = act_.data();
    if (tp_size_ > 1) {
      CTXPAR_RETURN_IF_ERROR(GatherColumns(act, n, shard_.ffn_bounds, full_));
      act = full_.data();
    }
    CTXPAR_RETURN_IF_ERROR(AddProjection(layer.down, act, n));
    CTXPAR_RETURN_IF_ERROR(
        CheckFinite(x_.data(), x_.size(), fmt::format("the output of layer {}", l), file_->path()));
  }
  return Logits(batch, logits);
}

}  // namespace

Expected<std::unique_ptr<Model>> CreateLlamaModel(std::shared_ptr<const GgufFile> file,
                                                  const LlamaHparams& hp, ModelDesc desc,
                                                  const EngineConfig& config, Communicator& world,
                                                  ThreadPool* pool) {
  if (world.size() != config.tp_size) {
    return InvalidArgument(fmt::format("tp_size ({}) must equal the TP communicator's size ({})",
                                       config.tp_size, world.size()));
  }
  CTXPAR_RETURN_IF_ERROR(CheckLlamaLayout(hp, config.tp_size, config.dcp_size));
  LlamaShard shard = MakeLlamaShard(hp, config, world.rank());
  auto model = std::make_unique<LlamaModel>(std::move(file), hp, std::move(desc), config, world,
                                            pool, std::move(shard));
  CTXPAR_RETURN_IF_ERROR(model->Init(config));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace ctxpar
