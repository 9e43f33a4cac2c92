// The feed-forward half of a DeepSeek layer over a batch's T tokens (deepseek.h gives the layout
// over the ranks): the dense SwiGLU MLP of the first first_k_dense_replace layers, and the MoE
// of the others (the DeepSeek-V3 router, the routed experts over the EP groups, the shared
// expert), reached through --moe-a2a-backend none or deepep.
//
// Router (HF's DeepseekV3TopkRouter and route_tokens_to_experts): scores = sigmoid(x W_r^T);
// the choice adds e_score_correction_bias; each of n_group groups scores the sum of its top 2;
// the topk_group best groups stay and the others' choices become -inf; the num_experts_per_tok
// best choices are the experts; their weights are the scores without the bias, divided by their
// sum (+1e-20) with norm_topk_prob, times routed_scaling_factor. A token's expert outputs are
// added in ascending expert id (as HF's loop over experts does), then the shared expert's.
//
// Shapes (fp32, row-major): xn, x [T, hidden_size].
// Thread safety: used by the rank's thread only; Run is collective over the TP group.
#pragma once

#include <memory>
#include <vector>

#include "ctxpar/communicator.h"
#include "models/deepseek.h"
#include "models/deepseek_config.h"
#include "models/layers/tp_linear.h"

namespace ctxpar::model {

// gate/up [inter, hidden] and down [hidden, inter] of the rank's slice of one SwiGLU MLP.
struct MlpWeights {
  std::vector<float> gate, up, down;
  int inter = 0;
};

struct FfnWeights {
  std::vector<float> post_norm;  // [hidden]
  bool moe = false;
  MlpWeights dense;                 // !moe
  std::vector<float> router;        // moe: [n_routed_experts, hidden]
  std::vector<float> bias;          // moe: e_score_correction_bias [n_routed_experts]
  std::vector<MlpWeights> experts;  // moe: the rank's experts, ascending
  MlpWeights shared;                // moe: empty without shared experts
};

Expected<FfnWeights> LoadFfnWeights(const DeepseekWeights& weights, const DeepseekV3Config& c,
                                    const DeepseekShard& s, int layer);

// The experts of one token, ascending, and their weights.
struct Route {
  std::vector<int> experts;
  std::vector<float> weights;
};
// Routes one token from its router logits [n_routed_experts].
// bias: e_score_correction_bias, unread with c.softmax_router (V2's router, which has none).
Route RouteToken(const DeepseekV3Config& c, const float* logits, const float* bias);

class DeepseekFfn {
 public:
  // `tp` (not owned) must outlive the block.
  DeepseekFfn(const DeepseekV3Config& c, const DeepseekShard& s, Communicator& tp,
              compute::Compute& compute)
      : c_(c), s_(s), tp_(&tp, &compute) {}

  // x += FFN(RMSNorm(x)), x [T, hidden].
  Status Run(const FfnWeights& w, int T, float* x);

 private:
  // out[rows, hidden] = the MLP slice's output for xs [rows, hidden]: gate and up
  // column-parallel, down a row-parallel partial sum (the whole output of a replicated MLP).
  void Mlp(const MlpWeights& m, const float* xs, int rows, float* out);
  // y[t] += route weight * output of the rank's experts for the rows of `tokens` (xs rows):
  // experts ascending, so each row's sum runs in ascending expert id.
  void RoutedExperts(const FfnWeights& w, const std::vector<Route>& routes, const float* xs,
                     int rows, float* y);
  // The deepep backend: this rank's share of the T tokens routed, dispatched to the experts'
  // owners and combined back, the shared expert added, then all-gathered into x.
  Status Deepep(const FfnWeights& w, int T, float* x);

  DeepseekV3Config c_;
  DeepseekShard s_;
  TpLinear tp_;
  std::vector<float> xn_, y_, gate_, up_, act_, out_, xs_, logits_, scratch_, send_, recv_;
  std::vector<Route> routes_;
  std::vector<int32_t> rows_;
  std::vector<std::size_t> counts_, displs_, recv_counts_, recv_displs_;
};

}  // namespace ctxpar::model
