#include "models/deepseek_mla.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "ctxpar/attention.h"
#include "models/layers/compute_types.h"
#include "models/layers/tp_linear.h"

namespace ctxpar::model {

namespace {

// Page size of the decompressed K/V of a prefill: the CPU kernels' 16-slot tiles.
constexpr int kPrefillPage = 16;

// The CP rank that computes token i of a sequence's n new tokens.
int CpRankOf(CpStrategy strategy, int cp, int64_t i, int64_t n) {
  if (strategy == CpStrategy::kInterleave) return static_cast<int>(i % cp);
  // Zigzag: 2cp blocks, block k = [floor(k n / 2cp), floor((k + 1) n / 2cp)).
  const int64_t m = 2 * int64_t{cp};
  const int k = static_cast<int>(((i + 1) * m + n - 1) / n - 1);
  return k < cp ? k : static_cast<int>(m - 1 - k);
}

// transformers' YaRN of a DeepSeek config: cos and sin by attention_factor, else mscale over
// mscale_all_dim where both are given, else mscale(factor, 1).
HfYarn HfYarnOf(const DeepseekV3Config::Yarn& y) {
  double attention = YarnMscale<double>(y.factor, 1.0);
  if (y.attention_factor.has_value()) {
    attention = *y.attention_factor;
  } else if (y.mscale != 0.0 && y.mscale_all_dim != 0.0) {
    attention = YarnMscale(y.factor, y.mscale) / YarnMscale(y.factor, y.mscale_all_dim);
  }
  return {.factor = y.factor,
          .original_context = y.original_max_position_embeddings,
          .beta_fast = y.beta_fast,
          .beta_slow = y.beta_slow,
          .truncate = y.truncate,
          .attention_factor = attention};
}

}  // namespace

Expected<MlaWeights> LoadMlaWeights(const DeepseekWeights& weights, const DeepseekV3Config& c,
                                    const DeepseekShard& s, int layer) {
  const std::string p = fmt::format("model.layers.{}.", layer);
  const std::string a = p + "self_attn.";
  const int64_t d = c.hidden_size, H = c.num_attention_heads, qk = c.qk_head_dim();
  const int64_t nope = c.qk_nope_head_dim, dv = c.v_head_dim, lora = c.kv_lora_rank;
  const int64_t L = lora + c.qk_rope_head_dim, kvb = nope + dv;
  MlaWeights w;
  CTXPAR_ASSIGN_OR_RETURN(w.input_norm, LoadVector(weights, p + "input_layernorm.weight", d));
  if (c.q_lora_rank == 0) {
    // No q LoRA (DeepSeek-V2-Lite): q_proj takes the hidden row where q_b takes q_a's.
    CTXPAR_ASSIGN_OR_RETURN(w.q_b, LoadRows(weights, a + "q_proj.weight", H * qk, d,
                                            s.span_first * qk, s.span_heads * qk));
  } else {
    CTXPAR_ASSIGN_OR_RETURN(
        w.q_a, LoadRows(weights, a + "q_a_proj.weight", c.q_lora_rank, d, 0, c.q_lora_rank));
    CTXPAR_ASSIGN_OR_RETURN(w.q_a_norm,
                            LoadVector(weights, a + "q_a_layernorm.weight", c.q_lora_rank));
    CTXPAR_ASSIGN_OR_RETURN(w.q_b, LoadRows(weights, a + "q_b_proj.weight", H * qk, c.q_lora_rank,
                                            s.span_first * qk, s.span_heads * qk));
  }
  CTXPAR_ASSIGN_OR_RETURN(w.kv_a, LoadRows(weights, a + "kv_a_proj_with_mqa.weight", L, d, 0, L));
  CTXPAR_ASSIGN_OR_RETURN(w.kv_a_norm, LoadVector(weights, a + "kv_a_layernorm.weight", lora));
  CTXPAR_ASSIGN_OR_RETURN(w.kv_b, LoadRows(weights, a + "kv_b_proj.weight", H * kvb, lora,
                                           s.span_first * kvb, s.span_heads * kvb));
  CTXPAR_ASSIGN_OR_RETURN(w.o_proj, LoadCols(weights, a + "o_proj.weight", d, H * dv,
                                             s.span_first * dv, s.span_heads * dv));
  // kv_b_proj holds, per head, W_UK [nope, lora] then W_UV [dv, lora]. The absorbed form needs
  // W_UK transposed (q_nope -> latent) for the decode Q heads and W_UV for the own heads.
  const F32HeadSpan kv_b{
      {w.kv_b.data(), int(s.span_heads * kvb), int(lora), int(lora)}, s.span_first, int(kvb)};
  w.w_kc.resize(s.q_heads * lora * nope);
  for (int j = 0; j < s.q_heads; ++j) {
    const float* uk = kv_b.Rows(s.q_first + j, 1).w;
    for (int64_t n = 0; n < nope; ++n) {
      for (int64_t r = 0; r < lora; ++r) w.w_kc[(j * lora + r) * nope + n] = uk[n * lora + r];
    }
  }
  w.w_vc.resize(s.heads * dv * lora);
  for (int j = 0; j < s.heads; ++j) {
    const float* uv = kv_b.Rows(s.head_first + j, 1).w + nope * lora;
    std::copy_n(uv, dv * lora, w.w_vc.data() + j * dv * lora);
  }
  return w;
}

MlaAttention::MlaAttention(const DeepseekV3Config& c, const DeepseekShard& s, Communicator& tp,
                           compute::Compute& compute)
    : c_(c),
      s_(s),
      tp_(&tp, &compute),
      compute_(compute),
      // transformers keeps inv_freq as a module buffer, which takes the dtype the model runs in:
      // run in its checkpoint's bf16 (or f16), the model rotates by frequencies rounded to it,
      // and so does the reference checkpoint's golden forward. ctxpar follows the checkpoint.
      rope_(c.yarn.has_value()
                ? RopeAngles::HfTable(c.qk_rope_head_dim, float(c.rope_theta), c.dtype,
                                      HfYarnOf(*c.yarn))
                : RopeAngles::HfTable(c.qk_rope_head_dim, float(c.rope_theta), c.dtype)) {
  scale_ = 1.0f / std::sqrt(float(c.qk_head_dim()));
  // YaRN's mscale_all_dim scales every dim of q . k, the latent's included (transformers'
  // yarn_apply_mscale, llama.cpp's kq_scale): mscale^2 in Python's double.
  if (c.yarn.has_value() && c.yarn->mscale_all_dim != 0.0) {
    const double m = YarnMscale(c.yarn->factor, c.yarn->mscale_all_dim);
    scale_ = static_cast<float>(std::pow(double(c.qk_head_dim()), -0.5) * m * m);
  }
}

Expected<std::unique_ptr<MlaAttention>> MlaAttention::Create(const DeepseekV3Config& c,
                                                             const DeepseekShard& s,
                                                             const EngineConfig& config,
                                                             Communicator& tp,
                                                             compute::Compute& compute) {
  std::unique_ptr<MlaAttention> m(new MlaAttention(c, s, tp, compute));
  CTXPAR_ASSIGN_OR_RETURN(m->dcp_, tp.Split(s.tp_rank / s.dcp_size, s.tp_rank));
  CTXPAR_ASSIGN_OR_RETURN(m->cp_, tp.Split(s.attn_tp_rank, s.cp_rank));
  DcpOptions o = EngineDcpOptions(config, s.tp_size, compute);
  o.num_heads = c.num_attention_heads;
  o.head_dim_qk = c.kv_lora_rank + c.qk_rope_head_dim;
  o.head_dim_v = c.kv_lora_rank;
  o.scale = m->scale_;
  CTXPAR_ASSIGN_OR_RETURN(m->decode_, BatchAttention::Create(o, m->dcp_.get()));
  return m;
}

void MlaAttention::MakePlan(const Batch& batch) {
  const std::size_t T = batch.tokens.size();
  pos_.resize(T);
  dec_rows_.clear();
  pre_rows_.clear();
  latent_rows_.clear();
  row_cp_.assign(T, -1);
  dec_batch_ = Batch();
  for (const BatchSeq& seq : batch.seqs) {
    const bool prefill = seq.pos0 == 0 || seq.num_tokens > 1;
    for (int32_t t = 0; t < seq.num_tokens; ++t) {
      const int32_t row = seq.token_offset + t;
      pos_[row] = seq.pos0 + t;
      if (!prefill) {
        dec_rows_.push_back(row);
        latent_rows_.push_back(row);
        continue;
      }
      int cp = 0;
      if (s_.cp_size > 1) {
        cp = CpRankOf(s_.cp_strategy, s_.cp_size, t, seq.num_tokens);
        row_cp_[row] = cp;
      }
      if (cp == s_.cp_rank) {
        pre_rows_.push_back(row);
        latent_rows_.push_back(row);
      }
    }
    if (!prefill) dec_batch_.Add(seq.slot, seq.pos0, batch.tokens.data() + seq.token_offset, 1);
  }
}

// The latent [kv_lora | rope] of the rows this rank computes; with prefill CP the CP group
// exchanges its rows, so that every rank holds every row's latent, in batch order.
Status MlaAttention::Latents(const MlaWeights& w) {
  const int d = c_.hidden_size, lora = c_.kv_lora_rank;
  const int L = lora + c_.qk_rope_head_dim;
  const int n = static_cast<int>(latent_rows_.size());
  GatherRows(xn_.data(), d, latent_rows_, tmp_);
  qa_.resize(std::size_t(n) * L);
  tp_.ColumnParallel({w.kv_a.data(), L, d, d}, tmp_.data(), n, d, qa_.data(), L);
  latent_.resize(pos_.size() * L);
  const compute::Tensor kv_lora = compute::F32(qa_.data(), n, lora, L);
  compute_.RmsNorm(kv_lora, w.kv_a_norm.data(), float(c_.rms_norm_eps), kv_lora);
  RopeRows(latent_rows_, compute::F32(qa_.data() + lora, n, c_.qk_rope_head_dim, L), 1,
           c_.qk_rope_head_dim);
  for (int i = 0; i < n; ++i) {
    std::copy_n(qa_.data() + std::size_t(i) * L, L,
                latent_.data() + std::size_t(latent_rows_[i]) * L);
  }
  if (s_.cp_size == 1) return Status::Ok();
  // The CP-split rows of each CP rank in batch order, padded to the largest share.
  std::vector<std::vector<int32_t>> split(s_.cp_size);
  for (std::size_t r = 0; r < row_cp_.size(); ++r) {
    if (row_cp_[r] >= 0) split[row_cp_[r]].push_back(static_cast<int32_t>(r));
  }
  std::size_t most = 0;
  for (const auto& rows : split) most = std::max(most, rows.size());
  if (most == 0) return Status::Ok();
  send_.assign(most * L, 0.0f);
  for (std::size_t i = 0; i < split[s_.cp_rank].size(); ++i) {
    std::copy_n(latent_.data() + std::size_t(split[s_.cp_rank][i]) * L, L, send_.data() + i * L);
  }
  recv_.resize(send_.size() * s_.cp_size);
  CTXPAR_RETURN_IF_ERROR(cp_->AllGather(send_.data(), recv_.data(), send_.size(), DataType::kF32));
  for (int r = 0; r < s_.cp_size; ++r) {
    for (std::size_t i = 0; i < split[r].size(); ++i) {
      std::copy_n(recv_.data() + (r * most + i) * L, L,
                  latent_.data() + std::size_t(split[r][i]) * L);
    }
  }
  return Status::Ok();
}

void MlaAttention::ProjectQ(const MlaWeights& w, const std::vector<int32_t>& rows, int first,
                            int heads) {
  const int d = c_.hidden_size, ql = c_.q_lora_rank, qk = c_.qk_head_dim();
  const int n = static_cast<int>(rows.size());
  GatherRows(xn_.data(), d, rows, tmp_);
  // Without a q LoRA, q_b is q_proj over the hidden row.
  const int q_in = ql == 0 ? d : ql;
  if (ql != 0) {
    qa_.resize(std::size_t(n) * ql);
    tp_.ColumnParallel({w.q_a.data(), ql, d, d}, tmp_.data(), n, d, qa_.data(), ql);
    const compute::Tensor q_lora = compute::F32(qa_.data(), n, ql);
    compute_.RmsNorm(q_lora, w.q_a_norm.data(), float(c_.rms_norm_eps), q_lora);
  }
  q_.resize(std::size_t(n) * heads * qk);
  const F32HeadSpan q_b{{w.q_b.data(), s_.span_heads * qk, q_in, q_in}, s_.span_first, qk};
  tp_.ColumnParallel(q_b.Rows(first, heads), ql != 0 ? qa_.data() : tmp_.data(), n, q_in, q_.data(),
                     heads * qk);
  // Each head is [q_nope | q_pe]: the rotation's heads start at q_pe, qk apart.
  const int nope = c_.qk_nope_head_dim;
  RopeRows(rows, compute::F32(q_.data() + nope, n, heads * qk - nope, heads * qk), heads, qk);
}

void MlaAttention::RopeRows(const std::vector<int32_t>& rows, const compute::Tensor& x, int heads,
                            int head_stride) {
  rope_pos_.resize(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) rope_pos_[i] = static_cast<int>(pos_[rows[i]]);
  const compute::RopeTarget target[] = {{x, heads, head_stride}};
  compute_.Rope(RopeStyle::kNormal, rope_, rope_pos_, target);
}

void MlaAttention::OutProj(const MlaWeights& w, const std::vector<int32_t>& rows, int first,
                           int heads) {
  const int d = c_.hidden_size, dv = c_.v_head_dim;
  const int n = static_cast<int>(rows.size());
  const F32HeadSpan o{
      {w.o_proj.data(), d, s_.span_heads * dv, s_.span_heads * dv}, s_.span_first, dv};
  tmp_.resize(std::size_t(n) * d);
  tp_.RowParallelPartial(o.Cols(first, heads), o_.data(), n, heads * dv, tmp_.data(), d);
  for (int i = 0; i < n; ++i) {
    std::copy_n(tmp_.data() + std::size_t(i) * d, d, partial_.data() + std::size_t(rows[i]) * d);
  }
}

// Absorbed MLA: q_nope through W_kc into the latent space, attention over [latent | rope] of
// the pool through DcpAttention, the latent output through W_vc. W_kc and W_vc are one matrix
// per head (a batched product inside the attention, no TP layer), so they call the kernel.
Status MlaAttention::Decode(const MlaWeights& w, int layer, const KvPool& kv) {
  const int n = static_cast<int>(dec_rows_.size());
  if (n == 0) return Status::Ok();
  const int qk = c_.qk_head_dim(), nope = c_.qk_nope_head_dim, lora = c_.kv_lora_rank;
  const int L = lora + c_.qk_rope_head_dim, dv = c_.v_head_dim;
  ProjectQ(w, dec_rows_, s_.q_first, s_.q_heads);
  const int qh = s_.q_heads;
  qabs_.resize(std::size_t(n) * qh * L);
  for (int j = 0; j < qh; ++j) {
    compute_.MatMul(F32Matrix{w.w_kc.data() + std::size_t(j) * lora * nope, lora, nope, nope},
                    compute::F32(q_.data() + std::size_t(j) * qk, n, nope, qh * qk),
                    compute::F32(qabs_.data() + std::size_t(j) * L, n, lora, qh * L));
    for (int i = 0; i < n; ++i) {
      std::copy_n(q_.data() + (std::size_t(i) * qh + j) * qk + nope, c_.qk_rope_head_dim,
                  qabs_.data() + (std::size_t(i) * qh + j) * L + lora);
    }
  }
  olat_.resize(std::size_t(n) * s_.heads * lora);
  CTXPAR_RETURN_IF_ERROR(decode_->Run(dec_batch_, kv, layer, qabs_.data(), olat_.data()));
  o_.resize(std::size_t(n) * s_.heads * dv);
  for (int j = 0; j < s_.heads; ++j) {
    compute_.MatMul(F32Matrix{w.w_vc.data() + std::size_t(j) * dv * lora, dv, lora, lora},
                    compute::F32(olat_.data() + std::size_t(j) * lora, n, lora, s_.heads * lora),
                    compute::F32(o_.data() + std::size_t(j) * dv, n, dv, s_.heads * dv));
  }
  OutProj(w, dec_rows_, s_.head_first, s_.heads);
  return Status::Ok();
}

// The latents of positions [0, pos0) of `slot`, from the DCP group's shards of the pool, in
// position order: out [pos0, L].
Status MlaAttention::GatherPrefix(int layer, const KvPool& kv, int32_t slot, int64_t pos0,
                                  float* out) {
  const int L = c_.kv_lora_rank + c_.qk_rope_head_dim;
  const PagedKv view = kv.View(layer);
  const KvLayout& layout = kv.layout();
  const float* k = static_cast<const float*>(view.k);
  auto local_row = [&](int64_t row) {
    const int32_t page =
        view.block_table[int64_t{slot} * view.max_pages_per_seq + row / view.page_size];
    return k + KvElementOffset(view, false, page, static_cast<int>(row % view.page_size), 0, 0);
  };
  const int n = s_.dcp_size;
  if (n == 1) {
    for (int64_t p = 0; p < pos0; ++p) std::copy_n(local_row(p), L, out + p * L);
    return Status::Ok();
  }
  const int64_t most = layout.LocalLength(0, pos0);
  const int64_t mine = layout.LocalLength(s_.dcp_rank, pos0);
  send_.assign(std::size_t(most) * L, 0.0f);
  for (int64_t r = 0; r < mine; ++r) std::copy_n(local_row(r), L, send_.data() + r * L);
  recv_.resize(send_.size() * n);
  CTXPAR_RETURN_IF_ERROR(dcp_->AllGather(send_.data(), recv_.data(), send_.size(), DataType::kF32));
  for (int64_t p = 0; p < pos0; ++p) {
    std::copy_n(recv_.data() + (layout.Owner(p) * most + layout.LocalRow(p)) * L, L, out + p * L);
  }
  return Status::Ok();
}

// Decompressed MLA, one sequence at a time: kv_b_proj expands the latent of every position into
// K_nope and V of the prefill heads, and the rank's rows attend causally over [K_nope | k_pe].
Status MlaAttention::Prefill(const MlaWeights& w, int layer, const Batch& batch, const KvPool& kv) {
  const int qk = c_.qk_head_dim(), nope = c_.qk_nope_head_dim, rope = c_.qk_rope_head_dim;
  const int lora = c_.kv_lora_rank, L = lora + rope, dv = c_.v_head_dim, kvb = nope + dv;
  const int hp = s_.prefill_heads;
  ProjectQ(w, pre_rows_, s_.prefill_first, hp);
  o_.resize(pre_rows_.size() * hp * dv);
  const F32HeadSpan kv_b{{w.kv_b.data(), s_.span_heads * kvb, lora, lora}, s_.span_first, kvb};
  std::size_t done = 0;  // rows of pre_rows_ (q_, o_) handled so far
  for (const BatchSeq& seq : batch.seqs) {
    if (seq.pos0 > 0 && seq.num_tokens == 1) continue;
    seq_rows_.clear();
    while (done + seq_rows_.size() < pre_rows_.size() &&
           pre_rows_[done + seq_rows_.size()] < seq.token_offset + seq.num_tokens) {
      seq_rows_.push_back(pre_rows_[done + seq_rows_.size()]);
    }
    const int64_t len = seq.pos0 + seq.num_tokens;
    full_.resize(std::size_t(len) * L);
    if (seq.pos0 > 0)
      CTXPAR_RETURN_IF_ERROR(GatherPrefix(layer, kv, seq.slot, seq.pos0, full_.data()));
    std::copy_n(latent_.data() + std::size_t(seq.token_offset) * L, std::size_t(seq.num_tokens) * L,
                full_.data() + std::size_t(seq.pos0) * L);
    if (seq_rows_.empty()) continue;
    const int ilen = static_cast<int>(len);
    kvb_.resize(std::size_t(len) * hp * kvb);
    tp_.ColumnParallel(kv_b.Rows(s_.prefill_first, hp), full_.data(), ilen, L, kvb_.data(),
                       hp * kvb);
    const int pages = (ilen + kPrefillPage - 1) / kPrefillPage;
    PagedKv paged;
    paged.dtype = DataType::kF32;
    paged.page_size = kPrefillPage;
    paged.num_kv_heads = hp;
    paged.head_dim_qk = qk;
    paged.head_dim_v = dv;
    paged.max_pages_per_seq = pages;
    paged.num_pages = pages;
    paged.format = KvPageFormat::kTiles16;
    kpage_.assign(std::size_t(pages) * kPrefillPage * hp * qk, 0.0f);
    vpage_.assign(std::size_t(pages) * kPrefillPage * hp * dv, 0.0f);
    paged.k = kpage_.data();  // KvElementOffset tells separate V pages by a non-null v
    paged.v = vpage_.data();
    for (int p = 0; p < ilen; ++p) {
      const int page = p / kPrefillPage, slot = p % kPrefillPage;
      for (int j = 0; j < hp; ++j) {
        const float* src = kvb_.data() + (std::size_t(p) * hp + j) * kvb;
        const float* pe = full_.data() + std::size_t(p) * L + lora;
        for (int e = 0; e < qk; ++e) {
          kpage_[KvElementOffset(paged, false, page, slot, j, e)] =
              e < nope ? src[e] : pe[e - nope];
        }
        for (int e = 0; e < dv; ++e) {
          vpage_[KvElementOffset(paged, true, page, slot, j, e)] = src[nope + e];
        }
      }
    }
    table_.resize(pages);
    for (int i = 0; i < pages; ++i) table_[i] = i;
    paged.block_table = table_.data();
    const int rows = static_cast<int>(seq_rows_.size());
    seq0_.assign(rows, 0);
    kv_len_.resize(rows);
    for (int i = 0; i < rows; ++i) kv_len_[i] = static_cast<int32_t>(pos_[seq_rows_[i]] + 1);
    lse_.resize(std::size_t(rows) * hp);
    PartialAttentionParams a;
    a.q = q_.data() + done * hp * qk;
    a.o = o_.data() + done * hp * dv;
    a.lse = lse_.data();
    a.num_rows = rows;
    a.num_q_heads = hp;
    a.row_seq = seq0_.data();
    a.row_kv_len = kv_len_.data();
    a.scale = scale_;
    a.kv = paged;
    a.num_seqs = 1;
    a.split_kv_keys = kSplitKvKeys;
    CTXPAR_RETURN_IF_ERROR(compute_.PartialAttention(a));
    done += seq_rows_.size();
  }
  OutProj(w, pre_rows_, s_.prefill_first, hp);
  return Status::Ok();
}

Status MlaAttention::Run(const MlaWeights& w, int layer, const Batch& batch, KvPool& kv, float* x) {
  const int d = c_.hidden_size, L = c_.kv_lora_rank + c_.qk_rope_head_dim;
  const std::size_t T = batch.tokens.size();
  xn_.resize(T * d);
  compute_.RmsNorm(compute::F32(x, T, d), w.input_norm.data(), float(c_.rms_norm_eps),
                   compute::F32(xn_.data(), T, d));
  MakePlan(batch);
  CTXPAR_RETURN_IF_ERROR(Latents(w));
  for (const BatchSeq& seq : batch.seqs) {
    CTXPAR_RETURN_IF_ERROR(kv.Write(layer, seq.slot, seq.pos0, seq.num_tokens,
                                    latent_.data() + std::size_t(seq.token_offset) * L, nullptr));
  }
  partial_.assign(T * d, 0.0f);
  CTXPAR_RETURN_IF_ERROR(Decode(w, layer, kv));
  CTXPAR_RETURN_IF_ERROR(Prefill(w, layer, batch, kv));
  CTXPAR_RETURN_IF_ERROR(tp_.ReducePartials(partial_.data(), partial_.size()));
  for (std::size_t i = 0; i < partial_.size(); ++i) x[i] += partial_[i];
  return Status::Ok();
}

}  // namespace ctxpar::model
