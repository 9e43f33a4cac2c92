#include "models/layers/routed_moe.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "models/layers/compute_types.h"
#include "models/layers/gguf_weights.h"

namespace ctxpar::model {

namespace {

// p = softmax(p) over n values, in float: exp(p - max), summed in order, each divided by the sum.
void Softmax(float* p, int n) {
  const float max = *std::max_element(p, p + n);
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum += p[i] = std::exp(p[i] - max);
  for (int i = 0; i < n; ++i) p[i] /= sum;
}

}  // namespace

std::vector<std::string_view> MoeTensors(const MoeShape& shape) {
  std::vector<std::string_view> names = {"ffn_gate_inp.weight", "ffn_gate_exps.weight",
                                         "ffn_up_exps.weight", "ffn_down_exps.weight"};
  if (shape.biases) {
    names.insert(names.end(), {"ffn_gate_inp.bias", "ffn_gate_exps.bias", "ffn_up_exps.bias",
                               "ffn_down_exps.bias"});
  }
  return names;
}

Expected<MoeWeights> GgufMoeWeights(const GgufFile& f, const std::string& prefix, const MoeShape& s,
                                    int first, int count, ActFormat format) {
  MoeWeights w;
  w.first_expert = first;
  CTXPAR_ASSIGN_OR_RETURN(w.router,
                          GgufMatrix(f, prefix + "ffn_gate_inp.weight", s.dim, s.experts, format));
  CTXPAR_ASSIGN_OR_RETURN(const QuantMatrix gate, GgufExperts(f, prefix + "ffn_gate_exps.weight",
                                                              s.dim, s.expert_ffn, s.experts));
  CTXPAR_ASSIGN_OR_RETURN(const QuantMatrix up, GgufExperts(f, prefix + "ffn_up_exps.weight", s.dim,
                                                            s.expert_ffn, s.experts));
  CTXPAR_ASSIGN_OR_RETURN(const QuantMatrix down, GgufExperts(f, prefix + "ffn_down_exps.weight",
                                                              s.expert_ffn, s.dim, s.experts));
  for (const QuantMatrix* m : {&gate, &up, &down}) {
    CTXPAR_RETURN_IF_ERROR(CheckActFormat(format, m->type));
  }
  if (s.biases) {
    CTXPAR_RETURN_IF_ERROR(
        GgufVectors(f, prefix,
                    {{&w.router_bias, "ffn_gate_inp.bias", s.experts},
                     {&w.gate_bias, "ffn_gate_exps.bias", int64_t{s.experts} * s.expert_ffn},
                     {&w.up_bias, "ffn_up_exps.bias", int64_t{s.experts} * s.expert_ffn},
                     {&w.down_bias, "ffn_down_exps.bias", int64_t{s.experts} * s.dim}}));
  }
  for (int e = first; e < first + count; ++e) {
    w.gate.push_back(WithInt8Pack(gate.RowRange(e * s.expert_ffn, s.expert_ffn), format));
    w.up.push_back(WithInt8Pack(up.RowRange(e * s.expert_ffn, s.expert_ffn), format));
    w.down.push_back(WithInt8Pack(down.RowRange(e * s.dim, s.dim), format));
  }
  return w;
}

void RoutedMoe::Route(const float* router_bias, int n) {
  const int experts = shape_.experts, used = shape_.experts_used;
  const bool softmax_first = shape_.routing == MoeRouting::kSoftmaxTopK;
  choices_.resize(std::size_t(n) * used);
  picked_.resize(experts);
  std::vector<float> p(experts), chosen(used);
  std::vector<int> order(used);
  for (int t = 0; t < n; ++t) {
    float* l = logits_.data() + std::size_t(t) * experts;
    if (router_bias != nullptr) {
      for (int e = 0; e < experts; ++e) l[e] += router_bias[e];
    }
    // p: the probabilities (kSoftmaxTopK) or the logits (kTopKSoftmax) that rank the experts.
    std::copy(l, l + experts, p.begin());
    if (softmax_first) Softmax(p.data(), experts);
    // The largest first, the lower id among equals.
    std::iota(picked_.begin(), picked_.end(), 0);
    std::partial_sort(picked_.begin(), picked_.begin() + used, picked_.end(),
                      [&](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    for (int k = 0; k < used; ++k) chosen[k] = p[picked_[k]];
    if (softmax_first) {
      float total = 0.0f;
      for (int k = 0; k < used; ++k) total += chosen[k];
      for (float& c : chosen) c /= total;
    } else {
      Softmax(chosen.data(), used);
    }
    // Ascending expert id, each with its weight.
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return picked_[a] < picked_[b]; });
    Choice* c = choices_.data() + std::size_t(t) * used;
    for (int k = 0; k < used; ++k) c[k] = {picked_[order[k]], chosen[order[k]]};
  }
}

Expected<const float*> RoutedMoe::Forward(const MoeWeights& w, const float* ffn_norm,
                                          const float* x, int n) {
  using compute::F32;
  compute::Compute& c = tp_->compute();
  const int dim = shape_.dim, ffn = shape_.expert_ffn, used = shape_.experts_used;
  xn_.resize(std::size_t(n) * dim);
  c.RmsNorm(F32(x, n, dim), ffn_norm, rms_eps_, F32(xn_.data(), n, dim));
  logits_.resize(std::size_t(n) * shape_.experts);
  const MatMulOut router[] = {{w.router, logits_.data(), shape_.experts}};
  tp_->ColumnParallel(router, xn_.data(), n, dim);
  Route(w.router_bias, n);
  // rows_[(t * used + k) * dim]: choice k of token t, weighted, where this rank holds its expert.
  rows_.assign(std::size_t(n) * used * dim, 0.0f);
  std::vector<int> slots;
  for (int i = 0; i < static_cast<int>(w.gate.size()); ++i) {
    const int expert = w.first_expert + i;
    slots.clear();
    for (int s = 0; s < n * used; ++s) {
      if (choices_[s].expert == expert) slots.push_back(s);
    }
    if (slots.empty()) continue;
    const int m = static_cast<int>(slots.size());
    xs_.resize(std::size_t(m) * dim);
    for (int r = 0; r < m; ++r) {
      const float* src = xn_.data() + std::size_t(slots[r] / used) * dim;
      std::copy(src, src + dim, xs_.data() + std::size_t(r) * dim);
    }
    gate_.resize(std::size_t(m) * ffn);
    up_.resize(gate_.size());
    act_.resize(gate_.size());
    const MatMulOut gate_up[] = {{w.gate[i], gate_.data(), ffn}, {w.up[i], up_.data(), ffn}};
    tp_->ColumnParallel(gate_up, xs_.data(), m, dim);
    if (w.gate_bias != nullptr) {
      c.AddBias(F32(gate_.data(), m, ffn), w.gate_bias + std::size_t(expert) * ffn);
      c.AddBias(F32(up_.data(), m, ffn), w.up_bias + std::size_t(expert) * ffn);
    }
    c.Gated(shape_.activation, F32(gate_.data(), m, ffn), F32(up_.data(), m, ffn),
            F32(act_.data(), m, ffn));
    out_.resize(std::size_t(m) * dim);
    const MatMulOut down[] = {{w.down[i], out_.data(), dim}};
    tp_->ColumnParallel(down, act_.data(), m, ffn);
    if (w.down_bias != nullptr) {
      c.AddBias(F32(out_.data(), m, dim), w.down_bias + std::size_t(expert) * dim);
    }
    for (int r = 0; r < m; ++r) {
      const float weight = choices_[slots[r]].weight;
      float* dst = rows_.data() + std::size_t(slots[r]) * dim;
      for (int col = 0; col < dim; ++col) dst[col] = out_[std::size_t(r) * dim + col] * weight;
    }
  }
  if (tp_->size() > 1) {
    CTXPAR_RETURN_IF_ERROR(tp_->world().AllReduce(rows_.data(), rows_.data(), rows_.size(),
                                                  DataType::kF32, ReduceOp::kSum));
  }
  y_.assign(std::size_t(n) * dim, 0.0f);
  for (int t = 0; t < n; ++t) {
    float* y = y_.data() + std::size_t(t) * dim;
    for (int k = 0; k < used; ++k) {
      const float* row = rows_.data() + (std::size_t(t) * used + k) * dim;
      for (int c = 0; c < dim; ++c) y[c] += row[c];
    }
  }
  return y_.data();
}

}  // namespace ctxpar::model
