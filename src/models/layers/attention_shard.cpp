#include "models/layers/attention_shard.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "ctxpar/error_catalog.h"
#include "models/layers/compute_types.h"

namespace ctxpar::model {

HeadShard MakeHeadShard(const HeadLayout& l, const EngineConfig& config, int tp_rank) {
  const int tp = config.tp_size;
  const int dcp = config.dcp_size;
  const bool replicate_q = config.dcp_replicate_q_proj;
  HeadShard s;
  s.tp_rank = tp_rank;
  s.dcp_rank = tp_rank % dcp;
  s.group = tp_rank / dcp;
  s.heads = l.num_heads / tp;
  s.q_heads = replicate_q ? s.heads * dcp : s.heads;
  s.q_first = replicate_q ? s.group * s.heads * dcp : tp_rank * s.heads;
  // The group's query heads [group*h*dcp, (group+1)*h*dcp) read the KV heads below (GQA: query
  // head j reads KV head j / (H / Hkv)); with tp > Hkv they all read one.
  const int group_heads = s.heads * dcp;
  const int per_kv = l.num_heads / l.num_kv_heads;
  s.kv_first = s.group * group_heads / per_kv;
  s.kv_heads = GqaKvHeadsPerRank(l.num_heads, l.num_kv_heads, tp, dcp);
  const int below_end = tp_rank == 0 ? 0 : (tp_rank - 1) / dcp * group_heads / per_kv + s.kv_heads;
  s.kv_owned_first = std::max(s.kv_first, below_end);
  s.kv_owned = s.kv_first + s.kv_heads - s.kv_owned_first;
  const int blocks = l.ffn_dim / kBlock;
  for (int i = 0; i <= tp; ++i) {
    s.head_bounds.push_back(i * s.heads * l.head_dim);
    s.ffn_bounds.push_back(static_cast<int>(int64_t{i} * blocks / tp) * kBlock);
    s.dim_bounds.push_back(static_cast<int>(int64_t{i} * l.dim / tp));
  }
  return s;
}

Expected<HeadShard> DenseModelShard(const HeadLayout& l, std::string_view architecture,
                                    const EngineConfig& config, const Communicator& world) {
  if (world.size() != config.tp_size) {
    return InvalidArgument(fmt::format("tp_size ({}) must equal the TP communicator's size ({})",
                                       config.tp_size, world.size()));
  }
  CTXPAR_RETURN_IF_ERROR(CheckHeadLayout(l, architecture, config.tp_size, config.dcp_size));
  return MakeHeadShard(l, config, world.rank());
}

int GqaKvHeadsPerRank(int num_heads, int num_kv_heads, int tp, int dcp) {
  return std::max(1, num_heads / tp * dcp / (num_heads / num_kv_heads));
}

Status CheckGqaLayout(int num_heads, int kv, int tp, int dcp) {
  auto text = [](int64_t v) { return std::to_string(v); };
  if (num_heads % tp != 0) {
    return CatalogError("CTXPAR-MODEL-002",
                        {{"num_heads", text(num_heads)}, {"tp_size", text(tp)}});
  }
  if (kv % tp != 0 && tp % kv != 0) {
    return CatalogError("CTXPAR-MODEL-003", {{"tp_size", text(tp)}, {"num_kv_heads", text(kv)}});
  }
  if (tp > kv && (tp / kv) % dcp != 0) {
    return CatalogError("CTXPAR-MODEL-004", {{"dcp_size", text(dcp)}, {"replicas", text(tp / kv)}});
  }
  return Status::Ok();
}

Status CheckHeadLayout(const HeadLayout& l, std::string_view architecture, int tp, int dcp) {
  auto text = [](int64_t v) { return std::to_string(v); };
  CTXPAR_RETURN_IF_ERROR(CheckGqaLayout(l.num_heads, l.num_kv_heads, tp, dcp));
  auto shape = [&](std::string_view what, int value, std::string_view rule) {
    return CatalogError("CTXPAR-MODEL-006", {{"what", std::string(what)},
                                             {"architecture", std::string(architecture)},
                                             {"value", text(value)},
                                             {"rule", std::string(rule)}});
  };
  if (l.head_dim % kBlock != 0) {
    return shape("the head dimension", l.head_dim, "it must be a multiple of 32");
  }
  if (l.dim % kBlock != 0) return shape("the hidden size", l.dim, "it must be a multiple of 32");
  if (l.ffn_dim % kBlock != 0 || l.ffn_dim / kBlock < l.num_heads) {
    return shape("the MLP width", l.ffn_dim,
                 "it must be a multiple of 32 with at least one 32-block per attention head");
  }
  return Status::Ok();
}

Status CheckDenseFlags(const ResolvingView& cfg, std::string_view architecture,
                       bool routed_experts) {
  if (routed_experts && cfg.ep_size() != 1 && cfg.ep_size() != cfg.tp_size()) {
    return CatalogError("CTXPAR-MODEL-012", {{"ep_size", std::to_string(cfg.ep_size())},
                                             {"architecture", std::string(architecture)},
                                             {"tp_size", std::to_string(cfg.tp_size())}});
  }
  struct Flag {
    bool given;
    std::string_view flag;
    std::string_view feature;
  };
  const Flag flags[] = {
      {cfg.ep_size() != 1 && !routed_experts, "--ep-size",
       "mixture-of-experts models (expert parallelism)"},
      {cfg.moe_a2a_backend() != "none", "--moe-a2a-backend",
       routed_experts ? "the DeepSeek models' expert dispatch" : "mixture-of-experts models"},
      {cfg.moe_dense_tp_size().has_value(), "--moe-dense-tp-size",
       routed_experts ? "the DeepSeek models' dense layers" : "mixture-of-experts models"},
      {cfg.enable_prefill_cp(), "--enable-prefill-cp",
       "the DeepSeek models (prefill context parallelism)"},
      {cfg.attn_cp_size() != 1, "--attn-cp-size",
       "the DeepSeek models (prefill context parallelism)"},
      {cfg.cp_strategy().has_value(), "--cp-strategy (or --nsa-prefill-cp-mode)",
       "the DeepSeek models (prefill context parallelism)"},
      {cfg.enable_dp_attention(), "--enable-dp-attention", "data-parallel attention"},
  };
  for (const Flag& f : flags) {
    if (f.given) {
      return CatalogError("CTXPAR-MODEL-005", {{"flag", std::string(f.flag)},
                                               {"feature", std::string(f.feature)},
                                               {"architecture", std::string(architecture)}});
    }
  }
  return Status::Ok();
}

}  // namespace ctxpar::model
