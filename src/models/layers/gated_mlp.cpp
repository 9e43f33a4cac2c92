#include "models/layers/gated_mlp.h"

#include <algorithm>

namespace ctxpar::model {

Expected<const float*> GatedMlp::Forward(const DenseBlockWeights& w, const float* ffn_norm,
                                         const float* x, int n) {
  compute::Compute& c = tp_->compute();
  const int ffn_shard = w.gate.rows;
  xn_.resize(std::size_t(n) * dim_);
  if (ffn_norm != nullptr) {
    c.RmsNorm(compute::F32(x, n, dim_), ffn_norm, rms_eps_, compute::F32(xn_.data(), n, dim_));
  } else {
    std::copy(x, x + xn_.size(), xn_.data());
  }
  gate_.resize(std::size_t(n) * ffn_shard);
  up_.resize(gate_.size());
  act_out_.resize(gate_.size());
  const MatMulOut gate_up[] = {{w.gate, gate_.data(), ffn_shard}, {w.up, up_.data(), ffn_shard}};
  tp_->ColumnParallel(gate_up, xn_.data(), n, dim_);
  c.Gated(act_, compute::F32(gate_.data(), n, ffn_shard), compute::F32(up_.data(), n, ffn_shard),
          compute::F32(act_out_.data(), n, ffn_shard));
  return tp_->RowParallel(w.down, act_out_.data(), n, ffn_bounds_, dim_bounds_);
}

}  // namespace ctxpar::model
