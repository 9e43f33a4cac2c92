#include "models/layers/gqa_attention.h"

#include <algorithm>
#include <cmath>

#include "models/layers/rows.h"

namespace ctxpar::model {

float AttentionTemperature(float beta, int floor_scale, int pos) {
  const float steps = std::floor(static_cast<float>(pos) / static_cast<float>(floor_scale));
  return static_cast<float>(std::log(steps + 1.0) * beta + 1.0);
}

Status GqaAttention::Init(const EngineConfig& config) {
  CTXPAR_ASSIGN_OR_RETURN(dcp_,
                          tp_->world().Split(shard_.tp_rank / config.dcp_size, shard_.tp_rank));
  DcpOptions o = EngineDcpOptions(config, tp_->size(), pool_);
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
  const int hd = opt_.head_dim;
  const int n = static_cast<int>(batch.num_tokens());
  const HeadShard& s = shard_;
  xn_.resize(std::size_t(n) * opt_.dim);
  if (layer.attn_norm != nullptr) {
    RmsNormRows(pool_, x, layer.attn_norm, n, opt_.dim, opt_.rms_eps, xn_.data());
  } else {
    std::copy(x, x + xn_.size(), xn_.data());
  }
  const std::size_t q_row = std::size_t(s.q_heads) * hd, kv_row = std::size_t(s.kv_heads) * hd;
  q_.resize(n * q_row);
  k_.resize(n * kv_row);
  v_.resize(n * kv_row);
  const MatMulOut qkv[] = {{layer.w.wq, q_.data(), s.q_heads * hd},
                           {layer.w.wk, k_.data(), s.kv_heads * hd},
                           {layer.w.wv, v_.data(), s.kv_heads * hd}};
  tp_->ColumnParallel(qkv, xn_.data(), n, opt_.dim);
  if (layer.q_bias != nullptr) {
    // The rank's heads of each bias, added to every row.
    const float* bias[] = {layer.q_bias + std::size_t(s.q_first) * hd,
                           layer.k_bias + std::size_t(s.kv_first) * hd,
                           layer.v_bias + std::size_t(s.kv_first) * hd};
    float* out[] = {q_.data(), k_.data(), v_.data()};
    const std::size_t width[] = {q_row, kv_row, kv_row};
    ForRows(pool_, n, [&](int begin, int end) {
      for (int i = 0; i < 3; ++i) {
        for (int row = begin; row < end; ++row) {
          float* y = out[i] + row * width[i];
          for (std::size_t c = 0; c < width[i]; ++c) y[c] += bias[i][c];
        }
      }
    });
  }
  if (opt_.whole_row_qk_norm) {
    const HeadRows parts[] = {{q_.data(), s.q_first, s.q_heads, s.tp_rank * s.heads, s.heads,
                               opt_.num_heads, layer.q_norm},
                              {k_.data(), s.kv_first, s.kv_heads, s.kv_owned_first, s.kv_owned,
                               opt_.num_kv_heads, layer.k_norm}};
    CTXPAR_RETURN_IF_ERROR(whole_row_norm_.Run(tp_->world(), pool_, parts, n, hd, opt_.rms_eps));
  } else if (layer.q_norm != nullptr) {
    RmsNormRows(pool_, q_.data(), layer.q_norm, n * s.q_heads, hd, opt_.rms_eps, q_.data());
  }
  if (layer.k_norm != nullptr && !opt_.whole_row_qk_norm) {
    RmsNormRows(pool_, k_.data(), layer.k_norm, n * s.kv_heads, hd, opt_.rms_eps, k_.data());
  }
  ForRows(pool_, n, [&](int begin, int end) {
    for (int row = begin; row < end; ++row) {
      float cos_sin[RopeAngles::kMaxDims];
      layer.rope.CosSin(positions[row], cos_sin);
      const int dims = layer.rope.rope_dims();
      Rope(opt_.rope_style, q_.data() + row * q_row, s.q_heads, hd, cos_sin, dims);
      Rope(opt_.rope_style, k_.data() + row * kv_row, s.kv_heads, hd, cos_sin, dims);
      if (opt_.temperature_beta != 0.0f) {
        const float t =
            AttentionTemperature(opt_.temperature_beta, opt_.temperature_floor, positions[row]);
        for (std::size_t c = 0; c < q_row; ++c) q_[row * q_row + c] *= t;
      }
    }
  });
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
    // is finite.
    const float* sinks = layer.sinks + std::size_t(s.tp_rank) * s.heads;
    ForRows(pool_, n, [&](int begin, int end) {
      for (int row = begin; row < end; ++row) {
        for (int h = 0; h < s.heads; ++h) {
          const float scale = 1.0f / (1.0f + std::exp(sinks[h] - lse_[row * s.heads + h]));
          float* o = o_.data() + (std::size_t(row) * s.heads + h) * hd;
          for (int c = 0; c < hd; ++c) o[c] *= scale;
        }
      }
    });
  }
  return tp_->RowParallel(layer.w.wo, o_.data(), n, s.head_bounds, s.dim_bounds);
}

}  // namespace ctxpar::model
