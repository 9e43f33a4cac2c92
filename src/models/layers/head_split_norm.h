// RMSNorm over a row of heads that the TP group holds in parts: OLMo 2 norms q and k over every
// head of the model, while each rank projects some of them (attention_shard.h).
//
// Each rank sums the squares of each head it owns (its own query heads, the KV heads no lower
// rank holds), head by head as RmsNorm sums a row; the group all-reduces those per-head sums,
// where every head has one owner and the others add zeros, so the sum is exact in any order;
// every rank then adds the head sums in head order. The result's bits do not depend on tp, dcp
// or replicated Q: one rank computes the same sequence.
//
// Thread safety: one rank's thread; Run is collective over the TP group.
#pragma once

#include <span>
#include <vector>

#include "compute/compute.h"
#include "ctxpar/communicator.h"
#include "ctxpar/status.h"

namespace ctxpar::model {

// The rank's rows of one normed quantity: rows [n, count * head_dim] hold heads
// [first, first + count) of `total`; it owns [owned_first, owned_first + owned), inside them.
// weight: [total * head_dim], the whole model's.
struct HeadRows {
  float* rows;
  int first;
  int count;
  int owned_first;
  int owned;
  int total;
  const float* weight;
};

class HeadSplitRmsNorm {
 public:
  // Norms each part's rows in place: y = x / sqrt(mean over the whole row of x^2 + eps) * w.
  Status Run(Communicator& tp, compute::Compute& c, std::span<const HeadRows> parts, int n,
             int head_dim, float eps);

 private:
  std::vector<double> sums_;  // [n, sum of the parts' totals]
  std::vector<float> scales_;
};

}  // namespace ctxpar::model
