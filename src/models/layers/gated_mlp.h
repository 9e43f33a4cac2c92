// The gated MLP of a dense decoder layer (Llama's SwiGLU, Gemma 3's GeGLU), on one rank:
//   xn = RmsNorm(x) with the layer's ffn_norm (none: x, OLMo 2)
//   gate, up = xn times the rank's rows of gate and up (column-parallel: its ffn_bounds features)
//   a = act(gate) * up (elementwise.h)
//   y = a times down (row-parallel: every output row over all the features)
// The features and rows are the rank's HeadShard (attention_shard.h).
//
// Shapes (fp32, row-major): x [T, dim]; the result [T, dim], the full hidden row on every rank.
//
// Thread safety: one rank's thread; Forward is collective over the TP group.
#pragma once

#include <vector>

#include "ctxpar/status.h"
#include "models/layers/attention_shard.h"
#include "models/layers/compute_types.h"
#include "models/layers/gguf_weights.h"
#include "models/layers/tp_linear.h"

namespace ctxpar::model {

class GatedMlp {
 public:
  // `tp` is not owned and outlives the block.
  GatedMlp(GatedActivation act, int dim, float rms_eps, TpLinear* tp, const HeadShard& shard)
      : act_(act),
        dim_(dim),
        rms_eps_(rms_eps),
        tp_(tp),
        ffn_bounds_(shard.ffn_bounds),
        dim_bounds_(shard.dim_bounds) {}

  // The gate, up and down of `w` over x [n, dim], normed with ffn_norm [dim] unless it is null
  // (collective).
  // Returns [n, dim], valid until the TP group's next layer runs.
  Expected<const float*> Forward(const DenseBlockWeights& w, const float* ffn_norm, const float* x,
                                 int n);

 private:
  GatedActivation act_;
  int dim_;
  float rms_eps_;
  TpLinear* tp_;
  std::vector<int> ffn_bounds_, dim_bounds_;
  LineVector<float> xn_, act_out_;  // matmul inputs: aligned, read in place
  std::vector<float> gate_, up_;
};

}  // namespace ctxpar::model
