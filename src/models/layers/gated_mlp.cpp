#include "models/layers/gated_mlp.h"

#include <algorithm>

#include "models/layers/elementwise.h"
#include "models/layers/rows.h"

namespace ctxpar::model {

Expected<const float*> GatedMlp::Forward(const DenseBlockWeights& w, const float* ffn_norm,
                                         const float* x, int n) {
  const int ffn_shard = w.gate.rows;
  xn_.resize(std::size_t(n) * dim_);
  if (ffn_norm != nullptr) {
    RmsNormRows(pool_, x, ffn_norm, n, dim_, rms_eps_, xn_.data());
  } else {
    std::copy(x, x + xn_.size(), xn_.data());
  }
  gate_.resize(std::size_t(n) * ffn_shard);
  up_.resize(gate_.size());
  act_out_.resize(gate_.size());
  const MatMulOut gate_up[] = {{w.gate, gate_.data(), ffn_shard}, {w.up, up_.data(), ffn_shard}};
  tp_->ColumnParallel(gate_up, xn_.data(), n, dim_);
  ForRows(pool_, n, [&](int begin, int end) {
    const std::size_t first = std::size_t(begin) * ffn_shard;
    const int count = (end - begin) * ffn_shard;
    Gated(act_, gate_.data() + first, up_.data() + first, count, act_out_.data() + first);
  });
  return tp_->RowParallel(w.down, act_out_.data(), n, ffn_bounds_, dim_bounds_);
}

}  // namespace ctxpar::model
