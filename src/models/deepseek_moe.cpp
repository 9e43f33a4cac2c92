#include "models/deepseek_moe.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "models/layers/compute_types.h"
#include "models/layers/tp_linear.h"

namespace ctxpar::model {

namespace {

// The first k indices of v by descending value, ties to the lower index.
std::vector<int> TopK(const std::vector<float>& v, int k) {
  std::vector<int> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return v[a] > v[b]; });
  idx.resize(k);
  return idx;
}

}  // namespace

Expected<FfnWeights> LoadFfnWeights(const DeepseekWeights& weights, const DeepseekV3Config& c,
                                    const DeepseekShard& s, int layer) {
  const std::string p = fmt::format("model.layers.{}.", layer);
  const int64_t d = c.hidden_size;
  auto mlp = [&](const std::string& prefix, int64_t total, int64_t first,
                 int64_t count) -> Expected<MlpWeights> {
    MlpWeights m;
    m.inter = static_cast<int>(count);
    CTXPAR_ASSIGN_OR_RETURN(m.gate,
                            LoadRows(weights, prefix + "gate_proj.weight", total, d, first, count));
    CTXPAR_ASSIGN_OR_RETURN(m.up,
                            LoadRows(weights, prefix + "up_proj.weight", total, d, first, count));
    CTXPAR_ASSIGN_OR_RETURN(m.down,
                            LoadCols(weights, prefix + "down_proj.weight", d, total, first, count));
    return m;
  };
  FfnWeights w;
  CTXPAR_ASSIGN_OR_RETURN(w.post_norm,
                          LoadVector(weights, p + "post_attention_layernorm.weight", d));
  w.moe = c.is_moe_layer(layer);
  if (!w.moe) {
    CTXPAR_ASSIGN_OR_RETURN(w.dense,
                            mlp(p + "mlp.", c.intermediate_size, s.dense_first, s.dense_count));
    return w;
  }
  const int E = c.n_routed_experts;
  CTXPAR_ASSIGN_OR_RETURN(w.router, LoadRows(weights, p + "mlp.gate.weight", E, d, 0, E));
  if (!c.softmax_router) {
    CTXPAR_ASSIGN_OR_RETURN(w.bias, LoadVector(weights, p + "mlp.gate.e_score_correction_bias", E));
  }
  for (int e = s.expert_first; e < s.expert_first + s.expert_count; ++e) {
    CTXPAR_ASSIGN_OR_RETURN(MlpWeights m, mlp(fmt::format("{}mlp.experts.{}.", p, e),
                                              c.moe_intermediate_size, s.moe_first, s.moe_count));
    w.experts.push_back(std::move(m));
  }
  if (c.n_shared_experts > 0) {
    CTXPAR_ASSIGN_OR_RETURN(w.shared, mlp(p + "mlp.shared_experts.",
                                          int64_t{c.moe_intermediate_size} * c.n_shared_experts,
                                          s.shared_first, s.shared_count));
  }
  return w;
}

Route RouteToken(const DeepseekV3Config& c, const float* logits, const float* bias) {
  const int E = c.n_routed_experts, per_group = E / c.n_group;
  std::vector<float> score(E), choice(E);
  if (c.softmax_router) {
    // transformers' softmax in float32: exp(l - max) over their sum.
    const float top = *std::max_element(logits, logits + E);
    float sum = 0.0f;
    for (int e = 0; e < E; ++e) sum += (score[e] = std::exp(logits[e] - top));
    for (int e = 0; e < E; ++e) choice[e] = score[e] /= sum;
  } else {
    for (int e = 0; e < E; ++e) {
      score[e] = 1.0f / (1.0f + std::exp(-logits[e]));
      choice[e] = score[e] + bias[e];
    }
  }
  std::vector<float> group_score(c.n_group);
  for (int g = 0; g < c.n_group; ++g) {
    const std::vector<float> members(choice.begin() + g * per_group,
                                     choice.begin() + (g + 1) * per_group);
    const std::vector<int> top = TopK(members, 2);
    group_score[g] = c.softmax_router ? members[top[0]] : members[top[0]] + members[top[1]];
  }
  // The other groups' experts are out of reach whatever their choice: -inf, as transformers 5
  // and llama.cpp mask them (transformers 4 wrote 0, which picks a masked expert once the bias
  // makes a kept choice negative).
  std::vector<float> masked(E, -std::numeric_limits<float>::infinity());
  for (int g : TopK(group_score, c.topk_group)) {
    std::copy_n(choice.begin() + g * per_group, per_group, masked.begin() + g * per_group);
  }
  Route r;
  r.experts = TopK(masked, c.num_experts_per_tok);
  std::sort(r.experts.begin(), r.experts.end());
  float sum = 0.0f;
  for (int e : r.experts) sum += score[e];
  for (int e : r.experts) {
    float w = score[e];
    if (c.norm_topk_prob) w /= sum + 1e-20f;
    r.weights.push_back(w * float(c.routed_scaling_factor));
  }
  return r;
}

void DeepseekFfn::Mlp(const MlpWeights& m, const float* xs, int rows, float* out) {
  const int d = c_.hidden_size, inter = m.inter;
  gate_.resize(std::size_t(rows) * inter);
  up_.resize(gate_.size());
  act_.resize(gate_.size());
  tp_.ColumnParallel({m.gate.data(), inter, d, d}, xs, rows, d, gate_.data(), inter);
  tp_.ColumnParallel({m.up.data(), inter, d, d}, xs, rows, d, up_.data(), inter);
  tp_.compute().Gated(GatedActivation::kSwiGlu, compute::F32(gate_.data(), rows, inter),
                      compute::F32(up_.data(), rows, inter),
                      compute::F32(act_.data(), rows, inter));
  tp_.RowParallelPartial({m.down.data(), d, inter, inter}, act_.data(), rows, inter, out, d);
}

void DeepseekFfn::RoutedExperts(const FfnWeights& w, const std::vector<Route>& routes,
                                const float* xs, int rows, float* y) {
  const int d = c_.hidden_size;
  for (int li = 0; li < s_.expert_count; ++li) {
    const int e = s_.expert_first + li;
    rows_.clear();
    std::vector<float> weight;
    for (int t = 0; t < rows; ++t) {
      const Route& r = routes[t];
      for (std::size_t j = 0; j < r.experts.size(); ++j) {
        if (r.experts[j] == e) {
          rows_.push_back(t);
          weight.push_back(r.weights[j]);
        }
      }
    }
    if (rows_.empty()) continue;
    const int n = static_cast<int>(rows_.size());
    GatherRows(xs, d, rows_, xs_);
    out_.resize(std::size_t(n) * d);
    Mlp(w.experts[li], xs_.data(), n, out_.data());
    for (int i = 0; i < n; ++i) {
      float* yt = y + std::size_t(rows_[i]) * d;
      for (int k = 0; k < d; ++k) yt[k] += out_[std::size_t(i) * d + k] * weight[i];
    }
  }
}

Status DeepseekFfn::Run(const FfnWeights& w, int T, float* x) {
  const int d = c_.hidden_size;
  const std::size_t n = std::size_t(T) * d;
  xn_.resize(n);
  tp_.compute().RmsNorm(compute::F32(x, T, d), w.post_norm.data(), float(c_.rms_norm_eps),
                        compute::F32(xn_.data(), T, d));
  if (w.moe && s_.deepep) return Deepep(w, T, x);
  y_.assign(n, 0.0f);
  bool reduce = true;
  if (!w.moe) {
    Mlp(w.dense, xn_.data(), T, y_.data());
    reduce = !s_.dense_replicated;
  } else {
    const int E = c_.n_routed_experts;
    logits_.resize(std::size_t(T) * E);
    tp_.ColumnParallel({w.router.data(), E, d, d}, xn_.data(), T, d, logits_.data(), E);
    routes_.clear();
    for (int t = 0; t < T; ++t) {
      routes_.push_back(RouteToken(c_, logits_.data() + std::size_t(t) * E, w.bias.data()));
    }
    RoutedExperts(w, routes_, xn_.data(), T, y_.data());
    if (!w.shared.gate.empty()) {
      out_.resize(n);
      Mlp(w.shared, xn_.data(), T, out_.data());
      for (std::size_t i = 0; i < n; ++i) y_[i] += out_[i];
    }
  }
  if (reduce) CTXPAR_RETURN_IF_ERROR(tp_.ReducePartials(y_.data(), n));
  for (std::size_t i = 0; i < n; ++i) x[i] += y_[i];
  return Status::Ok();
}

// DeepEP's semantics over the communicator: a token goes once to each rank that owns one of its
// experts, as [hidden | expert ids (-1: not that rank's) | weights]; the owner returns one
// weighted sum per token; the home rank adds the returns in rank order.
Status DeepseekFfn::Deepep(const FfnWeights& w, int T, float* x) {
  const int d = c_.hidden_size, E = c_.n_routed_experts, k = c_.num_experts_per_tok;
  const int tp = s_.tp_size, me = s_.tp_rank, rec = d + 2 * k;
  const int home = (T + tp - 1) / tp;
  const int first = std::min(T, me * home), mine = std::min(T, first + home) - first;
  const float* xs = xn_.data() + std::size_t(first) * d;
  logits_.resize(std::size_t(mine) * E);
  tp_.ColumnParallel({w.router.data(), E, d, d}, xs, mine, d, logits_.data(), E);
  routes_.clear();
  for (int t = 0; t < mine; ++t) {
    routes_.push_back(RouteToken(c_, logits_.data() + std::size_t(t) * E, w.bias.data()));
  }
  auto owner = [&](int e) { return e / s_.expert_count; };
  auto sends_to = [&](const Route& r, int j) {
    return std::any_of(r.experts.begin(), r.experts.end(), [&](int e) { return owner(e) == j; });
  };
  // Dispatch.
  send_.clear();
  counts_.assign(tp, 0);
  displs_.assign(tp, 0);
  std::vector<int32_t> records(tp, 0);
  for (int j = 0; j < tp; ++j) {
    displs_[j] = send_.size();
    for (int t = 0; t < mine; ++t) {
      const Route& r = routes_[t];
      if (!sends_to(r, j)) continue;
      send_.insert(send_.end(), xs + std::size_t(t) * d, xs + std::size_t(t + 1) * d);
      for (int e : r.experts) send_.push_back(owner(e) == j ? float(e) : -1.0f);
      send_.insert(send_.end(), r.weights.begin(), r.weights.end());
      ++records[j];
    }
    counts_[j] = send_.size() - displs_[j];
  }
  std::vector<int32_t> incoming(tp, 0);
  CTXPAR_RETURN_IF_ERROR(tp_.world().AllToAll(records.data(), incoming.data(), 1, DataType::kI32));
  recv_counts_.assign(tp, 0);
  recv_displs_.assign(tp, 0);
  std::size_t total = 0;
  for (int j = 0; j < tp; ++j) {
    recv_displs_[j] = total;
    recv_counts_[j] = std::size_t(incoming[j]) * rec;
    total += recv_counts_[j];
  }
  recv_.resize(total);
  CTXPAR_RETURN_IF_ERROR(tp_.world().AllToAllV(send_.data(), counts_, displs_, recv_.data(),
                                               recv_counts_, recv_displs_, DataType::kF32));
  // The owners' experts, for every received token.
  const int received = static_cast<int>(total / rec);
  std::vector<Route> got(received);
  std::vector<float> got_x(std::size_t(received) * d);
  for (int i = 0; i < received; ++i) {
    const float* r = recv_.data() + std::size_t(i) * rec;
    std::copy_n(r, d, got_x.data() + std::size_t(i) * d);
    for (int j = 0; j < k; ++j) {
      if (r[d + j] < 0.0f) continue;
      got[i].experts.push_back(static_cast<int>(r[d + j]));
      got[i].weights.push_back(r[d + k + j]);
    }
  }
  std::vector<float> sums(std::size_t(received) * d, 0.0f);
  RoutedExperts(w, got, got_x.data(), received, sums.data());
  // Combine: the sums travel back the way their tokens came.
  std::vector<std::size_t> back_counts(tp), back_displs(tp), home_counts(tp), home_displs(tp);
  std::size_t home_total = 0;
  for (int j = 0; j < tp; ++j) {
    back_counts[j] = std::size_t(incoming[j]) * d;
    back_displs[j] = recv_displs_[j] / rec * d;
    home_counts[j] = std::size_t(records[j]) * d;
    home_displs[j] = home_total;
    home_total += home_counts[j];
  }
  std::vector<float> back(home_total);
  CTXPAR_RETURN_IF_ERROR(tp_.world().AllToAllV(sums.data(), back_counts, back_displs, back.data(),
                                               home_counts, home_displs, DataType::kF32));
  y_.assign(std::size_t(home) * d, 0.0f);
  for (int j = 0; j < tp; ++j) {
    const float* b = back.data() + home_displs[j];
    for (int t = 0; t < mine; ++t) {
      if (!sends_to(routes_[t], j)) continue;
      for (int e = 0; e < d; ++e) y_[std::size_t(t) * d + e] += b[e];
      b += d;
    }
  }
  if (!w.shared.gate.empty()) {
    out_.resize(std::size_t(mine) * d);
    Mlp(w.shared, xs, mine, out_.data());
    for (std::size_t i = 0; i < out_.size(); ++i) y_[i] += out_[i];
  }
  scratch_.resize(y_.size() * tp);
  CTXPAR_RETURN_IF_ERROR(
      tp_.world().AllGather(y_.data(), scratch_.data(), y_.size(), DataType::kF32));
  for (std::size_t i = 0; i < std::size_t(T) * d; ++i) x[i] += scratch_[i];
  return Status::Ok();
}

}  // namespace ctxpar::model
