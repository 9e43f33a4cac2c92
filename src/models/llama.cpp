#include "ctxpar/llama.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ctxpar/gguf_hparams.h"
#include "ctxpar/kv_cache.h"
#include "models/linear.h"
#include "models/llama_attention.h"
#include "models/llama_ops.h"

namespace ctxpar {

namespace {

Expected<int> ReadPositive(const GgufFile& f, const std::string& key) {
  return ReadIntHparam(f, key, 1, 1 << 30);
}

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

struct Layer {
  const float* attn_norm = nullptr;
  const float* ffn_norm = nullptr;
  model::QuantMatrix wq, wk, wv, wo, gate, up, down;
};

}  // namespace

Expected<LlamaHparams> ReadLlamaHparams(const GgufFile& f) {
  LlamaHparams hp;
  CTXPAR_ASSIGN_OR_RETURN(hp.architecture, f.GetString("general.architecture"));
  const std::string a = hp.architecture + ".";
  CTXPAR_ASSIGN_OR_RETURN(hp.dim, ReadPositive(f, a + "embedding_length"));
  CTXPAR_ASSIGN_OR_RETURN(hp.num_layers, ReadPositive(f, a + "block_count"));
  CTXPAR_ASSIGN_OR_RETURN(hp.num_heads, ReadPositive(f, a + "attention.head_count"));
  CTXPAR_ASSIGN_OR_RETURN(hp.num_kv_heads, ReadPositive(f, a + "attention.head_count_kv"));
  CTXPAR_ASSIGN_OR_RETURN(hp.ffn_dim, ReadPositive(f, a + "feed_forward_length"));
  CTXPAR_ASSIGN_OR_RETURN(hp.context_length, ReadPositive(f, a + "context_length"));
  if (hp.dim % hp.num_heads != 0) {
    return HparamError(f, a + "embedding_length", hp.dim,
                       fmt::format("it must be divisible by {}attention.head_count ({})", a,
                                   hp.num_heads));
  }
  if (hp.num_heads % hp.num_kv_heads != 0) {
    return HparamError(f, a + "attention.head_count", hp.num_heads,
                       fmt::format("it must be a multiple of {}attention.head_count_kv ({})", a,
                                   hp.num_kv_heads));
  }
  hp.head_dim = hp.dim / hp.num_heads;
  CTXPAR_ASSIGN_OR_RETURN(hp.rope_dims, ReadIntHparam(f, a + "rope.dimension_count", 1, 1 << 30,
                                                      hp.head_dim));
  if (hp.rope_dims > hp.head_dim || hp.rope_dims % 2 != 0 || hp.rope_dims > 512) {
    return HparamError(
        f, a + "rope.dimension_count", hp.rope_dims,
        fmt::format("it must be even and at most the head dim ({}) and 512", hp.head_dim));
  }
  CTXPAR_ASSIGN_OR_RETURN(hp.rope_base, ReadFloatHparam(f, a + "rope.freq_base",
                                                        kRopeFreqBaseRange, hp.rope_base));
  CTXPAR_ASSIGN_OR_RETURN(hp.rms_eps, ReadFloatHparam(f, a + "attention.layer_norm_rms_epsilon",
                                                      kRmsEpsilonRange));
  CTXPAR_ASSIGN_OR_RETURN(const GgufTensor* embd, f.FindTensor("token_embd.weight"));
  if (embd->shape.size() != 2 || embd->shape[0] != hp.dim || embd->shape[1] < 1 ||
      embd->shape[1] > (1 << 30)) {
    return HparamError(f, "the shape of tensor token_embd.weight",
                       fmt::format("[{}]", fmt::join(embd->shape, ", ")),
                       fmt::format("it must be [{}, n_vocab] with n_vocab in [1, 2^30]", hp.dim));
  }
  hp.vocab_size = static_cast<int>(embd->shape[1]);
  hp.tied_embeddings = !f.FindTensor("output.weight").ok();
  return hp;
}

struct LlamaModel::Impl {
  std::shared_ptr<const GgufFile> file;
  LlamaHparams hp;
  LlamaParallel par;
  Communicator* tp = nullptr;
  std::unique_ptr<Communicator> dcp;
  int tp_rank = 0;
  int dcp_rank = 0;
  int heads = 0;     // q heads of this rank (o_proj)
  int kv_heads = 0;  // kv heads of the rank's DCP group (its cache)
  int q_heads = 0;   // heads this rank projects Q for
  int segments = 0;  // column segments of the row-sharded products
  int own_segments = 0;
  std::vector<Layer> layers;
  model::QuantMatrix embd, lm_head;
  const float* out_norm = nullptr;
  std::vector<KvCache> caches;
  int seq = 0;
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<model::DcpAttend> attend;

  std::vector<float> x, xn, q, k, v, o, gate, up, act, partial, gathered, logits;
  model::Acts qa;
  model::ActFormat act_format = model::ActFormat::kF32;

  Status ReduceSegments(int n, int seg_cols, const model::QuantMatrix& w, int col0);
  Status Attention(const Layer& layer, int layer_index, int n, int p0);
};

LlamaModel::LlamaModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LlamaModel::~LlamaModel() = default;

const LlamaHparams& LlamaModel::hparams() const { return impl_->hp; }
int LlamaModel::position() const { return static_cast<int>(impl_->caches[0].length(impl_->seq)); }

Expected<std::unique_ptr<LlamaModel>> LlamaModel::Create(std::shared_ptr<const GgufFile> file,
                                                         Communicator& tp,
                                                         const LlamaParallel& par) {
  auto impl = std::make_unique<Impl>();
  CTXPAR_ASSIGN_OR_RETURN(impl->hp, ReadLlamaHparams(*file));
  const LlamaHparams& hp = impl->hp;
  if (tp.size() != par.tp_size) {
    return InvalidArgument(fmt::format("tp_size ({}) must equal the TP communicator's size ({})",
                                       par.tp_size, tp.size()));
  }
  if (par.tp_size < 1 || hp.num_kv_heads % par.tp_size != 0) {
    return InvalidArgument(fmt::format("tp_size ({}) must divide the model's kv heads ({})",
                                       par.tp_size, hp.num_kv_heads));
  }
  if (par.dcp_size < 1 || par.tp_size % par.dcp_size != 0) {
    return InvalidArgument(
        fmt::format("tp_size ({}) must be divisible by dcp_size ({}).", par.tp_size, par.dcp_size));
  }
  if (hp.ffn_dim % (hp.num_kv_heads * model::kBlock) != 0 || hp.head_dim % model::kBlock != 0 ||
      hp.dim % model::kBlock != 0 || hp.vocab_size % par.tp_size != 0) {
    return Unimplemented(fmt::format(
        "the sharded matmuls need head_dim ({}), dim ({}) and ffn_dim / kv_heads ({}) to be "
        "multiples of 32 and vocab ({}) divisible by tp_size ({})",
        hp.head_dim, hp.dim, hp.ffn_dim / hp.num_kv_heads, hp.vocab_size, par.tp_size));
  }
  if (par.max_seq_len < 1 || par.max_seq_len > hp.context_length) {
    return InvalidArgument(fmt::format("max_seq_len ({}) must be in [1, context_length = {}]",
                                       par.max_seq_len, hp.context_length));
  }
  if (par.num_threads < 1 || par.page_size < 1) {
    return InvalidArgument(fmt::format("num_threads ({}) and page_size ({}) must be >= 1",
                                       par.num_threads, par.page_size));
  }
  impl->file = file;
  impl->par = par;
  impl->tp = &tp;
  impl->tp_rank = tp.rank();
  const int n = par.dcp_size;
  impl->dcp_rank = impl->tp_rank % n;
  CTXPAR_ASSIGN_OR_RETURN(impl->dcp, tp.Split(impl->tp_rank / n, impl->tp_rank));
  impl->heads = hp.num_heads / par.tp_size;
  impl->kv_heads = hp.num_kv_heads / par.tp_size * n;
  impl->q_heads = par.replicate_q_proj ? impl->heads * n : impl->heads;
  impl->segments = hp.num_kv_heads;
  impl->own_segments = hp.num_kv_heads / par.tp_size;
  const int hd = hp.head_dim;
  const int group = impl->tp_rank / n;
  const int q_first = par.replicate_q_proj ? group * impl->heads * n : impl->tp_rank * impl->heads;
  const int ffn_shard = hp.ffn_dim / par.tp_size;
  const GgufFile& f = *file;
  for (int l = 0; l < hp.num_layers; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    Layer layer;
    CTXPAR_ASSIGN_OR_RETURN(layer.attn_norm, NormWeight(f, b + "attn_norm.weight", hp.dim));
    CTXPAR_ASSIGN_OR_RETURN(layer.ffn_norm, NormWeight(f, b + "ffn_norm.weight", hp.dim));
    CTXPAR_ASSIGN_OR_RETURN(auto wq, Matrix(f, b + "attn_q.weight", hp.dim, hp.num_heads * hd));
    CTXPAR_ASSIGN_OR_RETURN(auto wk, Matrix(f, b + "attn_k.weight", hp.dim, hp.num_kv_heads * hd));
    CTXPAR_ASSIGN_OR_RETURN(auto wv, Matrix(f, b + "attn_v.weight", hp.dim, hp.num_kv_heads * hd));
    CTXPAR_ASSIGN_OR_RETURN(layer.wo, Matrix(f, b + "attn_output.weight", hp.dim, hp.dim));
    CTXPAR_ASSIGN_OR_RETURN(auto gate, Matrix(f, b + "ffn_gate.weight", hp.dim, hp.ffn_dim));
    CTXPAR_ASSIGN_OR_RETURN(auto up, Matrix(f, b + "ffn_up.weight", hp.dim, hp.ffn_dim));
    CTXPAR_ASSIGN_OR_RETURN(layer.down, Matrix(f, b + "ffn_down.weight", hp.ffn_dim, hp.dim));
    layer.wq = wq.RowRange(q_first * hd, impl->q_heads * hd);
    layer.wk = wk.RowRange(group * impl->kv_heads * hd, impl->kv_heads * hd);
    layer.wv = wv.RowRange(group * impl->kv_heads * hd, impl->kv_heads * hd);
    layer.gate = gate.RowRange(impl->tp_rank * ffn_shard, ffn_shard);
    layer.up = up.RowRange(impl->tp_rank * ffn_shard, ffn_shard);
    impl->layers.push_back(layer);
  }
  CTXPAR_ASSIGN_OR_RETURN(impl->embd, Matrix(f, "token_embd.weight", hp.dim, hp.vocab_size));
  model::QuantMatrix head = impl->embd;
  if (!hp.tied_embeddings) {
    CTXPAR_ASSIGN_OR_RETURN(head, Matrix(f, "output.weight", hp.dim, hp.vocab_size));
  }
  const int vocab_shard = hp.vocab_size / par.tp_size;
  impl->lm_head = head.RowRange(impl->tp_rank * vocab_shard, vocab_shard);
  CTXPAR_ASSIGN_OR_RETURN(impl->out_norm, NormWeight(f, "output_norm.weight", hp.dim));

  KvCacheOptions kv;
  kv.dcp_size = n;
  kv.dcp_rank = impl->dcp_rank;
  kv.page_size = par.page_size;
  kv.max_pages_per_seq = (par.max_seq_len + par.page_size * n - 1) / (par.page_size * n);
  kv.num_pages = kv.max_pages_per_seq;
  kv.max_seqs = 1;
  kv.num_kv_heads = impl->kv_heads;
  kv.head_dim_qk = hd;
  kv.head_dim_v = hd;
  // The attention runs on the CPU kernels, which read 16-slot tiles fastest; K and V are separate
  // (GQA), so only the page size decides (LlamaParallel's default, 16, allows it).
  kv.format = par.page_size % 16 == 0 ? KvPageFormat::kTiles16 : KvPageFormat::kRows;
  for (int l = 0; l < hp.num_layers; ++l) {
    CTXPAR_ASSIGN_OR_RETURN(KvCache cache, KvCache::Create(kv));
    impl->caches.push_back(std::move(cache));
  }
  for (KvCache& c : impl->caches) {
    CTXPAR_ASSIGN_OR_RETURN(impl->seq, c.AddSequence());
  }
  CTXPAR_ASSIGN_OR_RETURN(impl->pool, ThreadPool::Create(par.num_threads));
  impl->act_format = par.quantize_activations ? model::ActFormat::kQ8 : model::ActFormat::kF32;
  CTXPAR_ASSIGN_OR_RETURN(impl->attend, model::DcpAttend::Create(impl->dcp.get(), par, hp.num_heads,
                                                                 hd, impl->pool.get()));
  return std::unique_ptr<LlamaModel>(new LlamaModel(std::move(impl)));
}

Status LlamaModel::Reset() {
  for (KvCache& c : impl_->caches) {
    CTXPAR_RETURN_IF_ERROR(c.FreeSequence(impl_->seq));
    CTXPAR_ASSIGN_OR_RETURN(impl_->seq, c.AddSequence());
  }
  return Status::Ok();
}

// x += (partial_0 + partial_1 + ...) over the `segments` column segments of the row-sharded w,
// in segment order, whichever rank computed each. The rank's input (its columns of the
// activation, quantized in qa) starts at its first segment; col0 is w's column of that start.
Status LlamaModel::Impl::ReduceSegments(int n, int seg_cols, const model::QuantMatrix& w,
                                        int col0) {
  const int dim = hp.dim;
  const std::size_t seg_elems = std::size_t(n) * dim;
  partial.resize(seg_elems * own_segments);
  for (int s = 0; s < own_segments; ++s) {
    model::MatMul(w.ColRange(col0 + s * seg_cols, seg_cols), qa, s * seg_cols,
                  partial.data() + s * seg_elems, dim, pool.get());
  }
  const float* all = partial.data();
  if (par.tp_size > 1) {
    gathered.resize(seg_elems * segments);
    CTXPAR_RETURN_IF_ERROR(
        tp->AllGather(partial.data(), gathered.data(), partial.size(), DataType::kF32));
    all = gathered.data();
  }
  for (std::size_t i = 0; i < seg_elems; ++i) {
    float sum = all[i];
    for (int s = 1; s < segments; ++s) sum += all[s * seg_elems + i];
    x[i] += sum;
  }
  return Status::Ok();
}

Status LlamaModel::Impl::Attention(const Layer& layer, int l, int n, int p0) {
  const int hd = hp.head_dim;
  model::RmsNorm(x.data(), layer.attn_norm, n, hp.dim, hp.rms_eps, xn.data());
  model::PrepareActs(act_format, layer.wq.type, xn.data(), n, hp.dim, hp.dim, &qa);
  q.resize(std::size_t(n) * q_heads * hd);
  k.resize(std::size_t(n) * kv_heads * hd);
  v.resize(k.size());
  model::MatMul(layer.wq, qa, 0, q.data(), q_heads * hd, pool.get());
  model::MatMul(layer.wk, qa, 0, k.data(), kv_heads * hd, pool.get());
  model::MatMul(layer.wv, qa, 0, v.data(), kv_heads * hd, pool.get());
  for (int t = 0; t < n; ++t) {
    model::RopeNormal(q.data() + std::size_t(t) * q_heads * hd, q_heads, hd, hp.rope_dims,
                      hp.rope_base, p0 + t);
    model::RopeNormal(k.data() + std::size_t(t) * kv_heads * hd, kv_heads, hd, hp.rope_dims,
                      hp.rope_base, p0 + t);
  }
  KvCache& cache = caches[l];
  CTXPAR_RETURN_IF_ERROR(cache.Append(seq, k.data(), v.data(), n));
  o.resize(std::size_t(n) * heads * hd);
  CTXPAR_RETURN_IF_ERROR(attend->Run(cache, seq, p0, n, q.data(), o.data()));
  model::PrepareActs(act_format, layer.wo.type, o.data(), n, heads * hd, heads * hd, &qa);
  const int seg_cols = hp.dim / segments;
  return ReduceSegments(n, seg_cols, layer.wo, tp_rank * own_segments * seg_cols);
}

Expected<std::vector<float>> LlamaModel::Forward(std::span<const int32_t> tokens) {
  Impl& m = *impl_;
  const LlamaHparams& hp = m.hp;
  const int n = static_cast<int>(tokens.size());
  const int p0 = position();
  if (n < 1) return InvalidArgument("Forward needs at least one token, but got 0");
  if (int64_t{p0} + n > m.par.max_seq_len) {
    return OutOfRange(fmt::format("the sequence would reach {} tokens, past max_seq_len ({})",
                                  int64_t{p0} + n, m.par.max_seq_len));
  }
  for (int t = 0; t < n; ++t) {
    if (tokens[t] < 0 || tokens[t] >= hp.vocab_size) {
      return InvalidArgument(
          fmt::format("token id {} at index {} is outside the vocabulary [0, {})", tokens[t], t,
                      hp.vocab_size));
    }
  }
  const int dim = hp.dim;
  m.x.resize(std::size_t(n) * dim);
  m.xn.resize(m.x.size());
  for (int t = 0; t < n; ++t) model::DequantizeRow(m.embd, tokens[t], m.x.data() + t * dim);
  const int ffn_shard = hp.ffn_dim / m.par.tp_size;
  for (int l = 0; l < hp.num_layers; ++l) {
    const Layer& layer = m.layers[l];
    CTXPAR_RETURN_IF_ERROR(m.Attention(layer, l, n, p0));
    model::RmsNorm(m.x.data(), layer.ffn_norm, n, dim, hp.rms_eps, m.xn.data());
    model::PrepareActs(m.act_format, layer.gate.type, m.xn.data(), n, dim, dim, &m.qa);
    m.gate.resize(std::size_t(n) * ffn_shard);
    m.up.resize(m.gate.size());
    m.act.resize(m.gate.size());
    model::MatMul(layer.gate, m.qa, 0, m.gate.data(), ffn_shard, m.pool.get());
    model::MatMul(layer.up, m.qa, 0, m.up.data(), ffn_shard, m.pool.get());
    model::SwiGlu(m.gate.data(), m.up.data(), static_cast<int>(m.gate.size()), m.act.data());
    model::PrepareActs(m.act_format, layer.down.type, m.act.data(), n, ffn_shard, ffn_shard, &m.qa);
    const int seg_cols = hp.ffn_dim / m.segments;
    CTXPAR_RETURN_IF_ERROR(
        m.ReduceSegments(n, seg_cols, layer.down, m.tp_rank * m.own_segments * seg_cols));
  }
  const float* last = m.x.data() + std::size_t(n - 1) * dim;
  model::RmsNorm(last, m.out_norm, 1, dim, hp.rms_eps, m.xn.data());
  model::PrepareActs(m.act_format, m.lm_head.type, m.xn.data(), 1, dim, dim, &m.qa);
  std::vector<float> logits(hp.vocab_size);
  const int shard = m.lm_head.rows;
  if (m.par.tp_size == 1) {
    model::MatMul(m.lm_head, m.qa, 0, logits.data(), shard, m.pool.get());
  } else {
    m.logits.resize(shard);
    model::MatMul(m.lm_head, m.qa, 0, m.logits.data(), shard, m.pool.get());
    CTXPAR_RETURN_IF_ERROR(m.tp->AllGather(m.logits.data(), logits.data(), shard, DataType::kF32));
  }
  return logits;
}

}  // namespace ctxpar
