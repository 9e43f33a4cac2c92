#include "models/layers/gqa_attention.h"

#include <algorithm>
#include <cmath>

namespace ctxpar::model {

float AttentionTemperature(float beta, int floor_scale, int pos) {
  const float steps = std::floor(static_cast<float>(pos) / static_cast<float>(floor_scale));
  return static_cast<float>(std::log(steps + 1.0) * beta + 1.0);
}

Status GqaAttention::Init(const EngineConfig& config) {
  CTXPAR_ASSIGN_OR_RETURN(dcp_,
                          tp_->world().Split(shard_.tp_rank / config.dcp_size, shard_.tp_rank));
  DcpOptions o = EngineDcpOptions(config, tp_->size(), tp_->compute());
  o.num_heads = opt_.num_heads;
  o.head_dim_qk = opt_.head_dim;
  o.head_dim_v = opt_.head_dim;
  o.scale = opt_.scale;
  o.softcap = opt_.softcap;
  CTXPAR_ASSIGN_OR_RETURN(attend_, BatchAttention::Create(o, dcp_.get()));
  return Status::Ok();
}

Expected<const float*> GqaAttention::Forward(const GqaLayer& layer, int index, const Batch& batch,
                                             std::span<const int> positions, const float* x,
                                             KvPool& kv) {
  using compute::F32;
  compute::Compute& c = tp_->compute();
  const int hd = opt_.head_dim;
  const int n = static_cast<int>(batch.num_tokens());
  const HeadShard& s = shard_;
  xn_.resize(std::size_t(n) * opt_.dim);
  if (layer.attn_norm != nullptr) {
    c.RmsNorm(F32(x, n, opt_.dim), layer.attn_norm, opt_.rms_eps, F32(xn_.data(), n, opt_.dim));
  } else {
    std::copy(x, x + xn_.size(), xn_.data());
  }
  const int q_row = s.q_heads * hd, kv_row = s.kv_heads * hd;
  q_.resize(std::size_t(n) * q_row);
  k_.resize(std::size_t(n) * kv_row);
  v_.resize(std::size_t(n) * kv_row);
  const compute::Tensor q = F32(q_.data(), n, q_row), k = F32(k_.data(), n, kv_row),
                        v = F32(v_.data(), n, kv_row);
  const MatMulOut qkv[] = {{layer.w.wq, q_.data(), q_row},
                           {layer.w.wk, k_.data(), kv_row},
                           {layer.w.wv, v_.data(), kv_row}};
  tp_->ColumnParallel(qkv, xn_.data(), n, opt_.dim);
  if (layer.q_bias != nullptr) {
    // The rank's heads of each bias, added to every row.
    c.AddBias(q, layer.q_bias + std::size_t(s.q_first) * hd);
    c.AddBias(k, layer.k_bias + std::size_t(s.kv_first) * hd);
    c.AddBias(v, layer.v_bias + std::size_t(s.kv_first) * hd);
  }
  if (opt_.whole_row_qk_norm) {
    const HeadRows parts[] = {{q_.data(), s.q_first, s.q_heads, s.tp_rank * s.heads, s.heads,
                               opt_.num_heads, layer.q_norm},
                              {k_.data(), s.kv_first, s.kv_heads, s.kv_owned_first, s.kv_owned,
                               opt_.num_kv_heads, layer.k_norm}};
    CTXPAR_RETURN_IF_ERROR(whole_row_norm_.Run(tp_->world(), c, parts, n, hd, opt_.rms_eps));
  } else if (layer.q_norm != nullptr) {
    const compute::Tensor heads = F32(q_.data(), std::int64_t(n) * s.q_heads, hd);
    c.RmsNorm(heads, layer.q_norm, opt_.rms_eps, heads);
  }
  if (layer.k_norm != nullptr && !opt_.whole_row_qk_norm) {
    const compute::Tensor heads = F32(k_.data(), std::int64_t(n) * s.kv_heads, hd);
    c.RmsNorm(heads, layer.k_norm, opt_.rms_eps, heads);
  }
  const compute::RopeTarget rotated[] = {{q, s.q_heads, hd}, {k, s.kv_heads, hd}};
  c.Rope(opt_.rope_style, layer.rope, positions, rotated);
  if (opt_.temperature_beta != 0.0f) {
    scales_.resize(n);
    for (int row = 0; row < n; ++row) {
      scales_[row] =
          AttentionTemperature(opt_.temperature_beta, opt_.temperature_floor, positions[row]);
    }
    c.ScaleRows(q, scales_.data(), nullptr);
  }
  for (const BatchSeq& seq : batch.seqs) {
    CTXPAR_RETURN_IF_ERROR(kv.Write(index, seq.slot, seq.pos0, seq.num_tokens,
                                    k_.data() + seq.token_offset * kv_row,
                                    v_.data() + seq.token_offset * kv_row));
  }
  o_.resize(std::size_t(n) * s.heads * hd);
  lse_.resize(layer.sinks != nullptr ? std::size_t(n) * s.heads : 0);
  CTXPAR_RETURN_IF_ERROR(attend_->Run(batch, kv, index, q_.data(), o_.data(), opt_.window,
                                      layer.sinks != nullptr ? lse_.data() : nullptr));
  if (layer.sinks != nullptr) {
    // The rank's own heads start at tp_rank * heads; every row sees at least itself, so its lse
    // is finite. Each head of each row is scaled by 1 / (1 + exp(sink - lse)).
    const float* sinks = layer.sinks + std::size_t(s.tp_rank) * s.heads;
    scales_.resize(lse_.size());
    for (std::size_t i = 0; i < lse_.size(); ++i) {
      scales_[i] = 1.0f / (1.0f + std::exp(sinks[i % s.heads] - lse_[i]));
    }
    c.ScaleRows(F32(o_.data(), std::int64_t(n) * s.heads, hd), scales_.data(), nullptr);
  }
  return tp_->RowParallel(layer.w.wo, o_.data(), n, s.head_bounds, s.dim_bounds);
}

}  // namespace ctxpar::model
