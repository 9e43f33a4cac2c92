// The routed mixture-of-experts feed-forward of a GGUF model (llama.cpp's build_moe_ffn), on one
// rank of the TP group, in one of two forms (MoeShape::routing, ::activation, ::biases):
//   xn = RmsNorm(x) with the layer's norm
//   l = xn Wr^T (+ br) over the experts (the router, whole on every rank)
//   Qwen3-MoE (kSoftmaxTopK): p = softmax(l), the experts_used most probable, their p
//     renormalized to sum 1 (norm_topk_prob); act = SwiGLU
//   gpt-oss (kTopKSoftmax): the experts_used largest l, p = softmax over those alone;
//     act = SwiGLU-OAI (elementwise.h); each expert's gate, up and down with a bias
//   y = sum over the chosen, in ascending expert id, of p_e * (down_e(act(gate_e(xn) + bg_e,
//       up_e(xn) + bu_e)) + bd_e)
// Whole experts live on ranks (expert e on rank e * tp / experts). Each rank writes p_e * out_e
// into the (token, choice) rows of the experts it holds and zeros elsewhere; one all-reduce of
// those rows is exact in any order (every row has one writer), and every rank then adds a
// token's rows in ascending expert id, as HF's loop over the experts does. The bits of y do not
// depend on tp.
//
// Shapes (fp32, row-major): x [n, dim]; the result [n, dim] on every rank.
//
// Thread safety: one rank's thread; Forward is collective over the TP group.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ctxpar/gguf.h"
#include "ctxpar/status.h"
#include "models/layers/compute_types.h"
#include "models/layers/tp_linear.h"

namespace ctxpar::model {

// How the router's logits choose and weigh the experts (above).
enum class MoeRouting { kSoftmaxTopK, kTopKSoftmax };

struct MoeShape {
  int dim = 0;
  int experts = 0;
  int experts_used = 0;
  int expert_ffn = 0;
  MoeRouting routing = MoeRouting::kSoftmaxTopK;
  GatedActivation activation = GatedActivation::kSwiGlu;
  // ffn_gate_inp.bias [experts], ffn_gate_exps.bias and ffn_up_exps.bias [experts, expert_ffn],
  // ffn_down_exps.bias [experts, dim] (gpt-oss).
  bool biases = false;
};

// The first expert of rank r of tp (experts [first(r), first(r + 1)) are rank r's).
inline int FirstExpert(int experts, int tp, int rank) {
  return static_cast<int>(int64_t{rank} * experts / tp);
}

// One layer's weights on a rank: the router [experts, dim] and the rank's experts.
struct MoeWeights {
  QuantMatrix router;
  int first_expert = 0;
  std::vector<QuantMatrix> gate, up, down;  // [expert_ffn, dim] x2, [dim, expert_ffn]
  // MoeShape::biases: every expert's, indexed by expert id; else null.
  const float* router_bias = nullptr;
  const float* gate_bias = nullptr;
  const float* up_bias = nullptr;
  const float* down_bias = nullptr;
};

// The tensors of a layer's experts (blk.N. + these), with the biases where the shape has them.
std::vector<std::string_view> MoeTensors(const MoeShape& shape);

// blk.N.ffn_gate_inp, ffn_gate_exps, ffn_up_exps, ffn_down_exps of `prefix` ("blk.3.") and their
// biases where the shape has them: the router and experts [first, first + count)
// (CTXPAR-MODEL-011 naming the tensor at fault).
Expected<MoeWeights> GgufMoeWeights(const GgufFile& f, const std::string& prefix,
                                    const MoeShape& shape, int first, int count, ActFormat format);

class RoutedMoe {
 public:
  // `tp` is not owned and outlives the block.
  RoutedMoe(const MoeShape& shape, float rms_eps, TpLinear* tp)
      : shape_(shape), rms_eps_(rms_eps), tp_(tp) {}

  // Returns [n, dim], valid until the next Forward (collective).
  Expected<const float*> Forward(const MoeWeights& w, const float* ffn_norm, const float* x, int n);

 private:
  struct Choice {
    int expert;
    float weight;
  };
  // choices_[t * experts_used ...]: token t's experts, ascending id, and their weights.
  void Route(const float* router_bias, int n);

  MoeShape shape_;
  float rms_eps_;
  TpLinear* tp_;
  LineVector<float> xn_, xs_, act_;  // matmul inputs: aligned, read in place
  std::vector<float> logits_, gate_, up_, out_, rows_, y_;
  std::vector<Choice> choices_;
  std::vector<int> picked_;
};

}  // namespace ctxpar::model
