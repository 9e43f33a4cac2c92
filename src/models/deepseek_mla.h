// One DeepSeek MLA attention layer over a Batch (deepseek.h gives the layout over the ranks):
// decode rows in the absorbed form through DcpAttention, prefill rows in the decompressed form,
// split over the prefill-CP ranks when prefill CP is on.
//
// Shapes (fp32, row-major; L = kv_lora_rank + qk_rope_head_dim, the latent KV row): x [T, dim]
// for the batch's T tokens in batch order. The KV pool (kv_pool.h) holds one head of L per token
// with V = its first kv_lora_rank elements (v_in_k), in kRows pages.
//
// Thread safety: used by the rank's thread only; Run is collective over the TP group.
#pragma once

#include <memory>
#include <vector>

#include "ctxpar/batch.h"
#include "ctxpar/communicator.h"
#include "ctxpar/kv_pool.h"
#include "models/batch_attention.h"
#include "models/deepseek.h"
#include "models/deepseek_config.h"
#include "models/layers/compute_types.h"
#include "models/layers/tp_linear.h"

namespace ctxpar::model {

// One layer's attention weights as one rank holds them (DeepseekShard), fp32, row-major.
struct MlaWeights {
  std::vector<float> input_norm;  // [dim]
  std::vector<float> q_a;         // [q_lora_rank, dim]
  std::vector<float> q_a_norm;    // [q_lora_rank]
  // [span_heads * qk_head_dim, q_lora_rank], or q_proj's [.., dim] without a q LoRA (q_a empty)
  std::vector<float> q_b;
  std::vector<float> kv_a;       // [L, dim]
  std::vector<float> kv_a_norm;  // [kv_lora_rank]
  std::vector<float> kv_b;       // [span_heads * (qk_nope_head_dim + v_head_dim), kv_lora_rank]
  std::vector<float> w_kc;       // [q_heads, kv_lora_rank, qk_nope_head_dim]: W_UK^T per head
  std::vector<float> w_vc;       // [heads, v_head_dim, kv_lora_rank]: W_UV per own head
  std::vector<float> o_proj;     // [dim, span_heads * v_head_dim]
};

Expected<MlaWeights> LoadMlaWeights(const DeepseekWeights& weights, const DeepseekV3Config& c,
                                    const DeepseekShard& s, int layer);

class MlaAttention {
 public:
  // Collective over `tp` (not owned; it must outlive the layer): splits the DCP and CP groups.
  static Expected<std::unique_ptr<MlaAttention>> Create(const DeepseekV3Config& c,
                                                        const DeepseekShard& s,
                                                        const EngineConfig& config,
                                                        Communicator& tp,
                                                        compute::Compute& compute);

  // Writes the batch's latent KV into `kv` (layer `layer`) and adds the attention's output to
  // x. Every sequence's slot must hold positions [0, pos0 + num_tokens) (KvPool::Reserve).
  Status Run(const MlaWeights& w, int layer, const Batch& batch, KvPool& kv, float* x);

  Communicator& dcp() { return *dcp_; }
  Communicator& cp() { return *cp_; }

 private:
  MlaAttention(const DeepseekV3Config& c, const DeepseekShard& s, Communicator& tp,
               compute::Compute& compute);
  void MakePlan(const Batch& batch);
  Status Latents(const MlaWeights& w);
  // q_ := Q [rows, heads, qk_head_dim] of `rows` for heads [first, first + heads), rope applied.
  void ProjectQ(const MlaWeights& w, const std::vector<int32_t>& rows, int first, int heads);
  // Rotates x's rows (row i at the position of batch row rows[i]): heads of head_stride.
  void RopeRows(const std::vector<int32_t>& rows, const compute::Tensor& x, int heads,
                int head_stride);
  // partial_ rows += o [rows, heads * v_head_dim] times o_proj's columns of heads from `first`.
  void OutProj(const MlaWeights& w, const std::vector<int32_t>& rows, int first, int heads);
  Status Decode(const MlaWeights& w, int layer, const KvPool& kv);
  Status Prefill(const MlaWeights& w, int layer, const Batch& batch, const KvPool& kv);
  Status GatherPrefix(int layer, const KvPool& kv, int32_t slot, int64_t pos0, float* out);

  DeepseekV3Config c_;
  DeepseekShard s_;
  TpLinear tp_;
  compute::Compute& compute_;
  std::unique_ptr<Communicator> dcp_, cp_;
  std::unique_ptr<BatchAttention> decode_;
  RopeAngles rope_;
  float scale_ = 0.0f;

  // Per call: which rows decode, which prefill on this rank, and the CP split.
  std::vector<int64_t> pos_;
  std::vector<int> rope_pos_;  // RopeRows' positions
  std::vector<int32_t> dec_rows_, pre_rows_, latent_rows_;
  std::vector<int32_t> row_cp_;  // CP rank of each token (-1: not CP-split)
  Batch dec_batch_;
  std::vector<float> xn_, tmp_, latent_, qa_, q_, qabs_, olat_, o_, partial_;
  std::vector<float> full_, kvb_, kpage_, vpage_, lse_;
  std::vector<int32_t> table_, seq0_, kv_len_, seq_rows_;
  std::vector<float> send_, recv_;
};

}  // namespace ctxpar::model
