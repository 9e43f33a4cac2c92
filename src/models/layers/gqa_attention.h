// The attention of a dense decoder layer with grouped-query heads (Llama, Gemma 3), on one rank:
//   xn = RmsNorm(x) with the layer's attn_norm (none: x, OLMo 2)
//   q, k, v = xn times the rank's rows of wq, wk, wv (column-parallel, tp_linear.h), plus the
//             rank's part of their biases (optional: Qwen2's)
//   q, k = RmsNorm per head (optional: Gemma 3's q_norm / k_norm) or over all the model's heads
//          (OLMo 2: head_split_norm.h), then RoPE per row at its position with the layer's
//          RopeAngles in the model's pairing (elementwise.h)
//   q *= 1 + beta * log(1 + floor(pos / floor_scale)) (optional: Llama 4's attention temperature,
//        Mistral 3's)
//   k, v written to each sequence's slot of the pool; o = BatchAttention over the DCP group (in a
//        window of its own where the model has one on every layer)
//   o *= 1 / (1 + exp(sink_h - lse)) per head h (optional: gpt-oss's learned sinks, a term
//        exp(sink_h) in the softmax's denominator), from the DCP-merged lse: exact whatever the
//        layout
//   y = o times wo (row-parallel: every output row over the whole attention row)
// The heads, KV heads and rows are the rank's HeadShard (attention_shard.h); the block owns the
// DCP communicator (split from the TP group) and the attention built from EngineDcpOptions.
//
// Shapes (fp32, row-major): x [T, dim] for the batch's T tokens in batch order; positions [T];
// the result [T, dim], the full hidden row of every token on every rank.
//
// Thread safety: one rank's thread; Init and Forward are collective over the TP group.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "ctxpar/batch.h"
#include "ctxpar/communicator.h"
#include "ctxpar/engine_config.h"
#include "ctxpar/kv_pool.h"
#include "ctxpar/status.h"
#include "models/batch_attention.h"
#include "models/layers/attention_shard.h"
#include "models/layers/compute_types.h"
#include "models/layers/gguf_weights.h"
#include "models/layers/head_split_norm.h"
#include "models/layers/tp_linear.h"

namespace ctxpar::model {

struct GqaOptions {
  int num_heads = 0;  // of the whole model
  int head_dim = 0;   // of q, k and v
  int dim = 0;        // hidden size
  float scale = 0.0f;
  float softcap = 0.0f;  // attention logit softcapping (Gemma 2; attention.h); 0: none
  float rms_eps = 0.0f;  // of attn_norm and the per-head norms
  RopeStyle rope_style = RopeStyle::kNormal;
  // q_norm and k_norm span every head of the model: [num_heads * head_dim] and
  // [num_kv_heads * head_dim] (OLMo 2).
  bool whole_row_qk_norm = false;
  int num_kv_heads = 0;  // of the whole model; read with whole_row_qk_norm only
  // A window on every layer, kept by the pool's full group (batch_attention.h); 0: none.
  int window = 0;
  // The attention temperature's beta and floor_scale; beta 0: none.
  float temperature_beta = 0.0f;
  int temperature_floor = 0;
};

// The temperature of a query at `pos`, as llama.cpp computes it (a float position and quotient,
// the logarithm in double).
float AttentionTemperature(float beta, int floor_scale, int pos);

// One layer's weights: its projections (wq, wk, wv, wo of `w`), its norms and its angles.
struct GqaLayer {
  const DenseBlockWeights& w;
  const float* attn_norm;  // [dim], or null: no norm
  const RopeAngles& rope;
  // [head_dim] (GqaOptions::whole_row_qk_norm: the whole row's) or null: no norm.
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  // [num_heads * head_dim] and [num_kv_heads * head_dim] of the whole model, or null: no bias.
  const float* q_bias = nullptr;
  const float* k_bias = nullptr;
  const float* v_bias = nullptr;
  // [num_heads] of the whole model, or null: no sinks.
  const float* sinks = nullptr;
};

class GqaAttention {
 public:
  // `tp` (the TP group's linear layers, on the rank's compute seam) is not owned and outlives the
  // block.
  GqaAttention(const GqaOptions& options, TpLinear* tp, HeadShard shard)
      : opt_(options), tp_(tp), shard_(std::move(shard)) {}

  // Splits the DCP group off the TP group and builds the attention (collective).
  Status Init(const EngineConfig& config);

  // Layer `index` over x [T, dim] (collective). Returns [T, dim], valid until the TP group's
  // next layer runs.
  Expected<const float*> Forward(const GqaLayer& layer, int index, const Batch& batch,
                                 std::span<const int> positions, const float* x, KvPool& kv);

 private:
  GqaOptions opt_;
  TpLinear* tp_;
  HeadShard shard_;
  std::unique_ptr<Communicator> dcp_;
  std::unique_ptr<BatchAttention> attend_;
  HeadSplitRmsNorm whole_row_norm_;
  LineVector<float> xn_, o_;  // matmul inputs: aligned, read in place
  std::vector<float> q_, k_, v_, lse_, scales_;
};

}  // namespace ctxpar::model
