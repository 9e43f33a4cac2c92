// The routed mixture-of-experts feed-forward of a GGUF model (Qwen3-MoE's; llama.cpp's
// build_moe_ffn with softmax gating), on one rank of the TP group:
//   xn = RmsNorm(x) with the layer's ffn_norm
//   p = softmax(xn Wr^T) over the experts (the router, whole on every rank)
//   the experts_used most probable, their p renormalized to sum 1 (norm_topk_prob)
//   y = sum over them, in ascending expert id, of p_e * down_e(silu(gate_e(xn)) * up_e(xn))
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
#include <vector>

#include "ctxpar/gguf.h"
#include "ctxpar/status.h"
#include "ctxpar/thread_pool.h"
#include "models/layers/tp_linear.h"
#include "models/linear.h"

namespace ctxpar::model {

struct MoeShape {
  int dim = 0;
  int experts = 0;
  int experts_used = 0;
  int expert_ffn = 0;
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
};

// blk.N.ffn_gate_inp, ffn_gate_exps, ffn_up_exps, ffn_down_exps of `prefix` ("blk.3."): the
// router and experts [first, first + count) (CTXPAR-MODEL-011 naming the tensor at fault).
Expected<MoeWeights> GgufMoeWeights(const GgufFile& f, const std::string& prefix,
                                    const MoeShape& shape, int first, int count, ActFormat format);

class RoutedMoe {
 public:
  // `tp` and `pool` are not owned and outlive the block.
  RoutedMoe(const MoeShape& shape, float rms_eps, TpLinear* tp, ThreadPool* pool)
      : shape_(shape), rms_eps_(rms_eps), tp_(tp), pool_(pool) {}

  // Returns [n, dim], valid until the next Forward (collective).
  Expected<const float*> Forward(const MoeWeights& w, const float* ffn_norm, const float* x, int n);

 private:
  struct Choice {
    int expert;
    float weight;
  };
  // choices_[t * experts_used ...]: token t's experts, ascending id, and their weights.
  void Route(int n);

  MoeShape shape_;
  float rms_eps_;
  TpLinear* tp_;
  ThreadPool* pool_;
  LineVector<float> xn_, xs_, act_;  // matmul inputs: aligned, read in place
  std::vector<float> logits_, gate_, up_, out_, rows_, y_;
  std::vector<Choice> choices_;
  std::vector<int> picked_;
};

}  // namespace ctxpar::model
